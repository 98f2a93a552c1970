"""CFIMDB: binary sentiment of (long) IMDB movie reviews, from the course's counterfactually
augmented IMDB set (Kaushik et al. 2020). Labels 0 = negative, 1 = positive. Metric: accuracy.

Treated as a 2-class task (two logits, cross-entropy) as in the course's single-task classifier
script."""

from tasks.base import MultiClassTask, register

CFIMDB = register(
    MultiClassTask(
        name="cfimdb",
        description="CFIMDB movie-review sentiment, 2 classes (0 negative, 1 positive)",
        files={
            "train": "ids-cfimdb-train.csv",
            "dev": "ids-cfimdb-dev.csv",
            "test": "ids-cfimdb-test-student.csv",
        },
        text_columns=["sentence"],
        label_column="sentiment",
        num_classes=2,
        prediction_header="Predicted_Sentiment",
    )
)
