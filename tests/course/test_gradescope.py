"""``python sanity_check.py --results-json FILE``: the checks' results in Gradescope's
``results.json`` form, an exercise's points shared by its own checks (hand-computed here), and a
points file that cannot be used refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import sanity_check
from course.checks import CHECKS
from course.gradescope import POINTS, read_points, results_json
from course.registry import FAIL, PASS, Check, Result

EXERCISES = {e for c in CHECKS for e in c.exercises}


def points_file(tmp_path: Path, **points: float) -> Path:
    path = tmp_path / "points.json"
    path.write_text(json.dumps(dict.fromkeys(EXERCISES, 0) | points))
    return path


def test_the_course_points_file_names_every_exercise():
    assert set(read_points(POINTS, EXERCISES)) == EXERCISES


def test_a_passing_run_scores_each_exercises_points_shared_by_its_own_checks(tmp_path, capsys):
    """adamw 6 points (one own check: 6), sampler 4 (two own checks: 2 each), the tokenizer
    check grades no exercise (0 of 0)."""
    points = points_file(tmp_path, adamw=6, sampler=4)
    out = tmp_path / "results.json"
    argv = ["--only", "adamw", "--only", "sampler", "--only", "tokenizer"]
    assert sanity_check.main([*argv, "--results-json", str(out), "--points", str(points)]) == 0
    results = json.loads(out.read_text(encoding="utf-8"))
    scores = {t["name"].split(":")[0]: [] for t in results["tests"]}
    for test in results["tests"]:
        scores[test["name"].split(":")[0]].append((test["score"], test["max_score"]))
        assert test["status"] == "passed" and test["visibility"] == "visible"
        assert test["name"] in test["output"] and "PASS" in test["output"]
    assert scores == {"adamw": [(6.0, 6.0)], "sampler": [(2.0, 2.0)] * 2, "tokenizer": [(0, 0)]}
    assert results["score"] == 10.0
    assert f"wrote {out}" in capsys.readouterr().out


def test_a_failing_check_scores_nothing_and_a_whole_model_check_grades_nothing():
    def check(name: str, *exercises: str) -> Check:
        return Check(name, 1e-5, lambda ctx: None, exercises=exercises)

    own = [check("lora: linear", "lora"), check("lora: merge", "lora")]
    whole = check("bert: hidden states", "embeddings", "attention", "layer")
    results = [
        (Result(own[0], PASS, 0.0), "lora: linear ... PASS"),
        (Result(own[1], FAIL, 0.5), "lora: merge ... FAIL"),
        (Result(whole, FAIL, 1.0), "bert: hidden states ... FAIL"),
    ]
    found = results_json(results, dict.fromkeys(EXERCISES, 0.0) | {"lora": 10.0, "layer": 5.0})
    assert [(t["score"], t["max_score"], t["status"]) for t in found["tests"]] == [
        (5.0, 5.0, "passed"),
        (0.0, 5.0, "failed"),
        (0.0, 0.0, "failed"),
    ]
    assert found["score"] == 5.0 and found["tests"][1]["output"] == "lora: merge ... FAIL"


@pytest.mark.parametrize(
    "content, said",
    [
        ("{not json", "not a readable JSON file"),
        ("[1, 2]", "give a JSON object"),
        ('{"attention": 5}', "no points for exercise"),
        ("UNKNOWN", "unknown exercise 'transformer'"),
        ("NEGATIVE", "points must be a number >= 0"),
        ("TEXT", "points must be a number >= 0"),
    ],
)
def test_a_points_file_that_cannot_be_used_is_one_line(content, said, tmp_path, capsys):
    every = dict.fromkeys(EXERCISES, 1)
    content = {
        "UNKNOWN": json.dumps(every | {"transformer": 1}),
        "NEGATIVE": json.dumps(every | {"lora": -1}),
        "TEXT": json.dumps(every | {"lora": "ten"}),
    }.get(content, content)
    path = tmp_path / "points.json"
    path.write_text(content)
    out = tmp_path / "results.json"
    with pytest.raises(SystemExit) as stop:
        sanity_check.main(["--results-json", str(out), "--points", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and said in err[0] and str(path) in err[0]
    assert not out.exists()


def test_points_without_results_json_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        sanity_check.main(["--points", str(points_file(tmp_path))])
    assert stop.value.code == 2 and "--points goes with --results-json" in capsys.readouterr().err


def test_a_sealed_failure_prints_above_the_tolerance_not_inf():
    """An output outside the tolerance by the digests has no known difference: the line says
    "above the tolerance" (its detail gives the value), never "inf"; a NaN stays "nan"."""
    from course.registry import format_result

    check = Check("sampler: alpha", 1e-9, lambda ctx: None, exercises=("sampler",))
    line = format_result(Result(check, FAIL, math.inf, "alpha is 0.2, more than ..."), 20)
    assert "max_abs_diff >1e-09" in line and "inf" not in line.split("\n")[0]
    assert "max_abs_diff nan" in format_result(Result(check, FAIL, math.nan), 20)
