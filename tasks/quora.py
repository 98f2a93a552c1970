"""Quora Question Pairs: are two questions paraphrases of each other? Labels 0 / 1 (written 0.0 /
1.0 in the files). One logit, BCE loss. Metric: accuracy.

The test file ``quora-test-student.csv`` is optional (``scripts/get_data.py`` fetches it where it
can; data/README.md says where it comes from); the driver skips a missing test file with a
message."""

from tasks.base import BinaryTask, register

QUORA = register(
    BinaryTask(
        name="para",
        description="Quora question pairs, paraphrase or not (binary, one logit)",
        files={
            "train": "quora-train.csv",
            "dev": "quora-dev.csv",
            "test": "quora-test-student.csv",
        },
        text_columns=["sentence1", "sentence2"],
        symmetric=True,
        label_column="is_duplicate",
        prediction_header="Predicted_Is_Paraphrase",
    )
)
