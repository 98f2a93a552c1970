"""How a multitask run is built, trained, saved and served, on top of ``tasks/`` (what a task is)
and ``minbert/`` (the model library).

    model.py        ModelSettings, MultitaskModel, build_model: the shared BERT with a head per task
    step.py         one training step: a batch's loss (SMART included) and the update
    evaluation.py   head outputs, predictions and dev metrics over a list of examples
    data.py         every split of the chosen tasks, read and reported
    collate.py      examples -> tokenized batches
    batching.py     length-grouped batches, resumable batch streams
    devices.py      CPU, CUDA, bf16 autocast and torchrun processes
    run.py          RunFolder: everything a run writes and reads; merge_config
    errors.py       UsageError, RunStopped, run_command: one line, no traceback
    trained.py      a finished run opened outside the driver
    predict.py      python -m multitask.predict: a run's predictions on your sentences
    export.py       python -m multitask.export: a run in the Hugging Face layout
"""
