"""The final project's leaderboard (course/grading/leaderboard.py, course/grading/predictions.py) on
the course's real dev files split in two: a "public" half a student trains on, and a "hidden" half
whose labels stand in for the instructor's test labels.

One student's prediction files are a real (tiny) run of the driver on the public half, and its
scores must equal the driver's own ``--evaluate`` on the hidden labels; the others hold bad files,
each of which must cost that student that task, in one line, and nothing else."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from course.grading.leaderboard import main
from course.grading.predictions import label_file_names, prediction_file
from tasks import get_task
from tasks.metrics import overall_score
from tests.helpers import run_driver, short_run

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TASKS = ("sst", "para", "sts")
FLOORS = {"sst": 0.0, "para": 0.0, "sts": -1.0}  # a bad file's metric: a term of 0 in overall

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"no course data in {REAL}")


# ----------------------------------------------------------------------------------------------
# The data: each course dev file split into a public and a hidden half


def split_dev_file(task_name: str, student_data: Path, labels: Path) -> None:
    """The dev file's rows, alternately public (the student's train, dev) and hidden (the
    student's test file without its label column; the instructor's label file with it). Lines
    are copied as they are, so quoting survives."""
    task = get_task(task_name)
    header, *rows = (REAL / task.files["dev"]).read_text(encoding="utf-8").splitlines()
    public, hidden = rows[0::2], rows[1::2]
    for split in ("train", "dev"):
        (student_data / task.files[split]).write_text("\n".join([header, *public]) + "\n")
    unlabelled = [line.rsplit("\t", 1)[0] for line in (header, *hidden)]
    (student_data / task.files["test"]).write_text("\n".join(unlabelled) + "\n")
    (labels / label_file_names(task)[0]).write_text("\n".join([header, *hidden]) + "\n")


@pytest.fixture(scope="module")
def course(tiny_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """The split data, a finished tiny run on the public half (its test predictions are on the
    hidden half) and the driver's ``--evaluate`` of that run on the hidden labels."""
    import train_multitask

    root = tmp_path_factory.mktemp("leaderboard")
    student_data, labels = root / "student_data", root / "labels"
    student_data.mkdir()
    labels.mkdir()
    for name in TASKS:
        split_dev_file(name, student_data, labels)
    run = root / "run"
    flags = ("--option", "finetune", "--threads", "1", *short_run(1, 6))
    assert run_driver(tiny_checkpoint, student_data, run, *flags) == 0
    hidden_as_dev = [
        f"--{name}_dev={labels / label_file_names(get_task(name))[0]}" for name in TASKS
    ]
    argv = ["--evaluate", str(run), "--data_dir", str(student_data), *hidden_as_dev]
    argv += ["--out_dir", str(root / "evaluated"), "--eval_batch_size", "8", "--threads", "1"]
    evaluated = train_multitask.evaluate_only(train_multitask.parse_args(argv))
    return {"root": root, "labels": labels, "run": run, "evaluated": evaluated}


def read_board(path: Path) -> dict[str, dict]:
    with path.open(encoding="utf-8", newline="") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def scores(row: dict) -> dict[str, float]:
    return {key: float(row[key]) for key in ("overall", *TASKS)}


def own_files(course) -> dict[str, bytes]:
    """The driver's test prediction files of the run, by file name."""
    return {prediction_file(t): (course["run"] / prediction_file(t)).read_bytes() for t in TASKS}


def write_student(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def broken(data: bytes, line: int, text: str) -> bytes:
    """``data`` with its line ``line`` (1-based) replaced by ``text``."""
    lines = data.decode().split("\n")
    lines[line - 1] = text
    return "\n".join(lines).encode("utf-8", "surrogateescape")  # "\udcff" is the byte 0xff


def reversed_rows(data: bytes) -> bytes:
    head, *rows = data.decode().strip("\n").split("\n")
    return "\n".join([head, *reversed(rows)]).encode() + b"\n"


def value_on(data: bytes, line: int, value: str) -> bytes:
    """``data`` with the prediction of line ``line`` replaced by ``value``."""
    example_id = data.decode().split("\n")[line - 1].split(" , ")[0]
    return broken(data, line, f"{example_id} , {value} ")


# ----------------------------------------------------------------------------------------------
# Three students: the driver's files, bad rows, another task's predictions


@pytest.fixture(scope="module")
def board(course) -> dict:
    root, ada = course["root"] / "class", own_files(course)
    write_student(root / "ada", ada)
    para = prediction_file("para")
    bad_para = value_on(ada[para], 3, "2") + ada[para].split(b"\n")[1] + b"\n"
    write_student(root / "bob", ada | {para: bad_para})
    write_student(root / "cy", ada | {prediction_file("sst"): ada[para]})
    out = course["root"] / "out" / "board.csv"
    out.parent.mkdir()
    assert main([str(root), "--labels", str(course["labels"]), "--out", str(out)]) == 0
    return {"out": out, "rows": read_board(out)}


def test_the_drivers_files_score_what_the_drivers_own_evaluate_says(course, board):
    evaluated, ada = course["evaluated"], scores(board["rows"]["ada"])
    for key in ("overall", *TASKS):
        assert ada[key] == pytest.approx(evaluated[key], abs=1e-9), key
    assert board["rows"]["ada"]["problems"] == ""
    assert 0 < evaluated["sts"] ** 2 < 1  # the run's similarity scores are not constant


def test_a_bad_file_scores_its_task_0_and_the_others_still_count(course, board):
    evaluated, rows = course["evaluated"], board["rows"]
    bob, cy = scores(rows["bob"]), scores(rows["cy"])
    assert bob["para"] == 0 and cy["sst"] == 0
    for key in TASKS:
        assert bob[key] == (0 if key == "para" else pytest.approx(evaluated[key], abs=1e-9))
        assert cy[key] == (0 if key == "sst" else pytest.approx(evaluated[key], abs=1e-9))
    assert bob["overall"] == pytest.approx(overall_score({**evaluated, "para": 0.0}), abs=1e-12)
    assert cy["overall"] == pytest.approx(overall_score({**evaluated, "sst": 0.0}), abs=1e-12)
    assert "class 2 is out of range 0..1" in rows["bob"]["problems"]
    assert "duplicated id" in rows["bob"]["problems"]
    assert "holds para predictions" in rows["cy"]["problems"]


def test_the_board_is_ranked_by_overall_score(course, board):
    text = board["out"].read_text(encoding="utf-8").splitlines()
    assert text[0] == "rank,student,overall,sst,para,sts,problems"
    order = [line.split(",")[1] for line in text[1:]]
    evaluated = course["evaluated"]
    expected = {
        "ada": overall_score(evaluated),
        "bob": overall_score({**evaluated, "para": 0.0}),
        "cy": overall_score({**evaluated, "sst": 0.0}),
    }
    assert order == sorted(expected, key=lambda s: -expected[s])
    assert order[0] == "ada"
    assert [line.split(",")[0] for line in text[1:]] == ["1", "2", "3"]


def test_each_student_gets_gradescope_results_with_a_leaderboard_and_no_labels(board):
    results = board["out"].parent / "board-results"
    assert sorted(p.name for p in results.iterdir()) == ["ada.json", "bob.json", "cy.json"]
    for student, row in board["rows"].items():
        record = json.loads((results / f"{student}.json").read_text(encoding="utf-8"))
        assert set(record) == {"score", "output", "leaderboard", "visibility"}
        expected = [("overall", float(row["overall"]))]
        expected += [(t, float(row[t])) for t in TASKS]
        assert [(e["name"], e["value"]) for e in record["leaderboard"]] == expected
        assert {e["order"] for e in record["leaderboard"]} == {"desc"}
        assert record["score"] == pytest.approx(100 * float(row["overall"]))
        assert row["problems"] in record["output"]


def test_the_page_is_offline_and_shows_every_student(board):
    page = board["out"].with_suffix(".html").read_text(encoding="utf-8")
    assert all(f"<td>{student}</td>" in page for student in board["rows"])
    assert "<script" not in page and "http" not in page and "src=" not in page


# ----------------------------------------------------------------------------------------------
# Every kind of bad file: that student's row, in one line, and nothing else


def case_files(ada: dict[str, bytes], folder: Path) -> dict[str, tuple[str, str]]:
    """Write one student per case into ``folder``; case -> (the task it costs, the words)."""
    sst, para, sts = (prediction_file(t) for t in TASKS)
    cases = {
        "missing": (sts, None, "sts", "sts-test-output.csv: missing; sts scores 0"),
        "wrong-header": (sst, broken(ada[sst], 1, "id\tsentiment"), "sst", "wrong header"),
        "ids-missing": (para, b"\n".join(ada[para].split(b"\n")[:-6]) + b"\n", "para", "5 of"),
        "id-twice": (sst, ada[sst] + ada[sst].split(b"\n")[4] + b"\n", "sst", "duplicated id"),
        "id-unknown": (sts, ada[sts] + b"nosuchid , 2.5 \n", "sts", "unknown id 'nosuchid'"),
        "sst-5": (sst, value_on(ada[sst], 2, "5"), "sst", "class 5 is out of range 0..4"),
        "sst-2.5": (sst, value_on(ada[sst], 2, "2.5"), "sst", "2.5 is not an integer class"),
        "sst-word": (sst, value_on(ada[sst], 2, "two"), "sst", "'two': not a number"),
        "para-2": (para, value_on(ada[para], 2, "2"), "para", "class 2 is out of range 0..1"),
        "sts-5.5": (sts, value_on(ada[sts], 2, "5.5"), "sts", "5.5 is out of range 0..5"),
        "sts-negative": (sts, value_on(ada[sts], 9, "-0.1"), "sts", "-0.1 is out of range"),
        "sts-nan": (sts, value_on(ada[sts], 2, "nan"), "sts", "'nan': not a finite number"),
        "sts-inf": (sts, value_on(ada[sts], 2, "inf"), "sts", "'inf': not a finite number"),
        "para-in-sst": (sst, ada[para], "sst", "holds para predictions"),
        "para-ids-in-sst": (
            sst,
            ada[para].replace(b"Predicted_Is_Paraphrase", b"Predicted_Sentiment"),
            "sst",
            "its ids are para's test ids",
        ),
        "not-utf8": (sst, value_on(ada[sst], 3, "\udcff"), "sst", "not UTF-8 text (byte 0xff"),
        "utf16": (sts, ada[sts].decode().encode("utf-16"), "sts", "not UTF-8 text"),
        "empty": (para, b"", "para", "empty file"),
        "no-comma": (sst, broken(ada[sst], 3, "abc 3"), "sst", "malformed line 3"),
        "huge": (sst, "sparse", "sst", "1,073,741,824 bytes, more than"),
        "symlink": (sst, "symlink", "sst", "a symbolic link, not read"),
        "folder": (sts, "folder", "sts", "a folder, not a file"),
        "fifo": (para, "fifo", "para", "not a regular file"),
    }
    for student, (name, data, task, words) in cases.items():
        target = write_student(folder / student, ada) / name
        target.unlink()
        if data == "sparse":
            target.touch()
            os.truncate(target, 1 << 30)
        elif data == "symlink":
            target.symlink_to(folder / "ada" / name)  # a good file, still not followed
        elif data == "folder":
            target.mkdir()
        elif data == "fifo":
            os.mkfifo(target)
        elif data is not None:
            target.write_bytes(data)
        cases[student] = (task, words)
    return cases


@pytest.fixture(scope="module")
def cases(course) -> dict:
    folder, ada = course["root"] / "cases", own_files(course)
    write_student(folder / "ada", ada)
    expected = case_files(ada, folder)
    # Accepted as well: CRLF line ends, a spreadsheet's UTF-8 save (a byte-order mark and CRLF),
    # and the rows in another order.
    crlf = {name: data.replace(b"\n", b"\r\n") for name, data in ada.items()}
    write_student(folder / "crlf", crlf)
    write_student(
        folder / "spreadsheet", {name: b"\xef\xbb\xbf" + data for name, data in crlf.items()}
    )
    write_student(folder / "shuffled", {name: reversed_rows(data) for name, data in ada.items()})
    (folder / "a-plain-file").write_text("not a folder")
    (folder / "a-link").symlink_to(folder / "ada")
    expected |= {"a-plain-file": (None, "not a student folder (a file)")}
    expected |= {"a-link": (None, "not a student folder (a symbolic link)")}
    out = course["root"] / "cases-out" / "board.csv"
    out.parent.mkdir()
    assert main([str(folder), "--labels", str(course["labels"]), "--out", str(out)]) == 0
    return {"expected": expected, "out": out, "rows": read_board(out)}


# The students of ``case_files`` and two entries that are no folder, each with its bad file.
CASES = """missing wrong-header ids-missing id-twice id-unknown sst-5 sst-2.5 sst-word para-2
sts-5.5 sts-negative sts-nan sts-inf para-in-sst para-ids-in-sst not-utf8 utf16 empty no-comma
huge symlink folder fifo a-plain-file a-link""".split()


@pytest.mark.parametrize("student", CASES)
def test_a_bad_file_is_that_students_row_in_one_line(student, cases):
    rows = cases["rows"]
    task, words = cases["expected"][student]
    row, good = scores(rows[student]), scores(rows["ada"])
    assert words in rows[student]["problems"], rows[student]["problems"]
    assert "\n" not in rows[student]["problems"] and "\r" not in rows[student]["problems"]
    for key in TASKS:
        costs = task is None or key == task
        assert row[key] == (FLOORS[key] if costs else good[key]), key
    assert row["overall"] == overall_score({t: row[t] for t in TASKS})


def test_the_bad_files_cost_no_one_else_and_good_variants_read_alike(course, cases):
    rows = cases["rows"]
    assert set(rows) == {"ada", "crlf", "spreadsheet", "shuffled", *CASES}
    text = cases["out"].read_text(encoding="utf-8")
    assert len(text.splitlines()) == 1 + len(rows)  # one line a student
    for student in ("ada", "crlf", "spreadsheet", "shuffled"):
        assert rows[student]["problems"] == ""
        for key in ("overall", *TASKS):
            assert float(rows[student][key]) == pytest.approx(course["evaluated"][key], abs=1e-9)


# ----------------------------------------------------------------------------------------------
# The label folder, the outputs and the flags


def labels_copy(course, tmp_path: Path) -> Path:
    return Path(shutil.copytree(course["labels"], tmp_path / "labels"))


def no_sts(labels: Path) -> None:
    (labels / "sts-test.csv").unlink()


def no_label_column(labels: Path) -> None:
    path = labels / "ids-sst-test.csv"
    path.write_text("".join(line.rsplit("\t", 1)[0] + "\n" for line in path.open()))


def bad_label(labels: Path) -> None:
    path = labels / "quora-test.csv"
    path.write_text(path.read_text().replace("\t1.0\n", "\t7.0\n", 1))


def both_names(labels: Path) -> None:
    shutil.copy(labels / "sts-test.csv", labels / "sts-test-student.csv")


def one_row(labels: Path) -> None:
    path = labels / "sts-test.csv"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))


@pytest.mark.parametrize(
    ("spoil", "words"),
    [
        (no_sts, "no sts label file (sts-test.csv or sts-test-student.csv"),
        (no_label_column, "no label column 'sentiment'"),
        (bad_label, "class 7 is out of range 0..1"),
        (both_names, "both sts-test.csv and sts-test-student.csv"),
        (one_row, "one row; a test set needs at least two"),
    ],
)
def test_an_unusable_label_folder_is_refused_before_anyone_is_scored(
    spoil, words, course, board, tmp_path, capsys
):
    labels = labels_copy(course, tmp_path)
    spoil(labels)
    out = tmp_path / "board.csv"
    argv = [str(course["root"] / "class"), "--labels", str(labels), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --labels ") and len(err.strip().splitlines()) == 1, err
    assert words in err
    assert list(tmp_path.iterdir()) == [labels]


def test_an_earlier_board_is_replaced_only_with_overwrite(course, board, tmp_path, capsys):
    out = tmp_path / "board.csv"
    out.write_text("earlier")
    argv = [str(course["root"] / "class"), "--labels", str(course["labels"]), "--out", str(out)]
    assert main(argv) == 2
    assert "pass --overwrite" in capsys.readouterr().err and out.read_text() == "earlier"
    assert main([*argv, "--overwrite"]) == 0
    assert read_board(out) == board["rows"]


def test_overwrite_removes_the_results_of_a_student_no_longer_in_the_class(course, tmp_path):
    """Two boards in one folder keep their own results; --overwrite drops a departed student's."""
    ada = own_files(course)
    folder = tmp_path / "class"
    write_student(folder / "ada", ada)
    write_student(folder / "bob", ada)
    labels = ["--labels", str(course["labels"])]
    for stem in ("morning", "evening"):
        assert main([str(folder), *labels, "--out", str(tmp_path / f"{stem}.csv")]) == 0
    shutil.rmtree(folder / "bob")
    assert main([str(folder), *labels, "--out", str(tmp_path / "morning.csv"), "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "morning-results").iterdir()) == ["ada.json"]
    assert sorted(p.name for p in (tmp_path / "evening-results").iterdir()) == [
        "ada.json",
        "bob.json",
    ]
    assert (tmp_path / "morning.html").is_file() and (tmp_path / "evening.html").is_file()


def test_a_zip_in_place_of_a_folder_is_named(course, tmp_path):
    """A student's zip, given as their entry or inside their folder: the row names the zip."""
    folder = tmp_path / "class"
    folder.mkdir()
    with zipfile.ZipFile(folder / "carol.zip", "w") as archive:
        for name, data in own_files(course).items():
            archive.writestr(name, data)
    write_student(folder / "dan", {"dan.zip": (folder / "carol.zip").read_bytes()})
    out = tmp_path / "board.csv"
    assert main([str(folder), "--labels", str(course["labels"]), "--out", str(out)]) == 0
    rows = read_board(out)
    assert "carol.zip: a zip; unpack it" in rows["carol.zip"]["problems"], rows
    assert "found dan.zip in the folder: unpack it" in rows["dan"]["problems"], rows


def test_student_text_is_escaped_in_the_page_and_inert_in_the_csv(course, tmp_path):
    folder = tmp_path / "class"
    ada = own_files(course)
    sst = prediction_file("sst")
    name = "<img src=x onerror=alert(1)>\u202e\x1b[2J"
    write_student(folder / name, ada | {sst: value_on(ada[sst], 2, "<b>3</b>")})
    write_student(folder / "=HYPERLINK(1)", ada)
    out = tmp_path / "out" / "board.csv"
    out.parent.mkdir()
    assert main([str(folder), "--labels", str(course["labels"]), "--out", str(out)]) == 0
    page = out.with_suffix(".html").read_text(encoding="utf-8")
    assert "<img" not in page and "<b>" not in page and "\x1b" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;\\u202e\\x1b[2J" in page
    assert "&lt;b&gt;3&lt;/b&gt;" in page
    rows = read_board(out)
    assert "'=HYPERLINK(1)" in rows
    assert (out.parent / "board-results" / "=HYPERLINK(1).json").is_file()


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    shown = capsys.readouterr().out
    for option in ("SUBMISSIONS_DIR", "--labels", "--out", "--points", "--overwrite"):
        assert option in shown
    assert "<stem>-results/" in shown and ".html" in shown


def test_one_upload_is_scored_for_gradescope(course, tmp_path):
    from course.grading.leaderboard import score_upload

    upload = write_student(tmp_path / "submission", own_files(course))
    results = tmp_path / "results.json"
    standing = score_upload(upload, course["labels"], results, points=10.0)
    record = json.loads(results.read_text(encoding="utf-8"))
    assert math.isclose(record["score"], 10 * course["evaluated"]["overall"], abs_tol=1e-8)
    assert record["leaderboard"][0] == {
        "name": "overall",
        "value": standing.overall,
        "order": "desc",
    }


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--points", "0"], "--points 0: give a finite number > 0"),
        (["--points", "nan"], "--points nan: give a finite number > 0"),
        (["--out", "{tmp}/board.html"], "give the CSV file"),
        (["--out", "{class}/board.csv"], "--out is inside SUBMISSIONS_DIR"),
        (["--out", "{tmp}/none/board.csv"], "does not exist"),
    ],
)
def test_a_bad_flag_is_one_line_before_anything_is_written(
    flags, words, course, board, tmp_path, capsys
):
    where = {"tmp": tmp_path, "class": course["root"] / "class"}
    flags = [flag.format(**where) for flag in flags]
    argv = [str(course["root"] / "class"), "--labels", str(course["labels"])]
    argv += ["--out", str(tmp_path / "board.csv"), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
    assert sorted(p.name for p in where["class"].iterdir()) == ["ada", "bob", "cy"]


def test_the_gradescope_leaderboard_zip_scores_an_upload_as_the_board_does(course, tmp_path):
    """``python -m course.grading.autograder --leaderboard --labels LABELS_DIR OUT.zip`` unpacked as
    Gradescope lays out /autograder: an upload's files scored as the driver's --evaluate says,
    with the leaderboard key; the labels are in the zip (the instructor's), not in results."""
    from course.grading import autograder

    zip_path = tmp_path / "board.zip"
    argv = ["--leaderboard", "--labels", str(course["labels"]), str(zip_path)]
    assert autograder.main(argv) == 0
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as archive:
        names = archive.namelist()
        archive.extractall(root / "source")
    assert sorted(n for n in names if n.startswith("labels/")) == sorted(
        f"labels/{p.name}" for p in course["labels"].iterdir()
    )
    write_student(root / "submission", own_files(course))
    env = os.environ | {"AUTOGRADER_ROOT": str(root)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    run = root / "source" / "run_autograder"
    done = subprocess.run(["bash", str(run)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    record = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    assert math.isclose(record["score"], 100 * course["evaluated"]["overall"], abs_tol=1e-8)
    assert [e["name"] for e in record["leaderboard"]] == ["overall", *TASKS]
    hidden = (course["labels"] / label_file_names(get_task("sst"))[0]).read_text()
    assert hidden.splitlines()[1] not in json.dumps(record)


def test_a_leaderboard_zip_with_bad_labels_is_refused_in_one_line(course, tmp_path, capsys):
    from course.grading import autograder

    labels = labels_copy(course, tmp_path)
    no_sts(labels)
    argv = ["--leaderboard", "--labels", str(labels), str(tmp_path / "board.zip")]
    assert autograder.main(argv) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("error: --labels ") and "no sts label" in said[0]
    assert not (tmp_path / "board.zip").exists()
