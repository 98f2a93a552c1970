"""Attention maps: ``attention_maps(model)`` (hooks on the layers) against transformers'
``output_attentions`` on the packaged checkpoint (within 1e-5), LoRA and PAL attention consistent
with the layers' own outputs, and ``python -m tools.attention``: the page's inlined data equals
the model's attention, the figure's grid is layers × heads, bad inputs are one ``error:`` line,
and the page loads in headless Chromium without a console error (where Chromium is installed)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from html import unescape
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from minbert.attention_maps import attention_maps
from minbert.bert import BertConfig, BertModel, BertSelfAttention, extended_attention_mask
from minbert.plugins import add_plugin
from minbert.pretrained import default_checkpoint_dir, load_pretrained
from minbert.tokenizer import Tokenizer
from multitask.collate import Batch
from multitask.trained import TrainedRun
from tasks import get_task
from tests.helpers import tiny_run
from tools import attention as attention_command

SENTENCES = ["a gorgeous, witty film", "The cat sat on the mat."]
PAIR = ("How do I learn to cook?", "What is the best way to learn cooking?")


# -- the model's attention -------------------------------------------------------------------


def with_maps(model, **inputs) -> dict:
    """The model's outputs with the attention maps it computed, as tuples per layer."""
    with attention_maps(model) as maps:
        out = model(**inputs)
    plugins = {name: tuple(per_layer) for name, per_layer in maps.plugin_attentions.items()}
    return out | {"attentions": tuple(maps.attentions), "plugin_attentions": plugins}


def transformers_attentions(batch: dict) -> tuple[torch.Tensor, ...]:
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertModel.from_pretrained(
        str(default_checkpoint_dir()), attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        return reference(**batch, output_attentions=True).attentions


@pytest.mark.numerics
@pytest.mark.parametrize("pair", [False, True], ids=["padded-sentences", "pair"])
def test_attentions_equal_transformers_on_the_packaged_checkpoint(pair):
    tokenizer = Tokenizer.from_checkpoint("default")
    batch = tokenizer(*([[PAIR[0]], [PAIR[1]]] if pair else [SENTENCES]))
    batch.pop("num_truncated")
    theirs = transformers_attentions(batch)
    model = load_pretrained("default").eval()
    with torch.no_grad():
        ours = with_maps(model, **batch)
    L, nh = model.config.num_hidden_layers, model.config.num_attention_heads
    B, T = batch["input_ids"].shape
    assert len(ours["attentions"]) == len(theirs) == L
    assert ours["plugin_attentions"] == {}
    for mine, reference in zip(ours["attentions"], theirs):
        assert mine.shape == (B, nh, T, T)
        assert (mine - reference).abs().max() < 1e-5
        assert torch.allclose(mine.sum(-1), torch.ones(B, nh, T))
    if not pair:  # the padding of the shorter sentence gets no attention
        padding = batch["attention_mask"] == 0
        assert padding.any()
        keys = padding[:, None, None, :].expand(B, nh, T, T)
        assert all((p[keys] == 0).all() for p in ours["attentions"])


def test_nothing_is_computed_or_returned_unless_asked(monkeypatch):
    model = BertModel(BertConfig.tiny()).eval()
    ids = torch.tensor([[101, 2204, 3185, 102]])

    def refuse(*args, **kwargs):
        raise AssertionError("attention probabilities computed without being asked for")

    monkeypatch.setattr(BertSelfAttention, "probabilities", refuse)
    with torch.no_grad():
        out = model(ids)
    assert set(out) == {"last_hidden_state", "pooler_output"}


def layer_inputs(model: BertModel, batch: dict, task: str | None) -> list[torch.Tensor]:
    """Each layer's input, captured by a forward pre-hook during a normal forward."""
    found: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_pre_hook(lambda module, args: found.append(args[0]))
        for layer in model.encoder.layer
    ]
    try:
        with torch.no_grad():
            model(**batch, task=task)
    finally:
        for hook in hooks:
            hook.remove()
    return found


def merged(probs: torch.Tensor, values: torch.Tensor, heads: int) -> torch.Tensor:
    """P · V per head, heads merged: (B, nh, T, T), (B, T, D) -> (B, T, D)."""
    B, T, D = values.shape
    v = values.view(B, T, heads, D // heads).transpose(1, 2)
    return (probs @ v).transpose(1, 2).reshape(B, T, D)


def tiny_batch() -> dict:
    return {
        "input_ids": torch.tensor([[101, 2204, 3185, 2003, 102], [101, 2919, 102, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
    }


@pytest.mark.numerics
def test_lora_on_query_and_key_is_in_the_attention():
    """P · V equals the layer's own attention output, LoRA's update on query, key and value
    included (so P is the attention the layer computed), and differs from the base model's."""
    torch.manual_seed(0)
    model = BertModel(BertConfig.tiny()).eval()
    batch = tiny_batch()
    with torch.no_grad():
        plain = with_maps(model, **batch)["attentions"]
    lora = add_plugin(model, "lora", ["sst"], targets=["query", "key", "value"])
    with torch.no_grad():
        for p in lora.parameters():
            p.normal_(0.0, 0.5)
        out = with_maps(model, **batch, task="sst")
    mask = extended_attention_mask(batch["attention_mask"], torch.float32)
    for i, (layer, x) in enumerate(zip(model.encoder.layer, layer_inputs(model, batch, "sst"))):
        attention = layer.attention.self  # LoRA acts through hooks on its query, key and value
        with torch.no_grad():
            expected = attention(x, mask)
            values = attention.value(x)
        got = merged(out["attentions"][i], values, attention.num_heads)
        real = batch["attention_mask"].bool()
        # float32 summed in two orders (the layer's kernel, P · V written out) over values that
        # LoRA's N(0, 0.5²) updates make up to 20: eps 1.2e-7 · 20 · a few terms ≈ 1e-5 (1.7e-5
        # seen on torch's plain kernels)
        torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=3e-5)
        assert (out["attentions"][i] - plain[i]).abs().max() > 1e-3


def test_pal_attention_is_returned_beside_the_encoders():
    torch.manual_seed(0)
    config = BertConfig.tiny()
    model = BertModel(config).eval()
    pal = add_plugin(model, "pals", ["sts"], size=16, heads=2)
    with torch.no_grad():
        for p in pal.parameters():
            p.normal_(0.0, 0.5)
    batch = tiny_batch()
    with torch.no_grad():
        out = with_maps(model, **batch, task="sts")
    assert set(out["plugin_attentions"]) == {"pals"}
    pal_maps = out["plugin_attentions"]["pals"]
    assert len(pal_maps) == len(out["attentions"]) == config.num_hidden_layers
    mask = extended_attention_mask(batch["attention_mask"], torch.float32)
    task_pal = pal.by_task["sts"]
    for i, x in enumerate(layer_inputs(model, batch, "sts")):
        assert pal_maps[i].shape == (2, 2, 5, 5)
        with torch.no_grad():
            z = task_pal.encoder(x)
            expected = task_pal.layers[i](z, mask, 0.0, False)
            values = task_pal.layers[i].value(z)
        got = merged(pal_maps[i], values, 2)
        assert (got - expected)[batch["attention_mask"].bool()].abs().max() < 1e-5


# -- the command -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(finished_run, tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    """Tiny finished runs: finetune (pairs as one sequence) and pals (pairs encoded apart)."""
    root = tmp_path_factory.mktemp("attention-runs")
    pals = tiny_run(tiny_checkpoint, tiny_data, root / "pals", "--option", "pals", epochs=1)
    return {"finetune": finished_run, "pals": pals}


def inlined_data(html: Path) -> dict:
    """The page's data, parsed back from its script element."""
    text = html.read_text(encoding="utf-8")
    found = re.search(
        r'<script id="attention-data" type="application/json">(.*?)</script>', text, re.S
    )
    assert found, "no inlined data"
    return json.loads(found.group(1))


def model_attention(run_dir: Path, task: str, *sentences: str) -> list[tuple[list[str], dict]]:
    """(tokens, name -> (L, nh, T, T)) of each sequence the run's model encodes, computed here
    directly from TrainedRun."""
    run = TrainedRun(run_dir)
    model, tokenizer = run.task_model(task), run.tokenizer()
    if len(sentences) == 1:
        batches = [tokenizer([sentences[0]])]
    elif model.encodes_separately(get_task(task)):
        batches = [tokenizer([s]) for s in sentences]
    else:
        batches = [tokenizer([sentences[0]], [sentences[1]])]
    found = []
    for batch in batches:
        batch.pop("num_truncated")
        with torch.no_grad():
            out = with_maps(model.bert, **batch, task=task)
        maps = {"encoder": torch.stack(out["attentions"])[:, 0]}
        if "pals" in out["plugin_attentions"]:
            maps["PAL (projected space)"] = torch.stack(out["plugin_attentions"]["pals"])[:, 0]
        tokens = [tokenizer.backend.id_to_token(i) for i in batch["input_ids"][0].tolist()]
        found.append((tokens, maps))
    return found


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def run_command(argv: list[str], capsys) -> tuple[int, str, str]:
    code = attention_command.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_page_holds_the_models_attention_for_a_sentence(runs, tmp_path, capsys):
    out = tmp_path / "film"
    argv = [str(runs["finetune"]), "--task", "sst", "--input", SENTENCES[0], "--out", str(out)]
    code, stdout, err = run_command(argv, capsys)
    assert code == 0, err
    assert "prediction: class " in stdout
    data = inlined_data(tmp_path / "film.html")
    [(tokens, maps)] = model_attention(runs["finetune"], "sst", SENTENCES[0])
    [sequence] = data["sequences"]
    assert sequence["tokens"] == tokens and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert set(sequence["maps"]) == {"encoder"}
    assert torch.equal(torch.tensor(sequence["maps"]["encoder"]), maps["encoder"])  # exactly
    assert data["task"] == "sst" and data["inputs"] == [SENTENCES[0]]
    model = TrainedRun(runs["finetune"]).task_model("sst")
    batch = TrainedRun(runs["finetune"]).tokenizer()([SENTENCES[0]])
    batch.pop("num_truncated")
    with torch.no_grad():
        logits = model("sst", Batch([batch], None))
    assert data["fields"]["class"] == int(logits.argmax())
    assert data["prediction"].startswith(f"class {int(logits.argmax())}")
    assert not (tmp_path / "film-2.png").exists()


def test_a_cross_encoded_pair_is_one_sequence(runs, tmp_path, capsys):
    out = tmp_path / "pair.html"  # the suffix is dropped
    argv = [str(runs["finetune"]), "--task", "para", "--input", PAIR[0], "--pair", PAIR[1]]
    code, _, err = run_command([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    data = inlined_data(tmp_path / "pair.html")
    [(tokens, maps)] = model_attention(runs["finetune"], "para", *PAIR)
    [sequence] = data["sequences"]
    assert sequence["tokens"] == tokens and tokens.count("[SEP]") == 2
    assert torch.equal(torch.tensor(sequence["maps"]["encoder"]), maps["encoder"])
    assert 0.0 <= data["fields"]["probability"] <= 1.0


def test_a_pal_pair_encoded_apart_has_two_sequences_with_pal_attention(runs, tmp_path, capsys):
    argv = [str(runs["pals"]), "--task", "sts", "--input", PAIR[0], "--pair", PAIR[1]]
    code, _, err = run_command([*argv, "--out", str(tmp_path / "sts")], capsys)
    assert code == 0, err
    data = inlined_data(tmp_path / "sts.html")
    expected = model_attention(runs["pals"], "sts", *PAIR)
    assert [s["label"] for s in data["sequences"]] == ["sentence 1", "sentence 2"]
    for sequence, (tokens, maps) in zip(data["sequences"], expected, strict=True):
        assert sequence["tokens"] == tokens
        assert set(sequence["maps"]) == {"encoder", "PAL (projected space)"}
        for name, probs in maps.items():
            assert torch.equal(torch.tensor(sequence["maps"][name]), probs)
    assert "score" in data["fields"]
    assert png_size(tmp_path / "sts.png") and png_size(tmp_path / "sts-2.png")


def test_figure_is_a_grid_of_layers_by_heads(runs, tmp_path, capsys):
    out = tmp_path / "grid"
    argv = [str(runs["finetune"]), "--task", "sst", "--input", SENTENCES[1], "--out", str(out)]
    assert run_command(argv, capsys)[0] == 0
    [(tokens, maps)] = model_attention(runs["finetune"], "sst", SENTENCES[1])
    L, nh, T, _ = maps["encoder"].shape
    fig = attention_command.attention_figure(tokens, maps["encoder"], "title")
    images = [ax for ax in fig.axes if ax.images and ax.get_subplotspec() is not None]
    assert len(images) == L * nh == 2 * 4
    assert {ax.get_subplotspec().get_geometry()[:2] for ax in images} == {(L, nh)}
    first, last = images[0], images[-1]
    assert [t.get_text() for t in first.get_yticklabels()] == tokens
    assert [t.get_text() for t in last.get_xticklabels()] == tokens
    assert torch.equal(torch.tensor(first.images[0].get_array()), maps["encoder"][0, 0])
    width, height = fig.get_size_inches() * 100
    assert png_size(tmp_path / "grid.png") == (round(width), round(height))


def test_checkpoint_without_a_run(tiny_checkpoint, tmp_path, capsys):
    argv = ["--checkpoint", str(tiny_checkpoint), "--input", PAIR[0], "--pair", PAIR[1]]
    code, stdout, err = run_command([*argv, "--out", str(tmp_path / "plain")], capsys)
    assert code == 0, err
    assert "prediction: none" in stdout
    data = inlined_data(tmp_path / "plain.html")
    assert data["task"] is None and data["fields"] is None
    [sequence] = data["sequences"]
    assert sequence["tokens"].count("[SEP]") == 2
    bert = load_pretrained(tiny_checkpoint).eval()
    batch = Tokenizer.from_checkpoint(tiny_checkpoint)([PAIR[0]], [PAIR[1]])
    batch.pop("num_truncated")
    with torch.no_grad():
        expected = torch.stack(with_maps(bert, **batch)["attentions"])[:, 0]
    assert torch.equal(torch.tensor(sequence["maps"]["encoder"]), expected)


def bad_argv(runs: dict[str, Path], tmp_path: Path, case: str) -> list[str]:
    run = str(runs["finetune"])
    out = ["--out", str(tmp_path / "x")]
    return {
        "not a run folder": [str(tmp_path), "--task", "sst", "--input", "a film", *out],
        "missing run folder": [str(tmp_path / "nope"), "--task", "sst", "--input", "a", *out],
        "unknown task": [run, "--task", "nli", "--input", "a film", *out],
        "task not trained": [run, "--task", "cfimdb", "--input", "a film", *out],
        "no task": [run, "--input", "a film", *out],
        "empty input": [run, "--task", "sst", "--input", "", *out],
        "blank input": [run, "--task", "sst", "--input", " \t\u200b ", *out],
        "empty pair": [run, "--task", "sts", "--input", "a", "--pair", "  ", *out],
        "pair task without --pair": [run, "--task", "sts", "--input", "a film", *out],
        "--pair for one sentence": [run, "--task", "sst", "--input", "a", "--pair", "b", *out],
        "run and checkpoint": [run, "--checkpoint", "default", "--input", "a", *out],
        "neither": ["--input", "a film", *out],
        "checkpoint with a task": [
            "--checkpoint",
            "default",
            "--task",
            "sst",
            "--input",
            "a",
            *out,
        ],
        "missing checkpoint": ["--checkpoint", str(tmp_path / "nope"), "--input", "a", *out],
    }[case]


@pytest.mark.parametrize(
    "case",
    [
        "not a run folder",
        "missing run folder",
        "unknown task",
        "task not trained",
        "no task",
        "empty input",
        "blank input",
        "empty pair",
        "pair task without --pair",
        "--pair for one sentence",
        "run and checkpoint",
        "neither",
        "checkpoint with a task",
        "missing checkpoint",
    ],
)
def test_bad_inputs_are_one_error_line(case, runs, tmp_path, capsys):
    code, stdout, err = run_command(bad_argv(runs, tmp_path, case), capsys)
    lines = err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not list(tmp_path.glob("x*"))


# -- the page in a real browser --------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def load_in_chromium(page: Path, tmp_path: Path) -> tuple[str, str]:
    """(the DOM after the page's scripts ran, Chromium's log with the page's console messages)."""
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout, result.stderr


def console_errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]


# Run in the page after its own script: hover the second query token, then open the "all heads"
# view of the last layer; what the page shows is written into the DOM as JSON.
PROBE = """<script>
(function () {
  const seen = {};
  document.querySelectorAll(".column.left .token")[1].dispatchEvent(new MouseEvent("mouseenter"));
  seen.weights = [...document.querySelectorAll(".column.right .weight")]
    .map((w) => +w.textContent);
  seen.lit = [...document.querySelectorAll("svg.lines line")]
    .filter((l) => +l.getAttribute("stroke-opacity") > 0).length;
  seen.layers = document.getElementById("layer").options.length;
  const head = document.getElementById("head");
  head.value = String(head.options.length - 1);
  head.dispatchEvent(new Event("change"));
  seen.thumbs = document.querySelectorAll("#grid .thumb").length;
  seen.hash = location.hash;
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(seen);
  document.body.append(out);
})();
</script></body>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_page_loads_in_headless_chromium_without_a_console_error(runs, tmp_path, capsys):
    argv = [str(runs["pals"]), "--task", "sts", "--input", PAIR[0], "--pair", PAIR[1]]
    assert run_command([*argv, "--out", str(tmp_path / "page")], capsys)[0] == 0
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    dom, log = load_in_chromium(tmp_path / "page.html", tmp_path)
    assert console_errors(log) == []
    assert dom.count('class="token') >= 2 * 5  # both token columns were drawn by the script
    assert "<line " in dom and "stroke-opacity" in dom
    # Hovering a token lights its lines only and labels every key with its weight (they sum to
    # 1); the "all heads" view draws one thumbnail per head.
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("</body>", PROBE, 1), encoding="utf-8")
    dom, log = load_in_chromium(probed, tmp_path)
    assert console_errors(log) == []
    seen = json.loads(unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1)))
    tokens = inlined_data(tmp_path / "page.html")["sequences"][0]["tokens"]
    L, nh = BertConfig.tiny().num_hidden_layers, BertConfig.tiny().num_attention_heads
    assert len(seen["weights"]) == len(tokens) and abs(sum(seen["weights"]) - 1) < 0.05
    assert 0 < seen["lit"] <= len(tokens)
    assert seen["layers"] == L and seen["thumbs"] == nh
    assert seen["hash"] == "#layer=1&head=all&sequence=1"
    # The check would see an error: the same page with a broken script logs one.
    broken = tmp_path / "broken.html"
    broken.write_text(html.replace('"use strict";', '"use strict"; undefinedFunction();', 1))
    assert console_errors(load_in_chromium(broken, tmp_path)[1]) != []


def test_nan_in_the_trained_weights_is_named_not_drawn(runs, tmp_path, capsys):
    """The attention command on a run whose weights file holds NaN ends with one line naming
    that file (exit 3), and draws nothing."""
    run = tmp_path / "finetune"
    shutil.copytree(runs["finetune"], run)
    path = run / "best.safetensors"
    tensors = load_file(path)
    query = next(k for k in tensors if k.endswith("attention.self.query.weight"))
    tensors[query] = torch.full_like(tensors[query], float("nan"))
    save_file(tensors, path)
    out = tmp_path / "fig.html"
    code, _, err = run_command(
        [str(run), "--task", "sst", "--input", SENTENCES[0], "--out", str(out)], capsys
    )
    assert code == 3 and f"{path} holds NaN or inf" in err and err.count("\n") == 1
    assert not out.exists()


def test_attention_maps_are_captured_only_inside_and_change_no_output():
    """The capture is hooks on the layers for the duration: the outputs are the model's own, bit
    for bit, and no hook is left after it."""
    torch.manual_seed(0)
    model = BertModel(BertConfig.tiny()).eval()
    batch = tiny_batch()
    with torch.no_grad():
        bare = model(**batch)
        with attention_maps(model) as maps:
            captured = model(**batch)
    assert len(maps.attentions) == model.config.num_hidden_layers
    for key in ("last_hidden_state", "pooler_output"):
        assert torch.equal(captured[key], bare[key])
    assert not any(layer._forward_pre_hooks for layer in model.encoder.layer)
