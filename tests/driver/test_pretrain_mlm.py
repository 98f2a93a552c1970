"""The further-pretraining command, pretrain_mlm.py: its checkpoint loads in the driver, resume
and bad input (the masking and the loss it trains with: tests/model/test_mlm.py)."""

from __future__ import annotations

import torch

import pretrain_mlm
from minbert.mlm import load_mlm
from minbert.pretrained import load_pretrained
from tests.model.test_mlm import batch


def test_command_writes_a_checkpoint_the_driver_loads(tiny_checkpoint, tiny_data, tmp_path):
    """The output directory loads through load_pretrained (as train_multitask.py --checkpoint
    does) and gives exactly the encoder outputs of the model that wrote it; --resume after the
    end changes nothing; bad input is one line."""
    out = tmp_path / "mlm"
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data), "--out_dir"]
    argv += [str(out), "--steps", "4", "--eval_every", "2", "--batch_size", "8"]
    argv += ["--max_length", "32"]
    assert pretrain_mlm.main(argv) == 0
    written, _ = load_mlm(out)
    encoder = load_pretrained(out).eval()
    written.eval()
    ids, mask = batch(rows=3, length=12)
    with torch.no_grad():
        a = encoder(ids, mask)["last_hidden_state"]
        b = written.bert(ids, mask)["last_hidden_state"]
    assert torch.equal(a, b)
    log = [line for line in (out / "mlm_log.jsonl").read_text().splitlines()]
    assert len(log) == 3  # steps 0, 2, 4
    assert pretrain_mlm.main(argv) == 2  # the folder holds a run
    assert pretrain_mlm.main([*argv, "--resume"]) == 0
    assert pretrain_mlm.main([*argv[:-2], "--max_length", "1", "--overwrite"]) == 2


def test_command_reports_bad_input_in_one_line(tmp_path, capsys):
    assert (
        pretrain_mlm.main(["--text", str(tmp_path / "none.txt"), "--out_dir", str(tmp_path)]) == 2
    )
    assert pretrain_mlm.main(["--tasks", "nope", "--out_dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "--text" in err[0] and "--tasks" in err[1]


def test_resume_refuses_a_flag_that_contradicts_the_run(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    """--resume takes the run's own settings, as the driver's does: a flag given to change one is
    refused in one line (exit 2) and nothing in the folder changes; the same value is accepted."""
    out = tmp_path / "mlm"
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data), "--out_dir"]
    argv += [str(out), "--steps", "2", "--eval_every", "1", "--batch_size", "4"]
    assert pretrain_mlm.main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert pretrain_mlm.main(["--out_dir", str(out), "--resume", "--lr", "1e-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --lr 0.001: the run in")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert pretrain_mlm.main(["--out_dir", str(out), "--resume", "--lr", "5e-5"]) == 0


def test_flags_out_of_range_are_refused_with_the_flag_named(tmp_path, capsys):
    for flag, value in [("--steps", "0"), ("--lr", "nan"), ("--warmup", "1"), ("--seed", "-1")]:
        assert pretrain_mlm.main([flag, value, "--out_dir", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {flag} "), err
    assert not (tmp_path / "o").exists()
