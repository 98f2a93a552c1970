"""How many planted mistakes the grader names: each mutant of the corpus
(tests/course/test_grader_mutants.py) planted in its exercise's file, that exercise's checks run
in this process, and for each whether a check FAILs and whether a FAIL carries a diagnosis (a
known mistake of the catalogue, or the shape of the error: k times the expected, shifted,
transposed, right but at the edges); then the same with the operator mistakes added, as the
class grader's judge adds them (course/authoring/operator_mistakes.py).

    python benchmarks/diagnosis_coverage.py            # the fresh sets, the shapes, the catalogued
    python benchmarks/diagnosis_coverage.py --all      # every mistake that changes an output

The fresh sets were written after the catalogue and the shapes and are left as found: they
measure what the grader names of mistakes nobody wrote a diagnosis for. Writes
benchmarks/results/diagnosis-coverage.md (command, commit, machine; per group the counts, per
mutant the first diagnosis).
"""

from __future__ import annotations

import argparse
import sys

import _common
import pytest
import torch

from course.grading.grade import OPERATOR_MISTAKES
from course.registry import FAIL, Context
from tests.course import test_grader_mutants as corpus

GROUPS = {
    "fresh": "written after the catalogue and the shapes, left as found",
    "fresh, second set": "written after every shape of course/shapes.py, left as found",
    "fresh, third set": "written blind (without reading the diagnoses), left as found",
    "fresh, fourth set": "written blind after the operator mistakes were built, left as found",
    "fresh, fifth set": "written blind after the value and activation operators, left as found",
    "shaped": "no known mistake: named, where at all, by the shape of the error",
    "catalogued": "typical mistakes first planted unnamed, then put in the catalogue",
}


def groups(every: bool) -> dict[str, list]:
    """The mutants of each group; with ``every``, also every other mistake that changes an
    output (the gradient-only mistakes are left out: their FAIL is a cut graph, not a value)."""
    found = {
        "fresh": corpus.FRESH_MUTANTS,
        "fresh, second set": corpus.FRESH_MUTANTS_2,
        "fresh, third set": corpus.FRESH_MUTANTS_3,
        "fresh, fourth set": corpus.FRESH_MUTANTS_4,
        "fresh, fifth set": corpus.FRESH_MUTANTS_5,
        "shaped": corpus.SHAPED_MUTANTS,
        "catalogued": corpus.CATALOGUED_MUTANTS,
    }
    if every:
        listed = {m.id for ms in found.values() for m in ms} | {
            m.id for m in corpus.GRADIENT_MUTANTS
        }
        found["the rest of the corpus"] = [m for m in corpus.MUTANTS if m.id not in listed]
    return found


def measure(mutant, ctx: Context) -> tuple[bool, str]:
    """(caught: some check of the exercise FAILs, the first diagnosis of a FAIL or "")."""
    with pytest.MonkeyPatch.context() as patch:
        results = corpus.run_own_checks(mutant, ctx, patch)
    failed = [r for r in results.values() if r.status == FAIL]
    said = next((r.diagnosis for r in failed if r.diagnosis), "")
    return bool(failed), said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--all", action="store_true", help="also every other value mistake of the corpus"
    )
    args = parser.parse_args()
    if not OPERATOR_MISTAKES.is_file():
        sys.exit(f"{OPERATOR_MISTAKES} is missing: python -m course.authoring.operator_mistakes")
    torch.set_num_threads(1)  # as the stored references were made
    reference = corpus.ROOT / "sanity_check_reference.pt"
    contexts = (Context(None, reference), Context(None, reference, OPERATOR_MISTAKES))
    report = _common.Report(
        "diagnosis-coverage",
        "How many planted mistakes the grader names",
        "Each mutant planted in its exercise's file, that exercise's checks run. Caught: some "
        "check FAILs. Named: a FAIL carries a diagnosis (a known mistake, or the error's shape); "
        "with operators: also the operator mistakes, as the class grader adds them.",
    )
    totals = [
        "| group | what | mutants | caught | named | named with operators |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    details = []
    for group, mutants in groups(args.all).items():
        rows = [
            "| mutant | exercise | caught | diagnosis | with the operator mistakes |",
            "| --- | --- | --- | --- | --- |",
        ]
        caught = named = with_operators = 0
        for mutant in mutants:
            print(f"[diagnosis_coverage] {group}: {mutant.id}", flush=True)
            (failed, said), (_, operated) = (measure(mutant, ctx) for ctx in contexts)
            caught, named = caught + failed, named + bool(said)
            with_operators += bool(operated)
            shown = [text.replace("|", "\\|")[:140] or "-" for text in (said, operated)]
            rows.append(
                f"| {mutant.id} | {mutant.exercise} | {'yes' if failed else 'NO'} | "
                f"{shown[0]} | {'same' if operated == said else shown[1]} |"
            )
        what = GROUPS.get(group, "every other mistake that changes an output")
        totals.append(
            f"| {group} | {what} | {len(mutants)} | {caught} | {named} | {with_operators} |"
        )
        details.append(f"### {group}\n\n" + "\n".join(rows))
    report.add("## Counts\n\n" + "\n".join(totals))
    report.add("## Each mutant\n\n" + "\n\n".join(details))
    report.write()


if __name__ == "__main__":
    main()
