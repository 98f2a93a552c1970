"""What the full project's tests need beyond tests/conftest.py, which the student tree shares:
the lab's scripts importable by name, and the lab's fixtures.

This file is not in the student tree (course/authoring/student_tree.txt does not name it), so
nothing the student tree ships names benchmarks/ or the lab's test helpers. pytest loads it for
every test under this folder, before any test module is imported.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
# The scripts of benchmarks/ import one another by name; the tests import them the same way.
BENCHMARKS = str(ROOT / "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)


@pytest.fixture(scope="session")
def finished_run(tiny_checkpoint: Path, tiny_data: Path, tmp_path_factory) -> Path:
    """A finished tiny finetune run of the three tasks (``tiny_run``: 2 epochs of 3 steps), for
    tests that read a run and write nothing into it."""
    from tests.helpers import tiny_run

    out = tmp_path_factory.mktemp("finished") / "finetune"
    return tiny_run(tiny_checkpoint, tiny_data, out, "--option", "finetune")


# ----------------------------------------------------------------------------------------------
# The two tiers: `make check` runs every test not marked slow (the inner loop, under two minutes
# on 2 cores), `make test` runs them all in parallel (the gate, what CI runs). Every test file is
# named in TIERS with its tier; tests/structure/test_tiers.py fails when a test file is not, so a
# new file is placed on purpose. benchmarks/test_times.py measures both tiers.
FAST = "fast"  # every test of the file is in the fast tier
SLOW = "slow"  # none is
BY_FIXTURE = "by fixture"  # a test that uses one of SLOW_FIXTURES is slow, the others fast
ONE_PER_EXERCISE = "one per exercise"  # a test parametrized by mutants or correct variants is
# fast for the first of each exercise, slow for the others; its other tests are fast

# Fixtures that train, grade or copy a tree, in the files whose tier is BY_FIXTURE or
# ONE_PER_EXERCISE: whatever uses them there (itself or through another fixture) is slow.
SLOW_FIXTURES = frozenset(
    {"finished_run", "made", "run_store", "solved_tree", "runs", "regenerated"}
)
# Arguments that make a test slow there when it takes them itself: a driver test that takes the
# tiny data files runs the driver on them; model_and_batch's in-process batch is fast.
SLOW_ARGUMENTS = frozenset({"tiny_data"})

# The tests of slow files that stay fast, so that the fast tier touches what they guard: the
# driver's one smoke run with a resume.
FAST_TESTS = frozenset({"test_resume_after_kill_matches_uninterrupted_run"})

TIERS: dict[str, str] = {
    "tests/commands/test_bad_input_all_commands.py": BY_FIXTURE,
    "tests/commands/test_bad_input_attention.py": SLOW,
    "tests/commands/test_bad_input_course.py": SLOW,
    "tests/commands/test_bad_input_export.py": SLOW,
    "tests/commands/test_bad_input_fusion_weights.py": SLOW,
    "tests/commands/test_bad_input_gradescope.py": SLOW,
    "tests/commands/test_bad_input_predict.py": SLOW,
    "tests/commands/test_bad_input_pretrain_mlm.py": SLOW,
    "tests/commands/test_bad_input_sanity_check.py": FAST,
    "tests/commands/test_bad_input_scaffold.py": FAST,
    "tests/commands/test_bad_input_suite_runner.py": SLOW,
    "tests/commands/test_bad_input_train_multitask.py": SLOW,
    "tests/commands/test_help_texts.py": FAST,
    "tests/commands/test_make_setup.py": SLOW,
    "tests/commands/test_moved_commands.py": FAST,
    "tests/course/test_add_a_check.py": SLOW,
    "tests/course/test_autograder.py": SLOW,
    "tests/course/test_checks.py": FAST,
    "tests/course/test_class_intake.py": SLOW,
    "tests/course/test_class_report.py": SLOW,
    "tests/course/test_course_layout.py": FAST,
    "tests/course/test_error_shapes.py": FAST,
    "tests/course/test_fail_page.py": FAST,
    "tests/course/test_instructor_commands_path.py": FAST,
    "tests/course/test_exercise_isolation.py": SLOW,
    "tests/course/test_grade_class.py": SLOW,
    "tests/course/test_grade_containment.py": SLOW,
    "tests/course/test_grade_hostile.py": SLOW,
    "tests/course/test_grade_machines.py": SLOW,
    "tests/course/test_grader_mutants.py": ONE_PER_EXERCISE,
    "tests/course/test_operator_mistakes.py": BY_FIXTURE,
    "tests/course/test_grader_store.py": SLOW,
    "tests/course/test_gradescope.py": SLOW,
    "tests/course/test_judge_messages.py": FAST,
    "tests/course/test_leaderboard.py": SLOW,
    "tests/course/test_scaffold.py": SLOW,
    "tests/course/test_seccomp.py": FAST,
    "tests/course/test_runs_travel.py": SLOW,
    "tests/course/test_solution_leaks.py": SLOW,
    "tests/course/test_student_readme.py": SLOW,
    "tests/course/test_student_tree_lint.py": SLOW,
    "tests/course/test_student_tree_names.py": SLOW,
    "tests/driver/test_batching.py": BY_FIXTURE,
    "tests/driver/test_cuda_graphs.py": BY_FIXTURE,
    "tests/driver/test_extras_hooks.py": BY_FIXTURE,
    "tests/driver/test_extras_registry.py": BY_FIXTURE,
    "tests/driver/test_grad_clipping.py": BY_FIXTURE,
    "tests/driver/test_loss_weights.py": BY_FIXTURE,
    "tests/driver/test_mlm_step.py": BY_FIXTURE,
    "tests/driver/test_pcgrad.py": BY_FIXTURE,
    "tests/driver/test_state.py": BY_FIXTURE,
    "tests/driver/test_static_shapes.py": BY_FIXTURE,
    "tests/driver/test_robustness.py": BY_FIXTURE,
    "tests/driver/test_driver.py": BY_FIXTURE,
    "tests/driver/test_adapters_export.py": SLOW,
    "tests/driver/test_compiled.py": SLOW,
    "tests/driver/test_distillation.py": SLOW,
    "tests/driver/test_distributed.py": SLOW,
    "tests/driver/test_fusion.py": SLOW,
    "tests/driver/test_gpu.py": SLOW,
    "tests/driver/test_init_from.py": SLOW,
    "tests/driver/test_overwrite.py": SLOW,
    "tests/driver/test_peft_export.py": SLOW,
    "tests/driver/test_predict_export.py": SLOW,
    "tests/driver/test_pretrain_mlm.py": SLOW,
    "tests/driver/test_tensorboard_report.py": SLOW,
    "tests/benchmarks/test_adapter_ablation.py": SLOW,
    "tests/benchmarks/test_gpu_check.py": SLOW,
    "tests/benchmarks/test_plain_loop.py": SLOW,
    "tests/benchmarks/test_results_writer.py": FAST,
    "tests/benchmarks/test_suite_runner.py": SLOW,
    "tests/benchmarks/test_suites.py": BY_FIXTURE,
    "tests/benchmarks/test_test_times.py": FAST,
    "tests/model/test_attention.py": BY_FIXTURE,
    "tests/model/test_bert.py": FAST,
    "tests/model/test_bert_given.py": FAST,
    "tests/model/test_broken_kind.py": SLOW,
    "tests/model/test_layer_decay.py": FAST,
    "tests/model/test_mlm.py": FAST,
    "tests/model/test_mlm_given.py": FAST,
    "tests/model/test_optimizer.py": FAST,
    "tests/model/test_optimizer_foreach.py": SLOW,
    "tests/model/test_optimizer_given.py": FAST,
    "tests/model/test_plugin_in_one_file.py": SLOW,
    "tests/model/test_plugins.py": FAST,
    "tests/model/test_plugins_given.py": FAST,
    "tests/model/test_pretrained.py": FAST,
    "tests/model/test_sampling.py": FAST,
    "tests/model/test_sampling_given.py": FAST,
    "tests/model/test_smart.py": FAST,
    "tests/model/test_smart_given.py": FAST,
    "tests/model/test_tokenizer.py": FAST,
    "tests/structure/test_containment_skips.py": FAST,
    "tests/structure/test_one_home.py": FAST,
    "tests/structure/test_recipes.py": SLOW,
    "tests/structure/test_structure.py": FAST,
    "tests/structure/test_tiers.py": FAST,
    "tests/tasks/test_reader.py": FAST,
    "tests/tasks/test_tasks.py": FAST,
}

# Files whose tests start class graders (runner user ids, lock folders, process counts): under
# pytest-xdist they run in one worker, one after another (``--dist loadgroup``).
GRADER_FILES = frozenset(
    f"tests/course/{name}.py"
    for name in (
        "test_autograder",
        "test_class_intake",
        "test_class_report",
        "test_grade_class",
        "test_grade_containment",
        "test_grade_hostile",
        "test_grade_machines",
        "test_leaderboard",
        "test_gradescope",
    )
) | {"tests/commands/test_bad_input_gradescope.py", "tests/commands/test_bad_input_course.py"}


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist every worker is a process of its own, and torch's default of a thread
    per core in each would oversubscribe the cores: each worker takes its share of them (its
    subprocesses too, through OMP_NUM_THREADS)."""
    if getattr(config.option, "dist", None) == "loadgroup" and not load_groups_work():
        raise pytest.UsageError(
            f"pytest {pytest.__version__} drops pytest-xdist's load groups (the class graders would"
            " run beside each other): install the pytest that requirements-dev.txt names"
        )
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def load_groups_work() -> bool:
    """Whether pytest-xdist's ``--dist loadgroup`` can group tests under this pytest: it marks a
    group by writing a suffix into each test's ``_nodeid``, which a pytest release may stop
    reading (9.2 keeps the node id elsewhere). Tried on a bare test item, as xdist does."""
    probe = object.__new__(pytest.Function)
    probe._nodeid = "probe@group"
    try:
        return probe.nodeid == "probe@group"
    except AttributeError:
        return False


def tier_is_slow(item: pytest.Item, tier: str, first_of: dict) -> bool:
    """Whether ``item`` (of a file of ``tier``) is slow; ``first_of`` holds the first test of
    each (test function, exercise) seen so far (``ONE_PER_EXERCISE``)."""
    if item.name in FAST_TESTS or item.originalname in FAST_TESTS:
        return False
    if tier == SLOW:
        return True
    function = getattr(item, "function", None)
    arguments = set(inspect.signature(function).parameters) if function else set()
    if SLOW_FIXTURES & set(item.fixturenames) or SLOW_ARGUMENTS & arguments:
        return tier in (BY_FIXTURE, ONE_PER_EXERCISE)
    if tier == ONE_PER_EXERCISE:
        params = getattr(getattr(item, "callspec", None), "params", {})
        exercise = next((getattr(p, "exercise", None) for p in params.values()), None)
        if exercise is None:
            return False
        key = (item.originalname, exercise)
        return first_of.setdefault(key, item.nodeid) != item.nodeid
    return False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    first_of: dict = {}
    for item in items:
        path = item.path.resolve().relative_to(ROOT).as_posix()
        tier = TIERS.get(path)
        if tier is not None and tier_is_slow(item, tier, first_of):
            item.add_marker(pytest.mark.slow)
        if path in GRADER_FILES:
            item.add_marker(pytest.mark.xdist_group("class-graders"))
