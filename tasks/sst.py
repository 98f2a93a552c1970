"""SST-5: Stanford Sentiment Treebank, five-way sentiment of movie-review sentences (Socher et al.
2013). Labels 0 = negative, 1 = somewhat negative, 2 = neutral, 3 = somewhat positive,
4 = positive. Metric: accuracy."""

from tasks.base import MultiClassTask, register

SST = register(
    MultiClassTask(
        name="sst",
        description="SST-5 sentence sentiment, 5 classes (0 negative .. 4 positive)",
        files={
            "train": "ids-sst-train.csv",
            "dev": "ids-sst-dev.csv",
            "test": "ids-sst-test-student.csv",
        },
        text_columns=["sentence"],
        label_column="sentiment",
        num_classes=5,
        prediction_header="Predicted_Sentiment",
    )
)
