"""Smoke tests of train_multitask.py on a tiny random checkpoint and tiny synthetic data."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

import train_multitask
from minbert.tokenizer import Tokenizer
from multitask.evaluation import predictions
from multitask.model import build_model
from multitask.run import RunFolder
from tasks import get_task
from tests.helpers import run_driver

PREDICTION_FILES = [
    f"{task}-{split}-output.csv" for task in ("sst", "para", "sts") for split in ("dev", "test")
]


def run(tiny_checkpoint: Path, tiny_data: Path, out_dir: Path, *extra: str) -> int:
    """A tiny run of 2 epochs of 3 steps."""
    short = ("--epochs", "2", "--steps_per_epoch", "3")
    return run_driver(tiny_checkpoint, tiny_data, out_dir, *short, *extra)


def rebuilt(run_dir: Path):
    """A finished run rebuilt as --resume configures it: its config, its model (with the runs it
    was added to loaded), its data and tokenizer."""
    cfg = train_multitask.parse_args(["--out_dir", str(run_dir), "--resume"])
    model = train_multitask.make_model(cfg, torch.device("cpu"))
    data, _ = train_multitask.read_data(cfg)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, cfg.model.max_length)
    return cfg, model, data, tokenizer


def dev_predictions(model, name: str, data, tokenizer, cfg) -> dict[str, float]:
    examples = data[name]["dev"]
    found = predictions(
        model, get_task(name), examples, tokenizer, 2 * cfg.batch_size, torch.device("cpu")
    )
    return {e.id: float(p) for e, p in zip(examples, found)}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_complete_run(out_dir: Path, plots: bool = False) -> None:
    for name in [
        "config.json",
        "metrics.jsonl",
        "train_log.jsonl",
        "best.safetensors",
        "summary.json",
        "parameters.json",
        *PREDICTION_FILES,
    ]:
        assert (out_dir / name).is_file(), name
    if plots:
        assert (out_dir / "learning_curves.png").stat().st_size > 1000
    metrics = read_jsonl(out_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [3, 6]
    for m in metrics:
        assert set(m) == {"step", "epoch", "sst", "para", "sts", "overall"}
        assert all(math.isfinite(m[k]) for k in ("sst", "para", "sts", "overall"))
    assert all(math.isfinite(r["loss"]) for r in read_jsonl(out_dir / "train_log.jsonl"))
    lines = (out_dir / "sst-dev-output.csv").read_text().splitlines()
    assert len(lines) == 1 + 12  # a header, then one row per dev example


@pytest.mark.parametrize("option", ["pretrain", "finetune", "adapter", "pals", "lhuc", "lora"])
def test_smoke_each_option(option, tiny_checkpoint, tiny_data, tmp_path):
    assert run(tiny_checkpoint, tiny_data, tmp_path / option, "--option", option, "--no_plots") == 0
    assert_complete_run(tmp_path / option)


@pytest.mark.parametrize("sampling", ["round-robin", "proportional", "annealed"])
def test_smoke_each_sampling(sampling, tiny_checkpoint, tiny_data, tmp_path):
    out = tmp_path / sampling
    assert run(tiny_checkpoint, tiny_data, out, "--sampling", sampling, "--option", "pretrain") == 0
    assert_complete_run(out, plots=True)


def test_separate_pair_encoding_and_pooler(tiny_checkpoint, tiny_data, tmp_path):
    out = tmp_path / "sep"
    extra = ("--pair_encoding", "separate", "--representation", "pooler", "--no_plots")
    assert run(tiny_checkpoint, tiny_data, out, *extra) == 0
    assert_complete_run(out)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--option", "pretrain"], "separate"),
        (["--option", "finetune"], "cross"),
        (["--option", "adapter"], "separate"),
        (["--option", "lora"], "separate"),
        (["--option", "lhuc"], "separate"),
        (["--option", "pals"], "separate"),
        (["--option", "pretrain", "--pair_encoding", "cross"], "cross"),
        (["--option", "finetune", "--pair_encoding", "separate"], "separate"),
    ],
)
def test_pair_encoding_default_follows_the_option(flags, expected):
    assert train_multitask.parse_args(flags).model.pair_encoding == expected


@pytest.mark.parametrize(
    ("flags", "expected", "kinds"),
    [
        (["--option", "lhuc"], True, ["layernorm", "lhuc"]),
        (["--option", "lhuc", "--no-train_layernorms"], False, ["lhuc"]),
        (["--option", "adapter"], False, ["adapter"]),
        (["--option", "adapter", "--train_layernorms"], True, ["layernorm", "adapter"]),
        (["--option", "finetune"], False, []),
    ],
)
def test_per_task_layernorms_default_follows_the_option(flags, expected, kinds):
    model = train_multitask.parse_args(flags).model
    assert model.train_layernorms is expected and model.plugin_kinds == kinds


def test_frozen_encoder_with_pairs_encoded_apart(tiny_checkpoint, tiny_data, tmp_path):
    """pretrain + separate: STS's cosine head trains only its scale and shift, so its dev
    Pearson r is the frozen checkpoint's own at every evaluation (unchanged by ŷ = a·cos + b)."""
    out = tmp_path / "run"
    extra = ("--option", "pretrain", "--pair_encoding", "separate", "--sampling", "round-robin")
    assert (
        run(tiny_checkpoint, tiny_data, out, *extra, "--no_plots") == 0
    )  # round-robin: sts trains
    assert_complete_run(out)
    first, second = (m["sts"] for m in read_jsonl(out / "metrics.jsonl"))
    # Equal up to float32 rounding of a·cos + b (~1e-6 here), far below what any change of the
    # encoder's weights would move r by.
    assert second == pytest.approx(first, abs=1e-5)


def test_layer_decay_and_swapped_pairs(tiny_checkpoint, tiny_data, tmp_path):
    """--layer_decay reaches the optimizer: with γ = 1e-3 the embeddings (rate lr·γ³ in this
    2-layer model) stay where they were to float precision, while without it they move."""
    from safetensors.torch import load_file

    start = load_file(tiny_checkpoint / "model.safetensors")["embeddings.word_embeddings.weight"]
    moved = {}
    for name, extra in (("plain", ()), ("decayed", ("--layer_decay", "1e-3", "--swap_pairs"))):
        assert run(tiny_checkpoint, tiny_data, tmp_path / name, "--no_plots", *extra) == 0
        assert_complete_run(tmp_path / name)
        best = load_file(tmp_path / name / "best.safetensors")
        moved[name] = (best["bert.embeddings.word_embeddings.weight"] - start).abs().max().item()
    assert moved["plain"] > 1e-5
    assert moved["decayed"] < 1e-8


def test_evaluate_only_reproduces_dev_metrics(tiny_checkpoint, tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(tiny_checkpoint, tiny_data, out, "--option", "adapter", "--no_plots") == 0
    best = max(read_jsonl(out / "metrics.jsonl"), key=lambda m: m["overall"])
    eval_dir = tmp_path / "eval"
    # The run's batch size: other batch sizes pad differently, which may change the last bits.
    argv = [
        "--evaluate",
        str(out),
        "--data_dir",
        str(tiny_data),
        "--out_dir",
        str(eval_dir),
        "--batch_size",
        "4",
    ]
    capsys.readouterr()
    assert train_multitask.main(argv) == 0
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if line.startswith("dev: "))
    values = dict(item.split() for item in line[len("dev: ") :].split(", "))
    for key in ("sst", "para", "sts", "overall"):
        assert float(values[key]) == pytest.approx(best[key], abs=1e-4)
    for name in PREDICTION_FILES:
        assert (eval_dir / name).read_text() == (out / name).read_text()


def test_user_errors_are_one_line(tiny_checkpoint, tiny_data, tmp_path, capsys):
    assert run(tiny_checkpoint, tiny_data, tmp_path / "a", "--tasks", "sst,nope") == 2
    assert "--tasks" in capsys.readouterr().err
    assert run(tiny_checkpoint, tmp_path / "missing", tmp_path / "b") == 2
    assert "not found" in capsys.readouterr().err
    assert (
        train_multitask.main(
            [
                "--checkpoint",
                str(tmp_path),
                "--data_dir",
                str(tiny_data),
                "--out_dir",
                str(tmp_path / "c"),
            ]
        )
        == 2
    )
    assert "--checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_multitask.main(["--no_such_flag"])


@pytest.mark.parametrize("option", ["pretrain", "finetune", "adapter", "pals", "lhuc", "lora"])
def test_smoke_smart_with_each_option(option, tiny_checkpoint, tiny_data, tmp_path):
    out = tmp_path / option
    extra = ("--option", option, "--smart", "--smart_epsilon", "1e-3", "--no_plots")
    assert run(tiny_checkpoint, tiny_data, out, *extra) == 0
    assert_complete_run(out)


@pytest.mark.parametrize("option", ["adapter", "lora", "pals", "lhuc", "pretrain"])
def test_task_checkpoint_reproduces_predictions(option, tiny_checkpoint, tiny_data, tmp_path):
    """task-<name>.safetensors on a freshly loaded base checkpoint gives the trained model's
    predictions exactly (the prediction files were written by the trained model)."""
    from safetensors.torch import load_file

    from tasks.base import read_predictions

    out = tmp_path / "run"
    assert run(tiny_checkpoint, tiny_data, out, "--option", option, "--no_plots") == 0
    cfg, _, data, tokenizer = rebuilt(out)
    for name in ("sst", "para", "sts"):
        path = out / f"task-{name}.safetensors"
        assert path.stat().st_size < 200_000
        model = build_model(cfg.model, cfg.tasks, cfg.dropout)
        model.load_task_state_dict(name, load_file(str(path)))
        _, rows = read_predictions(out / f"{name}-dev-output.csv")
        predictions = dev_predictions(model, name, data, tokenizer, cfg)
        assert predictions == {i: float(v) for i, v in rows}


def test_long_inputs_are_truncated_and_counted(tiny_checkpoint, tiny_data, tmp_path, capsys):
    argv = [
        "--checkpoint",
        str(tiny_checkpoint),
        "--data_dir",
        str(tiny_data),
        "--out_dir",
        str(tmp_path),
        "--epochs",
        "1",
        "--steps_per_epoch",
        "1",
        "--max_length",
        "8",
        "--option",
        "pretrain",
        "--no_plots",
    ]
    assert train_multitask.main(argv) == 0
    out = capsys.readouterr().out
    assert "train inputs are longer than 8 tokens and are truncated" in out


def test_evaluate_refuses_a_checkpoint_that_does_not_match(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    out = tmp_path / "run"
    assert run(tiny_checkpoint, tiny_data, out, "--option", "adapter", "--no_plots") == 0
    config = json.loads((out / "config.json").read_text())
    config["adapter_size"] = 8  # the saved adapters have size 64
    (out / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    argv = ["--evaluate", str(out), "--data_dir", str(tiny_data), "--out_dir", str(tmp_path / "e")]
    assert train_multitask.main(argv) == 2
    err = capsys.readouterr().err
    assert "best.safetensors" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "option, extra",
    [
        ("adapter", ()),
        ("adapter", ("--train_layernorms",)),
        ("lora", ()),
        ("pals", ()),
        ("lhuc", ()),
    ],
)
def test_task_added_later_leaves_earlier_tasks_bit_identical(
    option, extra, tiny_checkpoint, tiny_data, tmp_path
):
    """--add_to trains a new task on a finished plug-in run; the earlier tasks' tensors and dev
    predictions stay exactly as the earlier run left them (LayerNorms trained with the earlier
    tasks stay frozen too)."""
    from safetensors.torch import load_file

    from tasks.base import read_predictions

    base, added = tmp_path / "base", tmp_path / "added"
    assert (
        run(
            tiny_checkpoint,
            tiny_data,
            base,
            "--option",
            option,
            "--tasks",
            "sst,para",
            "--no_plots",
            *extra,
        )
        == 0
    )
    assert (
        run(
            tiny_checkpoint, tiny_data, added, "--add_to", str(base), "--tasks", "sts", "--no_plots"
        )
        == 0
    )

    config = json.loads((added / "config.json").read_text())
    assert (config["option"], config["tasks"], config["base_tasks"]) == (
        option,
        ["sts"],
        ["sst", "para"],
    )
    assert [set(m) for m in read_jsonl(added / "metrics.jsonl")] == [
        {"step", "epoch", "sts", "overall"}
    ] * 2
    for name in ("sst", "para"):
        before = load_file(str(base / f"task-{name}.safetensors"))
        after = load_file(str(added / f"task-{name}.safetensors"))
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k], after[k]) for k in before)
    # The added run's model, rebuilt as --evaluate does, predicts the earlier tasks as before.
    cfg, model, data, tokenizer = rebuilt(added)
    untrained = {k: v.clone() for k, v in model.task_state_dict("sts").items()}
    RunFolder(added).load_best(model)
    trained = model.task_state_dict("sts")
    assert trained.keys() == load_file(str(added / "task-sts.safetensors")).keys()
    assert any(not torch.equal(trained[k], untrained[k]) for k in trained if "plugins" in k)
    cfg = dataclasses.replace(cfg, tasks=["sst", "para"])
    data, _ = train_multitask.read_data(cfg)
    for name in ("sst", "para"):
        _, rows = read_predictions(base / f"{name}-dev-output.csv")
        predictions = dev_predictions(model, name, data, tokenizer, cfg)
        assert predictions == {i: float(v) for i, v in rows}

    # --evaluate rebuilds the added run (the earlier run's tensors, then its own) and predicts
    # as the run did.
    eval_dir = tmp_path / "e"
    # (with the run's batch size, as in test_evaluate_only_reproduces_dev_metrics)
    argv = [
        "--evaluate",
        str(added),
        "--data_dir",
        str(tiny_data),
        "--out_dir",
        str(eval_dir),
        "--batch_size",
        "4",
    ]
    assert train_multitask.main(argv) == 0
    for split in ("dev", "test"):
        name = f"sts-{split}-output.csv"
        assert (eval_dir / name).read_text() == (added / name).read_text()


def test_add_to_refuses_what_would_change_earlier_tasks(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    finetuned = tmp_path / "finetuned"
    assert run(tiny_checkpoint, tiny_data, finetuned, "--tasks", "sst", "--no_plots") == 0
    capsys.readouterr()
    assert (
        run(
            tiny_checkpoint, tiny_data, tmp_path / "x", "--add_to", str(finetuned), "--tasks", "sts"
        )
        == 2
    )
    assert "tasks can be added only to a plug-in run" in capsys.readouterr().err

    base = tmp_path / "base"
    assert (
        run(tiny_checkpoint, tiny_data, base, "--option", "lora", "--tasks", "sst", "--no_plots")
        == 0
    )
    capsys.readouterr()
    assert (
        run(tiny_checkpoint, tiny_data, tmp_path / "y", "--add_to", str(base), "--tasks", "sst,sts")
        == 2
    )
    assert "['sst'] already trained" in capsys.readouterr().err
    assert run(tiny_checkpoint, tiny_data, base, "--add_to", str(base), "--tasks", "sts") == 2
    assert "--out_dir must differ from --add_to" in capsys.readouterr().err


def test_tasks_added_one_after_another(tiny_checkpoint, tiny_data, tmp_path):
    """A run added to an added run loads the whole chain: the first task stays as first trained."""
    from safetensors.torch import load_file

    first, second, third = tmp_path / "sst", tmp_path / "sst+para", tmp_path / "sst+para+sts"
    assert (
        run(tiny_checkpoint, tiny_data, first, "--option", "lora", "--tasks", "sst", "--no_plots")
        == 0
    )
    assert (
        run(
            tiny_checkpoint,
            tiny_data,
            second,
            "--add_to",
            str(first),
            "--tasks",
            "para",
            "--no_plots",
        )
        == 0
    )
    assert (
        run(
            tiny_checkpoint,
            tiny_data,
            third,
            "--add_to",
            str(second),
            "--tasks",
            "sts",
            "--no_plots",
        )
        == 0
    )
    assert json.loads((third / "config.json").read_text())["base_tasks"] == ["sst", "para"]
    for name, trained_in in (("sst", first), ("para", second)):
        before = load_file(str(trained_in / f"task-{name}.safetensors"))
        after = load_file(str(third / f"task-{name}.safetensors"))
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k], after[k]) for k in before)


def test_two_plugins_from_the_command_line(tiny_checkpoint, tiny_data, tmp_path, capsys):
    """--option adapter --also lhuc: both plug-ins train, each task's file holds both, and it
    reproduces the run's predictions; a kind named twice or beside a non-plug-in is refused."""
    from safetensors.torch import load_file

    from tasks.base import read_predictions

    out = tmp_path / "run"
    assert (
        run(tiny_checkpoint, tiny_data, out, "--option", "adapter", "--also", "lhuc", "--no_plots")
        == 0
    )
    state = load_file(str(out / "task-sst.safetensors"))
    assert any(".adapter." in k for k in state) and any(".lhuc." in k for k in state)
    cfg, _, data, tokenizer = rebuilt(out)
    model = build_model(cfg.model, cfg.tasks, cfg.dropout)
    model.load_task_state_dict("sst", state)
    _, rows = read_predictions(out / "sst-dev-output.csv")
    assert dev_predictions(model, "sst", data, tokenizer, cfg) == {i: float(v) for i, v in rows}
    for bad in (["--option", "adapter", "--also", "adapter"], ["--also", "lhuc"]):
        assert run(tiny_checkpoint, tiny_data, tmp_path / "bad", *bad) == 2
    assert "--also" in capsys.readouterr().err


def test_train_encoder_with_plugins(tiny_checkpoint, tiny_data, tmp_path, capsys):
    """--train_encoder: the encoder and the plug-ins (PALs with their GELU, per-task LayerNorms)
    both move; each task's file reproduces the run's predictions; refused beside --option
    finetune and for --add_to."""
    from safetensors.torch import load_file

    from minbert.pretrained import load_pretrained
    from tasks.base import read_predictions

    out = tmp_path / "run"
    flags = ("--option", "pals", "--pal_gelu", "--train_encoder", "--train_layernorms")
    assert run(tiny_checkpoint, tiny_data, out, *flags, "--lr", "1e-3", "--no_plots") == 0
    best = load_file(str(out / "best.safetensors"))
    pretrained = load_pretrained(str(tiny_checkpoint)).state_dict()
    query = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(best[f"bert.{query}"], pretrained[query])
    assert best["bert.plugins.pals.by_task.sst.decoder.weight"].abs().sum() > 0
    norm = "bert.plugins.layernorm.by_task.sst.attention.0.weight"
    assert not torch.equal(
        best[norm], pretrained["encoder.layer.0.attention.output.LayerNorm.weight"]
    )
    cfg, _, data, tokenizer = rebuilt(out)
    model = build_model(cfg.model, cfg.tasks, cfg.dropout)
    model.load_task_state_dict("sts", load_file(str(out / "task-sts.safetensors")))
    _, rows = read_predictions(out / "sts-dev-output.csv")
    assert dev_predictions(model, "sts", data, tokenizer, cfg) == {i: float(v) for i, v in rows}

    capsys.readouterr()
    assert (
        run(tiny_checkpoint, tiny_data, tmp_path / "x", "--add_to", str(out), "--tasks", "sst") == 2
    )
    assert "was trained with --train_encoder" in capsys.readouterr().err
    assert run(tiny_checkpoint, tiny_data, tmp_path / "y", "--train_encoder") == 2
    assert "--train_encoder goes with a plug-in" in capsys.readouterr().err


def test_dropout_reaches_every_attention_including_pals(tiny_checkpoint):
    from multitask.model import ModelSettings

    settings = ModelSettings(option="pals", checkpoint=str(tiny_checkpoint))
    model = build_model(settings, ["sst"], dropout=0.3)
    from minbert.plugins.pals import PAL

    rates = [m.dropout_p for m in model.modules() if hasattr(m, "dropout_p")]
    pals = [m for m in model.modules() if isinstance(m, PAL)]
    assert len(pals) == 1 and pals[0].dropout_p == 0.3  # the rate its attentions get in training
    # the encoder's attentions and the PAL's (one per layer, each BertSelfAttention's code)
    assert len(rates) == 2 * model.bert.config.num_hidden_layers + 1 and set(rates) == {0.3}
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {0.3}


def test_train_fraction_subsamples_the_training_files_only(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    """The same rows whatever the seed, in file order; dev and test stay whole."""
    from multitask.data import subsample

    rows = list(range(40))
    assert subsample(rows, 0.25) == subsample(rows, 0.25) == sorted(subsample(rows, 0.25))
    assert len(subsample(rows, 0.25)) == 10 and len(subsample(rows, 0.001)) == 1
    whole = len(get_task("sst").read(tiny_data / "ids-sst-train.csv")[0])
    dev = len(get_task("sst").read(tiny_data / "ids-sst-dev.csv")[0])
    assert (
        run(
            tiny_checkpoint,
            tiny_data,
            tmp_path / "run",
            "--tasks",
            "sst",
            "--no_plots",
            "--train_fraction",
            "0.5",
            "--batch_pool",
            "1",
        )
        == 0
    )
    assert f"train {round(whole / 2)}, dev {dev}" in capsys.readouterr().out


def test_two_layer_heads(tiny_checkpoint, tiny_data, tmp_path):
    """--head_hidden H: W · tanh(W_h r + b_h) + b in eval mode (by hand), on single sentences,
    cross-encoded and separately encoded pairs (the cosine head has no layer to widen); the
    task files of a plug-in run hold the wider heads and reproduce the run's predictions."""
    from safetensors.torch import load_file

    from tasks.base import read_predictions
    from tasks.heads import CosineSimilarityHead, LinearHead, PairFeatureHead

    head = LinearHead(6, 3, dropout=0.1, hidden=4).eval()
    r = torch.randn(5, 6)
    by_hand = torch.tanh(r @ head.hidden.weight.T + head.hidden.bias) @ head.linear.weight.T
    assert torch.allclose(head(r), by_hand + head.linear.bias, atol=1e-6)
    assert LinearHead(6, 3, dropout=0.1).hidden is None  # 0: the linear head, names unchanged
    separate = get_task("para").make_head(6, 0.1, separate=True, head_hidden=4)
    assert isinstance(separate, PairFeatureHead) and separate.hidden.in_features == 24
    assert isinstance(get_task("sts").make_head(6, 0.1, True, 4), CosineSimilarityHead)

    out = tmp_path / "run"
    # Cross-encoded, so that every task's head has the hidden layer.
    assert (
        run(
            tiny_checkpoint,
            tiny_data,
            out,
            "--option",
            "adapter",
            "--head_hidden",
            "16",
            "--pair_encoding",
            "cross",
            "--no_plots",
        )
        == 0
    )
    cfg, _, data, tokenizer = rebuilt(out)
    for name in ("sst", "para", "sts"):
        model = build_model(cfg.model, cfg.tasks, cfg.dropout)
        assert model.heads[name].hidden.out_features == 16
        model.load_task_state_dict(name, load_file(str(out / f"task-{name}.safetensors")))
        _, rows = read_predictions(out / f"{name}-dev-output.csv")
        assert dev_predictions(model, name, data, tokenizer, cfg) == {i: float(v) for i, v in rows}


def test_a_fresh_run_fits_the_cosine_head_to_the_training_labels(tiny_checkpoint, tiny_data):
    """With labels that are exactly 3·cos + 1 of the model's own cosines, the fitted head is
    ŷ = 3·cos + 1 (float32 cosines, 1e-4), and its predictions then equal the labels."""
    from multitask.evaluation import calibrate_similarity_heads, head_outputs
    from multitask.model import ModelSettings
    from tasks.reader import Example

    settings = ModelSettings(
        option="adapter", checkpoint=str(tiny_checkpoint), pair_encoding="separate"
    )
    model = build_model(settings, ["sst", "sts"])
    tokenizer = Tokenizer.from_checkpoint(str(tiny_checkpoint), max_length=32)
    examples, _ = get_task("sts").read(tiny_data / "sts-train.csv")
    cpu, sts = torch.device("cpu"), get_task("sts")
    outputs = head_outputs(model, sts, examples, tokenizer, 8, cpu).squeeze(-1)
    cosine = (outputs - 2.5) / 2.5  # a = b = 2.5 before the fit
    exact = [Example(e.id, e.texts, float(3 * c + 1), e.line) for e, c in zip(examples, cosine)]
    fitted = calibrate_similarity_heads(model, {"sst": [], "sts": exact}, tokenizer, 8, cpu)
    assert list(fitted) == ["sts"] and model.training
    assert fitted["sts"] == pytest.approx((3.0, 1.0), abs=1e-4)
    labels = torch.tensor([e.label for e in exact])
    after = head_outputs(model, sts, exact, tokenizer, 8, cpu).squeeze(-1)
    torch.testing.assert_close(after, labels, atol=1e-4, rtol=0)


def test_summary_counts_the_steps_each_task_trains_per_epoch(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    """Round-robin over three tasks, 3 steps an epoch: one step each, every epoch; the counts
    the driver prints at an epoch's start are the ones summary.json keeps."""
    out = tmp_path / "rr"
    assert run(tiny_checkpoint, tiny_data, out, "--sampling", "round-robin", "--no_plots") == 0
    summary = json.loads((out / "summary.json").read_text())
    one_each = {"sst": 1, "para": 1, "sts": 1}
    assert summary["steps_per_task"] == {"1": one_each, "2": one_each}
    printed = capsys.readouterr().out
    assert "epoch 2/2: steps per task sst 1 (0.333), para 1 (0.333), sts 1 (0.333)" in printed
