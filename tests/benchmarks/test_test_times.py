"""benchmarks/test_times.py's readings, on hand-made input: the cores' busy share between two
/proc/stat readings, and each load group's sum of test times."""

import test_times


def test_the_busy_share_is_the_busy_ticks_over_all_ticks():
    assert test_times.busy_share((100, 400), (175, 500)) == (
        "the machine's cores were busy 75% of that time (/proc/stat)"
    )
    assert "unknown" in test_times.busy_share(None, (1, 2))


def test_this_machines_ticks_grow_and_busy_is_a_part_of_all():
    first = test_times.cpu_jiffies()
    if first is None:
        return  # no /proc/stat: busy_share says so, tested above
    second = test_times.cpu_jiffies()
    assert 0 <= first[0] <= first[1] <= second[1]


def test_a_load_groups_tests_are_summed_apart():
    rows = [
        ("tests/a.py::test_x@graders", 2.5, "passed"),
        ("tests/a.py::test_y@graders", 1.0, "passed"),
        ("tests/b.py::test_z", 7.0, "passed"),
    ]
    assert test_times.group_line(rows) == " The load group `graders` (one worker): 2 tests, 4 s."
