"""STS-B: Semantic Textual Similarity Benchmark (Cer et al. 2017). Similarity of two sentences on a
0.0 (unrelated) .. 5.0 (same meaning) scale; regression with MSE. Metric: Pearson's r."""

from tasks.base import RegressionTask, register

STS = register(
    RegressionTask(
        name="sts",
        description="STS-B sentence-pair similarity, regression on 0..5",
        files={
            "train": "sts-train.csv",
            "dev": "sts-dev.csv",
            "test": "sts-test-student.csv",
        },
        text_columns=["sentence1", "sentence2"],
        symmetric=True,
        label_column="similarity",
        low=0.0,
        high=5.0,
        prediction_header="Predicted_Similiarity",
    )
)
