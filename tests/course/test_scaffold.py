"""Course scaffolding (course.authoring.scaffold) and per-component grading (sanity_check.py, the
runner of the checks in course/checks/).

* the full solution passes every check;
* the student tree (every exercise cut out) imports, its tests collect, and its sanity check
  marks NOT IMPLEMENTED exactly the checks that depend on an exercise, everything else PASS;
* a student tree with one exercise put back passes exactly the checks that need only that one;
* the marker format: parsing, errors, the raise statement, the file selection, OUT_DIR rules.

This file grades the scaffolding against the full solution, so it is not copied into the
student tree (``course.authoring.scaffold.INSTRUCTOR_ONLY``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import student_tree_size

import sanity_check
from course.authoring import pack, scaffold
from course.authoring.unused_names import strip_pragma
from tools import MOVED

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = [  # the order of GUIDE.md
    "embeddings",
    "attention",
    "layer",
    "adamw",
    "sampler",
    "adapter",
    "lhuc",
    "lora",
    "pals",
    "smart",
    "masking",
    "mlm-loss",
    "pooling",
    "pair-features",
    "cosine-head",
    "task-losses",
]
STATUS = re.compile(
    r"^(?P<name>.+?)\s+max_abs_diff \S+\s+tol \S+\s+(?P<status>PASS|FAIL|NOT IMPLEMENTED)$"
)


def run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """A Python subprocess that imports from ``cwd`` only (not from this checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(cwd)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def statuses(output: str) -> dict[str, str]:
    """check name -> PASS / FAIL / NOT IMPLEMENTED, from sanity_check.py's output."""
    found = {}
    for line in output.splitlines():
        m = STATUS.match(line)
        if m:
            found[m["name"]] = m["status"]
    return found


def expected_statuses(removed: set[str]) -> dict[str, str]:
    """A check is NOT IMPLEMENTED when it depends on a removed exercise, else it passes."""
    return {
        c.name: "NOT IMPLEMENTED" if removed & set(c.exercises) else "PASS"
        for c in sanity_check.CHECKS
    }


# ----------------------------------------------------------------------------------------------
# The real project


def test_every_exercise_is_marked_and_graded() -> None:
    exercises = scaffold.find_exercises(ROOT)
    assert sorted(exercises) == sorted(EXERCISES)
    graded = {e for c in sanity_check.CHECKS for e in c.exercises}
    assert graded == set(EXERCISES), "every exercise has a check, every check a real exercise"
    for exercise in EXERCISES:  # an exercise's own checks depend on it alone
        assert any(c.exercises == (exercise,) for c in sanity_check.CHECKS), exercise
    assert len({c.name for c in sanity_check.CHECKS}) == len(sanity_check.CHECKS)
    listing = run(["-m", "course.authoring.scaffold", "--list"], ROOT)
    assert listing.returncode == 0, listing.stderr
    assert "BertSelfAttention.forward" in listing.stdout and "AdamW.step" in listing.stdout


@pytest.mark.numerics
def test_full_solution_passes_every_check(capsys) -> None:
    assert sanity_check.main([]) == 0
    out = capsys.readouterr().out
    assert statuses(out) == {c.name: "PASS" for c in sanity_check.CHECKS}
    assert out.splitlines()[-1] == f"{len(sanity_check.CHECKS)} passed, 0 failed"


def test_guide_lists_every_exercise_in_order_with_its_checks() -> None:
    guide = (ROOT / "GUIDE.md").read_text(encoding="utf-8")
    positions = [guide.index(f"`{e}`") for e in EXERCISES]
    assert positions == sorted(positions), "GUIDE.md lists the exercises in EXERCISES' order"
    for check in sanity_check.CHECKS:
        if check.exercises:
            assert check.name in guide, f"GUIDE.md does not name the check {check.name!r}"
    for regions in scaffold.find_exercises(ROOT).values():
        for region in regions:
            assert region.function in guide and region.path in guide, region


@pytest.fixture(scope="module")
def student_tree(tmp_path_factory) -> Path:
    """Every exercise cut out, through the command line as an instructor would."""
    out = tmp_path_factory.mktemp("student") / "minbert-student"
    result = run(["-m", "course.authoring.scaffold", str(out)], ROOT)
    assert result.returncode == 0, result.stderr
    assert "regions removed" in result.stdout
    return out


def test_student_tree_fails_exactly_the_removed_exercises(student_tree: Path) -> None:
    result = run(["sanity_check.py"], student_tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert statuses(result.stdout) == expected_statuses(set(EXERCISES))
    lines = result.stdout.splitlines()
    failed = sum(1 for c in sanity_check.CHECKS if c.exercises)
    assert lines[-1] == f"{len(sanity_check.CHECKS) - failed} passed, {failed} failed"
    # under each NOT IMPLEMENTED: the hint of one of the check's own exercises
    by_name = {c.name: c for c in sanity_check.CHECKS}
    for i, line in enumerate(lines):
        m = STATUS.match(line)
        if m and m["status"] == "NOT IMPLEMENTED":
            hint = lines[i + 1].strip()
            assert hint.startswith("hint: "), hint
            assert hint.removeprefix("hint: ").split(":")[0] in by_name[m["name"]].exercises


def test_every_test_of_the_student_tree_fails_before_the_exercises_are_written(
    student_tree: Path,
) -> None:
    """The student's tests are the tests of what the student writes: with every exercise
    removed none passes (those of the given code stay in the full project,
    tests/model/*_given.py)."""
    result = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"], student_tree, 300)
    passed = [line for line in result.stdout.splitlines() if line.startswith("PASSED")]
    assert result.returncode == 1 and " failed" in result.stdout.splitlines()[-1]
    assert passed == []


def test_student_tree_imports_and_its_tests_collect(student_tree: Path) -> None:
    modules = "minbert.bert, minbert.optimizer, minbert.plugins, minbert.smart, minbert.sampling"
    code = f"import {modules}, minbert.pretrained, tasks, train_multitask, sanity_check; "
    code += "print(minbert.bert.__file__)"
    result = run(["-c", code], student_tree)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).is_relative_to(student_tree)  # the student's own code
    result = run(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"], student_tree)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_round_robin_sampling_needs_no_exercise(student_tree: Path) -> None:
    """Round-robin is not the sampler exercise: it works in the student tree (annealed does not)."""
    code = (
        "from minbert.sampling import TaskSampler\n"
        "s = TaskSampler('round-robin', {'a': 3, 'b': 5}, epochs=2, seed=0)\n"
        "print(s.schedule(2, 5), s.probabilities(1))\n"
        "try:\n"
        "    TaskSampler('annealed', {'a': 3, 'b': 5}, epochs=2, seed=0).schedule(1, 2)\n"
        "except NotImplementedError as err:\n"
        "    print(str(err).split(':')[0])\n"
    )
    result = run(["-c", code], student_tree)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "['a', 'b', 'a', 'b', 'a'] {'a': 0.5, 'b': 0.5}",
        "sampler",
    ]


@pytest.mark.parametrize(
    ("flags", "missing"),
    [
        (["--teachers", "sst=elsewhere"], "extras/distillation.py"),
        (["--adapters_from", "elsewhere", "--option", "fusion"], "extras/fusion.py"),
        (["--step_gradient", "pcgrad"], "minbert/pcgrad.py"),
        (["--compile"], "extras/compiled.py"),
    ],
)
def test_a_flag_of_the_labs_extras_is_one_line_in_the_student_tree(
    student_tree: Path, tmp_path: Path, flags: list[str], missing: str
) -> None:
    """The student tree leaves the lab's extras out: the driver's flag that needs one says which
    file, in one line, before anything is written."""
    out = tmp_path / "run"
    result = run(["train_multitask.py", *flags, "--out_dir", str(out)], student_tree)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {flags[0]}") and missing in lines[0]
    assert not out.exists() and not (student_tree / missing).exists()


def test_student_tree_is_the_manifest_with_only_the_regions_replaced(student_tree: Path) -> None:
    on_disk = {  # what earlier tests' runs left there (bytecode) and the scaffold's record aside
        p.relative_to(student_tree).as_posix()
        for p in student_tree.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.name != scaffold.RECORD
    }
    # the grader is packed: its files are in the archive, each at its own path, and nowhere else
    packed = pack.unpacked((student_tree / pack.ARCHIVE).read_bytes())
    assert "course/registry.py" in packed and not (student_tree / "course").exists()
    copied = (on_disk - {pack.ARCHIVE}) | {f"{pack.ARCHIVE}/{name}" for name in packed}

    def written(target: str) -> bytes:
        path = pack.inside(target)
        return packed[path] if path is not None else (student_tree / target).read_bytes()

    # Files that appeared, vanished or changed in this checkout since the tree was written (by
    # someone editing it while the tests run) are not held against the scaffold.
    written_at = (student_tree / "minbert/bert.py").stat().st_mtime  # written, not copied
    files = scaffold.student_files(ROOT)
    stable = {t: s for t, s in files.items() if (ROOT / s).stat().st_mtime < written_at}
    assert set(stable) <= copied  # every file the manifest names, and no other
    assert all(t in files or not (ROOT / t).exists() for t in copied)
    assert not {"benchmarks", "docs", "RESULTS.md"} & {p.split("/")[0] for p in copied}
    assert (
        not set(scaffold.INSTRUCTOR_ONLY) & copied and "course/authoring/scaffold.py" not in copied
    )
    assert scaffold.find_exercises(student_tree) == {}  # no solution left behind
    regions = scaffold.find_exercises(ROOT)
    changed = {r.path for rs in regions.values() for r in rs}
    for target, rel in sorted(stable.items()):
        original, student = (ROOT / rel).read_bytes(), written(target)
        if rel.endswith(".md"):
            assert student.decode() == scaffold.student_part(original.decode()), rel
            continue
        if rel not in changed:
            assert student == original, rel
            continue
        text = original.decode()
        assert student.decode() == scaffold.student_source(text, rel)
        # outside the regions, line for line the same
        kept: list[str | None] = list(text.splitlines())
        for rs in regions.values():
            for r in rs:
                if r.path == rel:
                    kept[r.begin : r.end + 1] = [None] * (r.end + 1 - r.begin)
        student_lines = {strip_pragma(line) for line in student.decode().splitlines()}
        assert [line for line in kept if line is not None and line not in student_lines] == []
    assert "m.lerp_(grad, 1 - beta1)" not in (student_tree / "minbert/optimizer.py").read_text()
    guide = (student_tree / "GUIDE.md").read_text()
    assert "## For instructors" not in guide and "### 12. `mlm-loss`" in guide
    assert (student_tree / "README.md").read_text().startswith("# minBERT: the exercises")


SIZED = '''"""A module docstring
of two lines."""

import os  # not a comment line


def f():
    # a comment line
    """One line."""
    return os.sep
'''


def test_the_size_script_counts_blank_comment_and_docstring_lines_as_written_by_hand() -> None:
    size = student_tree_size.size_of(SIZED)
    assert (size.files, size.lines, size.blank, size.comments, size.docstrings) == (1, 10, 3, 1, 3)
    assert size.row() == ["1", "10", "6", "3"]  # files, all, without blanks and comments, code


def test_the_size_script_puts_every_python_file_of_the_student_tree_in_one_part() -> None:
    tree, packed = student_tree_size.student_tree()
    files = scaffold.student_files(ROOT)
    assert tree.keys() | {f"grader.pyz/{p}" for p in packed} == files.keys() | {"grader.pyz"}
    assert "course/registry.py" in packed and not any(p.startswith("course/") for p in tree)
    parts = {path: student_tree_size.part_of(path) for path in tree}  # exits on two or none
    assert all(parts[p] for p in tree if p.endswith(".py"))
    lab = student_tree_size.lab_parts()
    assert "extras/distillation.py" in lab and "minbert/pcgrad.py" in lab
    assert all((ROOT / p).is_file() and p not in tree for p in lab)


# Lines of solution regions that are generic plumbing, found in given (non-exercise) code too.
GENERIC_LINES = {
    "for d in deltas:",  # tests/model/test_smart.py
    "with torch.enable_grad():",  # minbert/optimizer.py
    "pal = self.by_task[task]",  # PAL.layer_of
    'if norm == "linf":',  # minbert/smart.py: _token_norm
}


def solution_lines() -> dict[str, str]:
    """Normalised solution line -> where it is ("path:line"), over every region of the project.

    The rule: each line of a region, its trailing comment dropped and its whitespace collapsed to
    single spaces; comment-only lines, lines of fewer than 12 non-space characters (``return y``,
    ``else:``, ``)``) and the ``GENERIC_LINES`` left out, because they say nothing of a solution.
    """
    found = {}
    for regions in scaffold.find_exercises(ROOT).values():
        for r in regions:
            lines = (ROOT / r.path).read_text(encoding="utf-8").splitlines()
            for i in range(r.begin + 1, r.end):
                line = re.sub(r"\s+#\s.*$", "", lines[i])
                line = " ".join(line.split())
                if line.startswith("#") or len(line.replace(" ", "")) < 12:
                    continue
                if line not in GENERIC_LINES:
                    found[line] = f"{r.path}:{i + 1}"
    return found


def test_no_solution_line_appears_anywhere_in_the_student_tree(student_tree: Path) -> None:
    """No line of any solution region (see ``solution_lines`` for the rule) occurs anywhere in any
    text file of the student tree (its whitespace collapsed too): not in code, docstrings, hints,
    tests, the grader or the docs."""
    lines = solution_lines()
    assert len(lines) > 50
    leaks = []
    for path in sorted(student_tree.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            text = " ".join(path.read_text(encoding="utf-8").split())
        except UnicodeDecodeError:  # binary: the stored reference data, tensors only
            continue
        leaks += [
            f"{where} in {path.relative_to(student_tree)}"
            for line, where in lines.items()
            if line in text
        ]
    assert leaks == []
    for rel in scaffold.INSTRUCTOR_ONLY:
        assert not (student_tree / rel).exists(), rel


# Runs sanity_check.main in each tree given on the command line, one process for all of them
# (torch is imported once, each tree's exercise packages, minbert and tasks, afresh); prints
# {tree: [exit code, output]} as JSON.
MANY_TREES = """
import contextlib, io, json, sys
results = {}
for tree in sys.argv[1:]:
    for name in [m for m in sys.modules if m in ("minbert", "tasks", "sanity_check")
                 or m.startswith(("minbert.", "tasks."))]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    import sanity_check
    assert sanity_check.__file__.startswith(tree), sanity_check.__file__
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = sanity_check.main([])
    sys.path.remove(tree)
    results[tree] = [code, out.getvalue()]
print(json.dumps(results))
"""


def test_putting_one_solution_back_passes_exactly_its_checks(tmp_path: Path) -> None:
    trees = {}
    for exercise in EXERCISES:
        trees[exercise] = tmp_path / exercise
        others = [e for e in EXERCISES if e != exercise]
        scaffold.write_student_tree(trees[exercise], ROOT, remove=others)
    result = run(["-c", MANY_TREES, *map(str, trees.values())], tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    outputs = json.loads(result.stdout)
    for exercise, tree in trees.items():
        code, out = outputs[str(tree)]
        got = statuses(out)
        assert got == expected_statuses(set(EXERCISES) - {exercise}), exercise
        own = [c.name for c in sanity_check.CHECKS if c.exercises == (exercise,)]
        assert own and all(got[name] == "PASS" for name in own)
        assert code == 1


# ----------------------------------------------------------------------------------------------
# The marker format, on small made-up projects


MARKED = textwrap.dedent(
    '''\
    """Module docstring mentioning # BEGIN SOLUTION: not-a-marker at a line start:
    # BEGIN SOLUTION: fake
    """


    def double(x):
        # HINT: return twice x,
        # HINT: as "2·x".
        # BEGIN SOLUTION: first
        y = 2 * x

        return y
        # END SOLUTION


    class Box:
        def get(self, items):
            total = 0
            for item in items:
                # HINT: add item
                # BEGIN SOLUTION: second
                total += item
                # END SOLUTION
            return total
    '''
)


def make_project(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_regions_are_found_with_their_hints_and_functions() -> None:
    regions = scaffold.find_regions(MARKED, "m.py")
    assert [(r.exercise, r.function, r.indent) for r in regions] == [
        ("first", "double", " " * 4),
        ("second", "Box.get", " " * 12),
    ]
    assert regions[0].hint == 'return twice x, as "2·x".'


def test_student_source_replaces_only_the_chosen_regions() -> None:
    student = scaffold.student_source(MARKED, "m.py", remove=["first"])
    namespace: dict = {}
    exec(compile(student, "m.py", "exec"), namespace)
    with pytest.raises(NotImplementedError, match=r'^first: return twice x, as "2·x"\.$'):
        namespace["double"](1)
    assert namespace["Box"]().get([1, 2]) == 3  # "second" kept, markers and all
    assert "# BEGIN SOLUTION: second" in student and "BEGIN SOLUTION: first" not in student
    assert "# HINT: return twice x," in student  # the hint stays for the student
    everything = scaffold.student_source(MARKED, "m.py")
    assert "total += item" not in everything and "y = 2 * x" not in everything
    assert scaffold.student_source(MARKED, "m.py", remove=[]) == MARKED


def test_long_hints_wrap_into_a_valid_statement() -> None:
    hint = 'use "quotes", back\\slashes and ' + "many words " * 30
    lines = scaffold.raise_statement("ex", hint.strip(), " " * 16)
    assert len(lines) > 3 and all(len(line) <= scaffold.LINE_LENGTH for line in lines)
    with pytest.raises(NotImplementedError) as err:
        exec(textwrap.dedent("\n".join(lines)))
    assert str(err.value) == "ex: " + hint.strip()


@pytest.mark.parametrize(
    "body, message",
    [
        ("    # HINT: h\n    # BEGIN SOLUTION: a\n    return 1\n", "without an END"),
        ("    # HINT: h\n    # END SOLUTION\n", "without a BEGIN"),
        ("    # BEGIN SOLUTION: a\n    return 1\n    # END SOLUTION\n", "no '# HINT"),
        (
            "    # HINT: h\n    # BEGIN SOLUTION: A b\n    return 1\n    # END SOLUTION\n",
            "malformed",
        ),
        ("    # HINT: h\n    # BEGIN SOLUTION: a\n    # END SOLUTION\n", "empty"),
        (
            "    if True:\n        # HINT: h\n        # BEGIN SOLUTION: a\n        x = 1\n"
            "    # END SOLUTION\n    return 1\n",
            "indentation",
        ),
        (
            "    # HINT: h\n    # BEGIN SOLUTION: a\n    # HINT: h\n    # BEGIN SOLUTION: b\n"
            "    return 1\n    # END SOLUTION\n    # END SOLUTION\n",
            "inside the region",
        ),
    ],
)
def test_malformed_markers_are_errors(body: str, message: str) -> None:
    with pytest.raises(scaffold.ScaffoldError, match=re.escape(message)):
        scaffold.find_regions("def f():\n" + body, "bad.py")


def test_cli_without_git_selects_exercises_and_guards_out_dir(tmp_path: Path, capsys) -> None:
    source = make_project(
        tmp_path / "project",
        {
            "pkg/m.py": MARKED,
            "README.md": "# BEGIN SOLUTION: in-markdown is not code\n",
            "data/train.csv": "big\n",
            "runs/old/log.txt": "x\n",
            "pkg/__pycache__/m.cpython-311.pyc": "x",
        },
    )
    out = tmp_path / "out"
    assert scaffold.main([str(out), "--source", str(source), "--exercise", "second"]) == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        scaffold.RECORD,  # what it wrote, for a later --force
        "README.md",
        "pkg/m.py",
    ]
    student = (out / "pkg/m.py").read_text()
    assert "y = 2 * x" in student and "total += item" not in student
    assert (out / "README.md").read_text() == "# BEGIN SOLUTION: in-markdown is not code\n"

    assert scaffold.main([str(out), "--source", str(source)]) == 2  # not empty
    assert "--force" in capsys.readouterr().err
    assert scaffold.main([str(out), "--source", str(source), "--force", "--keep", "second"]) == 0
    student = (out / "pkg/m.py").read_text()
    assert "y = 2 * x" not in student and "total += item" in student
    assert scaffold.main([str(out), "--source", str(source), "--force", "--exercise", "x"]) == 2
    assert "unknown exercise" in capsys.readouterr().err
    assert scaffold.main([str(source / "sub"), "--source", str(source)]) == 2
    assert "inside the source tree" in capsys.readouterr().err
    assert not (source / "sub").exists()

    assert scaffold.main(["--list", "--source", str(source)]) == 0
    listing = capsys.readouterr().out
    assert "first" in listing and "pkg/m.py" in listing and "Box.get" in listing


def test_the_student_part_of_the_guide_is_short_and_names_only_files_the_student_has(
    student_tree,
) -> None:
    """The part before "For instructors" is read in one sitting (at most 215 lines; 200 before
    the four exercises of the task heads and losses), and every file or folder it names in
    backticks is in the student tree."""
    guide = (ROOT / "GUIDE.md").read_text(encoding="utf-8")
    student = guide[: guide.index("## For instructors")]
    assert len(student.splitlines()) <= 215
    named = set(re.findall(r"`([\w./-]+(?:\.py|\.pt|\.md|/))`", student))
    named |= set(re.findall(r"`([\w-]+/[\w./-]+)`", student))
    assert "minbert/bert.py" in named and "minbert/mlm.py" in named
    missing = sorted(path for path in named if not (student_tree / path).exists())
    assert not missing, missing


def test_the_student_tree_with_the_solutions_in_place_passes_its_own_tests(tmp_path) -> None:
    """What a student who wrote every exercise as the reference does runs: the student tree's
    own tests (those of what the student writes) pass there, with nothing of the lab."""
    out = tmp_path / "solved"
    scaffold.write_student_tree(out, remove=[])
    result = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"], out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1]


def test_a_course_folder_of_the_students_never_shadows_the_packed_grader(tmp_path) -> None:
    """The student tree's grader is one file, grader.pyz, first on the import path of
    ``sanity_check.py`` and of the tests: a ``course/`` package the student makes beside it
    (which Python would find first in the current folder) is never imported."""
    out = tmp_path / "solved"
    scaffold.write_student_tree(out, remove=["sampler"])
    assert not (out / "course").exists() and (out / "grader.pyz").is_file()
    (out / "course").mkdir()
    (out / "course" / "__init__.py").write_text('raise SystemExit("the student\'s course/ ran")\n')
    code = "import sanity_check, course; print(course.__file__)"
    result = run(["-c", code], out)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == out / "grader.pyz" / "course" / "__init__.py"
    result = run(["sanity_check.py", "--only", "adamw", "--only", "sampler"], out)
    assert statuses(result.stdout) == {
        c.name: "NOT IMPLEMENTED" if "sampler" in c.exercises else "PASS"
        for c in sanity_check.CHECKS
        if {"adamw", "sampler"} & set(c.exercises)
    }, result.stdout + result.stderr
    pytest = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/course/test_checks.py"]
    result = run([*pytest, "-k", "adamw"], out)
    assert result.returncode == 0 and " passed" in result.stdout.splitlines()[-1], result.stdout


def test_the_student_trees_help_offers_only_what_it_can_run(student_tree: Path) -> None:
    """A flag or choice of a lab extra (multitask/extras.py) is in the full project's --help
    and not in the student tree's, where using it is one line naming what it needs (the test
    above)."""
    from multitask.extras import EXTRAS

    lab = {name: extra.module for extra in EXTRAS for name, _ in extra.flags}
    lab["adapters_from"] = "extras.fusion"  # a model setting, offered only with the extra
    assert {"teachers", "compile", "init_lora", "adapters_from", "report_to"} <= set(lab)
    full = run(["train_multitask.py", "--help"], ROOT).stdout
    student = run(["train_multitask.py", "--help"], student_tree).stdout

    def listed(name: str, text: str) -> bool:  # a line of the flag listing, not a mention
        return re.search(rf"^\s+--{name}\b", text, re.MULTILINE) is not None

    for name in lab:
        assert listed(name, full) and not listed(name, student), name
    assert "pals,fusion}" in full and "pals}" in student  # --option's choices
    assert "summed,pcgrad}" in full and "summed}" in student  # --step_gradient's
    assert "{adamw,foreach,fused}" in full and "{adamw}" in student  # --optimizer's
    words = " ".join(full.split()), " ".join(student.split())  # the help as wrapped, unwrapped
    assert "(default: foreach)" in words[0] and "(default: adamw)" in words[1]  # none it lacks
    for extra_choice in ("pcgrad:", "foreach:", "fused:"):  # nor described in its help
        assert extra_choice in full and extra_choice not in student, extra_choice
    used = run(["train_multitask.py", "--teachers", "sst=x"], student_tree)
    assert used.returncode == 2 and "needs extras/distillation.py" in used.stderr


def test_the_student_tree_takes_its_parts_by_the_registries_tables() -> None:
    """Every task, plug-in kind and check of the registries' tables ships, but an extra's; no
    file of an extra ships; and the manifest names no single kind, so a new kind ships as it is."""
    from course.checks import MODULES
    from minbert.plugins.kinds import KIND_NAMES
    from multitask.extras import EXTRAS
    from tasks import TASK_MODULES

    shipped = set(scaffold.student_files(ROOT))
    extras_kinds = {kind for extra in EXTRAS for kind in extra.kinds}
    kinds = {k for k in KIND_NAMES if f"minbert/plugins/{k}.py" in shipped}
    assert kinds == set(KIND_NAMES) - extras_kinds and "fusion" in extras_kinds
    assert {f"{m.replace('.', '/')}.py" for m in TASK_MODULES} <= shipped
    assert {f"grader.pyz/course/checks/{m}.py" for m in MODULES} <= shipped  # packed
    assert shipped.isdisjoint(f for extra in EXTRAS for f in extra.files())
    manifest = (ROOT / scaffold.MANIFEST).read_text(encoding="utf-8").splitlines()
    assert not [line for line in manifest if re.fullmatch(r"minbert/plugins/\w+\.py", line)]


def test_multitask_holds_only_what_the_student_tree_ships():
    """multitask/ is the core: each of its files ships, but the stubs at the moved commands' old
    names (tools/__init__.py: MOVED); the extras' and the tools' folders never ship."""
    shipped = set(scaffold.student_files(ROOT).values())
    here = {p.relative_to(ROOT).as_posix() for p in (ROOT / "multitask").glob("*") if p.is_file()}
    assert here - shipped == {f"{old.replace('.', '/')}.py" for old in MOVED}
    assert [f for f in shipped if f.startswith(("extras/", "tools/"))] == []
