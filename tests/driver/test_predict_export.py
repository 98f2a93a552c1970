"""Using a trained run outside the driver: ``python -m tools.predict`` reproduces the run's own
prediction files bit for bit from every input format, keeps order and line count around bad
lines; ``python -m tools.export`` writes directories that Hugging Face ``transformers`` loads
into the same encoder (within 1e-5) and tokenizes identically, and refuses what it cannot hold."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from minbert.tokenizer import Tokenizer
from multitask.collate import Batch
from multitask.trained import TrainedRun
from tasks import get_task
from tasks.base import read_predictions
from tests.helpers import tiny_run
from tools import export as export_command
from tools import predict as predict_command

TASKS = ("sst", "para", "sts")


@pytest.fixture(scope="module")
def runs(tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    """Tiny finished runs of every option, and sts added to an adapter run of sst,para."""
    root = tmp_path_factory.mktemp("runs")
    made = {
        o: tiny_run(tiny_checkpoint, tiny_data, root / o, "--option", o)
        for o in ("finetune", "pretrain", "lora", "adapter", "pals", "lhuc")
    }
    base = tiny_run(
        tiny_checkpoint, tiny_data, root / "base", "--option", "adapter", "--tasks", "sst,para"
    )
    made["base"] = base
    made["add_to"] = tiny_run(
        tiny_checkpoint, tiny_data, root / "added", "--add_to", str(base), "--tasks", "sts"
    )
    return made


def dev_examples(data: Path, task: str):
    examples, skipped = get_task(task).read(data / get_task(task).files["dev"])
    assert not skipped
    return examples


def predict_lines(
    tmp_path: Path, run_dir: Path, task: str, text: str | bytes, *extra: str, suffix: str = ".txt"
) -> tuple[int, list[str]]:
    """Run the command on ``text`` written to a file; (exit code, output lines)."""
    source, output = tmp_path / f"input{suffix}", tmp_path / f"output{suffix}"
    source.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    argv = [str(run_dir), "--task", task, "--input", str(source), "--output", str(output)]
    argv.append("--overwrite")  # the same output file, call after call
    code = predict_command.main([*argv, *extra])
    return code, output.read_text(encoding="utf-8").splitlines() if code == 0 else []


def as_text(examples) -> str:
    return "".join("\t".join(e.texts) + "\n" for e in examples)


def assert_same_as_run(task: str, lines: list[str], run_dir: Path, examples) -> None:
    """Output values (text format) equal the run's <task>-dev-output.csv, bit for bit."""
    _, rows = read_predictions(run_dir / f"{task}-dev-output.csv")
    expected = dict(rows)
    assert len(lines) == len(examples)
    for line, example in zip(lines, examples):
        if task == "para":  # the file has the class; the command gives the probability
            assert str(int(float(line) > 0.5)) == expected[example.id]
        else:
            assert float(line) == float(expected[example.id])


@pytest.mark.parametrize(
    "option", ["finetune", "pretrain", "lora", "adapter", "pals", "lhuc", "add_to"]
)
def test_predict_reproduces_the_runs_dev_predictions(option, runs, tiny_data, tmp_path):
    """From RUN_DIR alone; an --add_to run answers for the earlier run's tasks too (whose
    prediction files are in that run's folder: the tasks stayed bit-identical)."""
    for task in TASKS:
        examples = dev_examples(tiny_data, task)
        code, lines = predict_lines(tmp_path, runs[option], task, as_text(examples))
        assert code == 0
        wrote = runs["base"] if option == "add_to" and task != "sts" else runs[option]
        assert_same_as_run(task, lines, wrote, examples)


def test_plugin_run_loads_only_the_tasks_file(runs):
    """An adapter run's model for sts holds sts's plug-ins and head only."""
    model = TrainedRun(runs["adapter"]).task_model("sts")
    assert list(model.heads) == ["sts"]
    assert list(model.bert.plugins["adapter"].by_task) == ["sts"]


def test_every_input_format_gives_the_same_predictions(runs, tiny_data, tmp_path):
    run_dir = runs["adapter"]
    for task in TASKS:
        examples = dev_examples(tiny_data, task)
        _, text = predict_lines(tmp_path, run_dir, task, as_text(examples))
        columns = ["sentence1", "sentence2"] if len(examples[0].texts) == 2 else ["sentence"]
        # CSV with a comma, quoting where needed, extra columns ignored.
        csv_input = (
            "id,"
            + ",".join(columns)
            + "\n"
            + "".join(
                f"{e.id}," + ",".join('"' + t.replace('"', '""') + '"' for t in e.texts) + "\n"
                for e in examples
            )
        )
        _, csv_out = predict_lines(tmp_path, run_dir, task, csv_input, suffix=".csv")
        jsonl = "".join(json.dumps(dict(zip(columns, e.texts))) + "\n" for e in examples)
        _, jsonl_out = predict_lines(tmp_path, run_dir, task, jsonl, suffix=".jsonl")
        # The course's own tab-separated file, read by its header.
        course = (tiny_data / get_task(task).files["dev"]).read_text()
        _, course_out = predict_lines(tmp_path, run_dir, task, course, suffix=".csv")
        field = {"sst": "class", "para": "probability", "sts": "score"}[task]
        assert csv_out[0] == field and course_out[0] == field
        assert csv_out[1:] == text and course_out[1:] == text
        assert [repr(json.loads(line)[field]) for line in jsonl_out] == [
            repr(float(v)) if task != "sst" else v for v in text
        ]


def test_probabilities(runs, tiny_data, tmp_path):
    examples = dev_examples(tiny_data, "sst")
    _, lines = predict_lines(tmp_path, runs["finetune"], "sst", as_text(examples))
    _, with_p = predict_lines(
        tmp_path, runs["finetune"], "sst", as_text(examples), "--probabilities"
    )
    for plain, line in zip(lines, with_p):
        label, *probabilities = line.split("\t")
        p = [float(x) for x in probabilities]
        assert label == plain and len(p) == 5
        assert abs(sum(p) - 1) < 1e-6 and max(range(5), key=p.__getitem__) == int(label)


def test_bad_lines_keep_order_and_count(runs, tiny_data, tmp_path, capsys):
    examples = dev_examples(tiny_data, "sts")
    good = [("\t".join(e.texts) + "\n").encode() for e in examples]
    bad = {
        3: b"\n",
        5: "a film\t\u200b\n".encode(),
        6: b"only one sentence\n",
        9: b"\xff\xfe broken\ttext\n",
        11: b"a\tb\tc\n",
    }
    lines = list(good)
    for number in sorted(bad):
        lines.insert(number - 1, bad[number])
    code, out = predict_lines(tmp_path, runs["lora"], "sts", b"".join(lines))
    assert code == 0 and len(out) == len(lines)
    _, alone = predict_lines(tmp_path, runs["lora"], "sts", b"".join(good))
    assert [line for n, line in enumerate(out, 1) if n not in bad] == alone
    assert all(out[n - 1] == "" for n in bad)
    err = capsys.readouterr().err
    for number, reason in [
        (3, "empty line"),
        (5, "empty sentence2"),
        (6, "found 1 tab-separated"),
        (9, "not valid UTF-8"),
        (11, "found 3 tab-separated"),
    ]:
        line = next(x for x in err.splitlines() if f"input.txt:{number}: " in x)
        assert reason in line
    assert f"5 of {len(lines)} lines could not be read" in err
    # JSON Lines: the bad line's output names what was wrong.
    jsonl = b'{"sentence": "good film"}\n{"text": "no key"}\nnot json\n'
    code, out = predict_lines(tmp_path, runs["lora"], "sst", jsonl, suffix=".jsonl")
    assert code == 0 and len(out) == 3
    assert set(json.loads(out[0])) == {"class"}
    assert "sentence" in json.loads(out[1])["error"] and "JSON" in json.loads(out[2])["error"]
    # --strict: the first bad line is the error, and nothing is written.
    code, _ = predict_lines(tmp_path, runs["lora"], "sts", b"".join(lines), "--strict")
    assert code == 2
    assert "input.txt:3: empty" in capsys.readouterr().err


def test_standard_input(runs, monkeypatch, capsys):
    stdin = io.TextIOWrapper(io.BytesIO(b"a great film\nan awful film\n"))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert predict_command.main([str(runs["finetune"]), "--task", "sst", "--input", "-"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line in "01234" for line in out)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--task", "cfimdb", "--input", "x"], "was trained on sst, para, sts"),
        (["--task", "sst", "--input", "missing.txt"], "--input missing.txt: file not found"),
        (["--task", "sst", "--input", "-", "--batch_size", "0"], "--batch_size 0"),
    ],
)
def test_predict_usage_errors(argv, words, runs, capsys):
    assert predict_command.main([str(runs["finetune"]), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0]


def test_predict_a_folder_that_is_no_run(tmp_path, capsys):
    assert predict_command.main([str(tmp_path), "--task", "sst", "--input", "-"]) == 2
    assert "config.json not found" in capsys.readouterr().err


# -- export ----------------------------------------------------------------------------------


SENTENCES = [
    "Café déjà vu: a naïve résumé!",
    "Hello,world...(test) — “quoted” 'text'",
    "xqzzyt blorfing unknownword ☃ 東京",
    "The cat sat on the mat.",
]


def hf_hidden(directory: Path, batch: dict) -> torch.Tensor:
    from transformers import BertModel

    model = BertModel.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        return model(**batch).last_hidden_state


def minbert_hidden(run_dir: Path, task: str, batch: dict) -> torch.Tensor:
    model = TrainedRun(run_dir).task_model(task)
    with torch.no_grad():
        return model.bert(**batch, task=task)["last_hidden_state"]


def tokenized(run_dir: Path) -> dict:
    batch = TrainedRun(run_dir).tokenizer()(SENTENCES)
    return {k: v for k, v in batch.items() if k != "num_truncated"}


@pytest.mark.numerics
def test_export_finetune_loads_in_transformers(runs, tmp_path):
    out = tmp_path / "export"
    assert export_command.main([str(runs["finetune"]), str(out)]) == 0
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()
    }
    batch = tokenized(runs["finetune"])
    ours = minbert_hidden(runs["finetune"], "sst", batch)
    assert (hf_hidden(out, batch) - ours).abs().max() < 1e-5
    # The head file, applied as its description says, gives the run's head outputs.
    from safetensors.torch import load_file

    description = json.loads((out / "head-sst.json").read_text())
    assert "mean of last_hidden_state" in description["sentence_vector"]
    head = load_file(str(out / "head-sst.safetensors"))
    assert description["tensors"] == {k: list(v.shape) for k, v in head.items()}
    mask = batch["attention_mask"].unsqueeze(-1).float()
    r = (hf_hidden(out, batch) * mask).sum(1) / mask.sum(1)
    model = TrainedRun(runs["finetune"]).task_model("sst")
    with torch.no_grad():
        expected = model("sst", Batch([batch], None))
    assert (r @ head["linear.weight"].T + head["linear.bias"] - expected).abs().max() < 1e-5


@pytest.mark.numerics
def test_export_lora_merges_per_task(runs, tmp_path):
    out = tmp_path / "export"
    assert export_command.main([str(runs["lora"]), str(out)]) == 0
    batch = tokenized(runs["lora"])
    hidden = {}
    for task in TASKS:
        assert (out / task / f"head-{task}.safetensors").is_file()
        hidden[task] = hf_hidden(out / task, batch)
        ours = minbert_hidden(runs["lora"], task, batch)
        assert (hidden[task] - ours).abs().max() < 1e-5
    assert (hidden["sst"] - hidden["sts"]).abs().max() > 1e-4  # each task its own update


def test_export_pretrain_keeps_the_base_encoder_and_says_pairs_are_encoded_apart(runs, tmp_path):
    out = tmp_path / "export"
    assert export_command.main([str(runs["pretrain"]), str(out)]) == 0
    batch = tokenized(runs["pretrain"])
    assert (
        hf_hidden(out, batch) - minbert_hidden(runs["pretrain"], "sts", batch)
    ).abs().max() < 1e-5
    description = json.loads((out / "head-sts.json").read_text())
    assert "encoded on its own" in description["input"]
    assert description["head"].startswith("CosineSimilarityHead")


def test_exported_tokenizer_gives_minberts_ids(runs, tmp_path):
    from transformers import BertTokenizer

    out = tmp_path / "export"
    assert export_command.main([str(runs["finetune"]), str(out)]) == 0
    ours = Tokenizer.from_checkpoint(out, max_length=128)
    theirs = BertTokenizer.from_pretrained(str(out))
    for sentence in SENTENCES:
        ids = ours([sentence])["input_ids"][0].tolist()
        assert theirs(sentence)["input_ids"] == ids
    assert theirs.unk_token_id in ours([SENTENCES[2]])["input_ids"][0].tolist()  # unknown: ☃
    pair = ours(["a question?"], ["Another one!"])
    encoded = theirs("a question?", "Another one!")
    assert encoded["input_ids"] == pair["input_ids"][0].tolist()
    assert encoded["token_type_ids"] == pair["token_type_ids"][0].tolist()


def test_export_refuses_adapter_runs_and_existing_folders(runs, tmp_path, capsys):
    assert export_command.main([str(runs["adapter"]), str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "adapter plug-ins" in err[0] and "task-<task>.safetensors" in err[0]
    assert not (tmp_path / "a").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):  # a folder of the user's files is never replaced
        assert export_command.main([str(runs["finetune"]), str(existing), *extra]) == 2
        assert "not an earlier export" in capsys.readouterr().err
        assert (existing / "keep.txt").read_text() == "mine"
    exported = tmp_path / "exported"
    assert export_command.main([str(runs["finetune"]), str(exported)]) == 0
    assert export_command.main([str(runs["finetune"]), str(exported)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert export_command.main([str(runs["finetune"]), str(exported), "--overwrite"]) == 0
    assert (exported / "config.json").is_file() and (exported / "export.json").is_file()


@pytest.mark.parametrize("option, weights", [("adapter", "task-sst"), ("finetune", "best")])
def test_nan_in_the_trained_weights_is_named_not_printed(option, weights, runs, tmp_path, capsys):
    """predict on a run whose weights file holds NaN ends with one line naming that file, exit
    3, never nan probabilities with exit 0."""
    run = tmp_path / option
    shutil.copytree(runs[option], run)
    path = run / f"{weights}.safetensors"
    tensors = load_file(path)
    head = next(k for k in tensors if k.startswith("heads.sst."))
    tensors[head] = torch.full_like(tensors[head], float("nan"))
    save_file(tensors, path)
    sentences = tmp_path / "in.txt"
    sentences.write_text("a fine film\n")
    argv = [str(run), "--task", "sst", "--input", str(sentences), "--probabilities"]
    assert predict_command.main(argv) == 3
    err = capsys.readouterr().err
    assert f"{path} holds NaN or inf" in err and err.count("\n") == 1


def test_probabilities_of_a_score_are_refused(runs, tmp_path, capsys):
    sentences = tmp_path / "in.txt"
    sentences.write_text("a cat sat\ta dog ran\n")
    argv = [str(runs["finetune"]), "--task", "sts", "--input", str(sentences), "--probabilities"]
    assert predict_command.main(argv) == 2
    assert "--probabilities: task sts gives a score, not classes" in capsys.readouterr().err
