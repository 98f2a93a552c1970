"""The operator mistakes (course/authoring/operator_mistakes.py): each equation of the reference
with one operator changed, sealed as a known mistake, read by the class grader's judge alone.

Asserted: a variant is the equation with exactly the change its description quotes, computed on
hand-made input; no description shows a known mistake's branch; the judge adds them after a
check's own mistakes and names a planted mistake nobody listed by its change; the stored file
was made from today's sources, and a sample of it is made again alike; neither the student tree
nor its grader.pyz holds it."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from course.authoring import course_references as ref
from course.authoring import operator_mistakes as om
from course.authoring.scaffold import student_files
from course.grading.grade import OPERATOR_MISTAKES
from course.registry import FAIL, Context, add_mistakes
from minbert.checkpoint import load_trusted
from tests.course.test_grader_mutants import ROOT, run_own_checks

SWAPPED = "`y = shift * cosine + scale` where the reference has `y = scale * cosine + shift`"


def variant(function: str, description: str) -> om.Variant:
    found = [v for v in om.variants(function) if v.description == description]
    assert len(found) == 1, [v.description for v in om.variants(function)]
    return found[0]


def test_a_variant_computes_the_line_its_description_quotes():
    u, v = torch.tensor([[1.0, 2.0], [0.0, 3.0]]), torch.tensor([[2.0, 1.0], [4.0, 0.0]])
    scale, shift = torch.tensor(3.0), torch.tensor(-0.5)
    cosine = torch.tensor([4 / 5, 0.0])  # by hand: (1·2 + 2·1) / (√5 √5), 0 / (3 · 4)
    changed = om.compiled(variant("cosine_head", SWAPPED))
    torch.testing.assert_close(changed(u, v, scale, shift), (shift * cosine + scale)[:, None])
    torch.testing.assert_close(
        ref.cosine_head(u, v, scale, shift), (scale * cosine + shift)[:, None]
    )


def test_a_value_read_as_another_and_an_activation_for_another_are_variants():
    u, v = torch.tensor([[1.0, 2.0], [0.0, 3.0]]), torch.tensor([[2.0, 1.0], [4.0, 0.0]])
    scale, shift = torch.tensor(3.0), torch.tensor(-0.5)
    self_dot = om.compiled(
        variant(
            "cosine_head",
            "`dot = (u * u).sum(axis)` where the reference has `dot = (u * v).sum(axis)`",
        )
    )
    # by hand: u·u / (‖u‖ ‖v‖) = 5 / (√5 √5) and 9 / (3 · 4); then 3c − 0.5
    torch.testing.assert_close(self_dot(u, v, scale, shift), torch.tensor([[2.5], [1.75]]))
    silu = om.compiled(
        variant("adapter", "`act = torch.nn.functional.silu` where the reference has `act = gelu`")
    )
    down, up = torch.nn.Linear(2, 1), torch.nn.Linear(1, 2)
    with torch.no_grad():
        down.weight.copy_(torch.tensor([[1.0, 1.0]]))
        down.bias.zero_()
        up.weight.copy_(torch.tensor([[1.0], [2.0]]))
        up.bias.zero_()
    module = torch.nn.Module()
    module.down, module.up = down, up
    h = torch.tensor([[1.0, 1.0]])  # z = 2, silu(2) = 2σ(2)
    z = 2.0 / (1.0 + math.exp(-2.0))
    torch.testing.assert_close(silu(h, module), torch.tensor([[1.0 + z, 1.0 + 2.0 * z]]))


def test_a_variant_left_out_and_one_turned_are_described_by_their_lines():
    pooled = [v.description for v in om.variants("mean_pooling")]
    assert any("m.sum()" in text for text in pooled), pooled  # over every axis
    lhuc = om.compiled(
        variant(
            "lhuc",
            "`return h + 2.0 / (1.0 + torch.exp(-r))` where the "
            "reference has `return h * (2.0 / (1.0 + torch.exp(-r)))`",
        )
    )
    rows = torch.tensor([[0.0, math.log(3.0)]])  # 2σ(r) = 1 and 1.5
    h = torch.tensor([[2.0, 4.0]])
    torch.testing.assert_close(lhuc(h, rows, 0), torch.tensor([[3.0, 5.5]]))


def test_no_description_shows_a_known_mistakes_branch():
    for name in om.equations():
        for v in om.variants(name):
            assert "mistake" not in v.description, (name, v.description)


def test_the_judge_adds_them_after_a_checks_own_mistakes():
    data = {
        "lhuc": {"eval": {"expected": {}, "mistakes": {"own": {"a": 1}, "shared": {"b": 2}}}},
        "other": {"no case here": 0},
    }
    more = {
        ("lhuc", "eval"): {"shared": {"b": 3}, "added": {"c": 4}},
        ("lhuc", "train"): {"lost": {"d": 5}},  # a case the data does not have: not used
    }
    add_mistakes(data, more)
    assert data["lhuc"]["eval"]["mistakes"] == {
        "own": {"a": 1},
        "shared": {"b": 2},
        "added": {"c": 4},
    }
    assert "train" not in data["lhuc"]


@pytest.mark.parametrize(
    ("mutant_id", "named"),
    [
        ("fresh2-scale-shift-swapped", SWAPPED),
        ("fresh2-pool-batch-count", "`return total / m.sum()`"),
    ],
)
def test_a_mistake_nobody_listed_is_named_by_its_change(mutant_id, named, monkeypatch):
    from tests.course.test_grader_mutants import MUTANTS

    mutant = next(m for m in MUTANTS if m.id == mutant_id)
    reference = ROOT / "sanity_check_reference.pt"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        said = {}
        for label, ctx in (
            ("without", Context(None, reference)),
            ("with", Context(None, reference, OPERATOR_MISTAKES)),
        ):
            with monkeypatch.context() as patch:
                results = run_own_checks(mutant, ctx, patch)
            said[label] = [r.diagnosis for r in results.values() if r.status == FAIL]
    finally:
        torch.set_num_threads(threads)
    assert said["without"] and not any(said["without"])
    assert any(named in text for text in said["with"]), said["with"]


# Equations of five exercises (optimizer, plug-in, pooling, heads, SMART) whose variants
# ``regenerated`` makes again: every stored mistake of theirs is looked up among them.
SAMPLED = frozenset({"bias_corrected", "lhuc", "mean_pooling", "cosine_head", "symmetric_kl"})


def test_the_stored_operator_mistakes_were_made_from_todays_sources():
    """The file records a digest of what it was made from (the equations, the script, the
    stored cases): an equation changed since is a file to make again."""
    stored = load_trusted(OPERATOR_MISTAKES)
    assert stored["made from"] == om.made_from(), (
        "course/authoring/operator_mistakes.pt is older than what it is made from: "
        "python -m course.authoring.operator_mistakes --overwrite"
    )


@pytest.fixture
def regenerated() -> dict:
    """The variants of the ``SAMPLED`` equations that the script keeps, made now (about 5 s),
    not yet deduplicated."""
    data, kept = om.run_variants(SAMPLED)
    return dict(om.cases_of(data, (), kept, distinct=False))


def test_the_stored_operator_mistakes_are_made_again_alike(regenerated):
    """Each stored mistake of the ``SAMPLED`` equations is made again on this machine, its
    outputs within float32 rounding of another CPU (``same_seal``: the script keeps only
    variants that agree so on torch's plain kernels, so ``make test``'s numerics pass does not
    run this again on them). Which of two near-equal variants is kept may differ with that
    rounding, so the stored ones are looked up among all that are made."""
    fresh = regenerated
    sampled = {v.description for name in SAMPLED for v in om.variants(name)}
    components = {path[0] for path in fresh}  # the checks whose cases ran a sampled equation
    stored = load_trusted(OPERATOR_MISTAKES)["operator mistakes"]
    checked = 0
    for path, mistakes in stored.items():
        for text, sealed in mistakes.items():
            if path[0] not in components or text not in sampled:
                continue
            assert text in fresh.get(path, {}), (path, text)
            again = fresh[path][text]
            assert again.keys() == sealed.keys(), (path, text)
            for name, s in sealed.items():
                assert om.same_seal(s, again[name]), (path, text, name)
            checked += 1
    assert checked >= 50, checked


def test_neither_the_student_tree_nor_its_grader_holds_them():
    assert OPERATOR_MISTAKES.is_file()
    shipped = student_files(ROOT)
    for target, source in shipped.items():
        assert "operator_mistakes" not in target + source, (target, source)


def test_the_class_grader_names_it_in_a_students_results(tmp_path):
    """Graded as a class (``--trusted``: one runner, no containment to set up), a pooling that
    divides by the whole batch's count gets its FAIL named by the operator mistake in the
    student's results and the instructor's CSV."""
    from course.grading import grade

    text = (ROOT / "tasks/heads.py").read_text(encoding="utf-8")
    assert text.count("m.sum(1).clamp(min=1.0)") == 1
    student = tmp_path / "class" / "ada" / "tasks"
    student.mkdir(parents=True)
    (student / "heads.py").write_text(
        text.replace("m.sum(1).clamp(min=1.0)", "m.sum().clamp(min=1.0)")
    )
    out = tmp_path / "grades.csv"
    assert (
        grade.main([str(tmp_path / "class"), "--out", str(out), "--only", "pooling", "--trusted"])
        == 0
    )
    results = json.loads((tmp_path / "grades-results" / "ada.json").read_text(encoding="utf-8"))
    said = [t["extra_data"]["diagnosis"] for t in results["tests"] if t["status"] == "failed"]
    assert any("`return total / m.sum()` where the reference has" in d for d in said), said
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert "`return total / m.sum()`" in rows[0]["notes"], rows[0]["notes"]
