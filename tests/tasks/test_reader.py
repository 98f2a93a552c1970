"""The data reader on the broken-file corpus in tests/data/broken/ and on the real course files."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tasks import TASKS, DataError, SkippedRow, format_skip_report, get_task, read_examples

DATA = Path(__file__).resolve().parents[1] / "data"
BROKEN = DATA / "broken"
REAL = Path(__file__).resolve().parents[2].parent / "shared" / "data"

SST = get_task("sst")
PARA = get_task("para")
STS = get_task("sts")


def read(name: str, task=SST, **kwargs):
    return task.read(BROKEN / name, **kwargs)


def physical_lines(path: Path) -> int:
    return len(path.read_bytes().split(b"\n")) - 1  # every line of the fixtures ends in \n


def assert_all_lines_accounted(path: Path, examples, skipped) -> None:
    """Every line after the header is either an example or a SkippedRow, never both."""
    example_lines = [e.line for e in examples]
    skipped_lines = [s.line for s in skipped]
    assert not set(example_lines) & set(skipped_lines)
    assert sorted(example_lines + skipped_lines) == list(range(2, physical_lines(path) + 1))


def only_skip(skipped: list[SkippedRow], path: Path, line: int) -> str:
    """The reason of the one skipped row, after checking it names the file and line."""
    assert len(skipped) == 1, skipped
    assert skipped[0].path == str(path)
    assert skipped[0].line == line
    return skipped[0].reason


# -- rows that are skipped ---------------------------------------------------------------------


def test_unbalanced_quote_costs_only_its_own_row():
    path = BROKEN / "unbalanced_quote.csv"
    examples, skipped = read("unbalanced_quote.csv")
    reason = only_skip(skipped, path, 4)
    assert "unbalanced quote in column 'sentence'" in reason
    # The rows after it are read, including one with a literal quote inside an unquoted field.
    assert [e.id for e in examples] == ["aaa0", "aaa1", "aaa3", "aaa4", "aaa5", "aaa6"]
    assert examples[3].texts == ('So would this one , up to the next " quote .',)
    assert_all_lines_accounted(path, examples, skipped)


def test_csv_with_quotechar_would_merge_the_rows_after_an_unbalanced_quote():
    """Why the reader splits on tabs: the course's csv.DictReader swallows rows here."""
    with open(BROKEN / "unbalanced_quote.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) < physical_lines(BROKEN / "unbalanced_quote.csv") - 1
    assert "aaa3" not in [row["id"] for row in rows]


def test_missing_column():
    path = BROKEN / "missing_column.csv"
    examples, skipped = read("missing_column.csv")
    assert only_skip(skipped, path, 4) == (
        "expected 4 tab-separated columns as in the header, found 3"
    )
    assert len(examples) == 4
    assert_all_lines_accounted(path, examples, skipped)


def test_extra_column():
    path = BROKEN / "extra_column.csv"
    examples, skipped = read("extra_column.csv")
    assert "found 5" in only_skip(skipped, path, 4)
    assert_all_lines_accounted(path, examples, skipped)


def test_empty_sentence():
    path = BROKEN / "empty_sentence.csv"
    examples, skipped = read("empty_sentence.csv")
    assert only_skip(skipped, path, 4) == "empty sentence"
    assert_all_lines_accounted(path, examples, skipped)


def test_empty_second_sentence_reports_every_problem_of_the_row():
    path = BROKEN / "empty_sentence2.csv"
    examples, skipped = read("empty_sentence2.csv", task=PARA)
    reason = only_skip(skipped, path, 4)
    assert reason == "empty sentence2; missing label (column 'is_duplicate' is empty)"
    assert_all_lines_accounted(path, examples, skipped)


def test_empty_id():
    path = BROKEN / "empty_id.csv"
    examples, skipped = read("empty_id.csv")
    assert only_skip(skipped, path, 4) == "empty id"
    assert_all_lines_accounted(path, examples, skipped)


def test_missing_label():
    path = BROKEN / "missing_label.csv"
    examples, skipped = read("missing_label.csv", task=PARA)
    assert only_skip(skipped, path, 4) == "missing label (column 'is_duplicate' is empty)"
    assert [e.label for e in examples] == [1, 0]
    assert_all_lines_accounted(path, examples, skipped)


def test_non_numeric_label():
    path = BROKEN / "non_numeric_label.csv"
    examples, skipped = read("non_numeric_label.csv")
    assert only_skip(skipped, path, 4) == (
        "bad label 'positive' in column 'sentiment': not a number"
    )
    assert_all_lines_accounted(path, examples, skipped)


def test_label_out_of_range():
    path = BROKEN / "label_out_of_range.csv"
    examples, skipped = read("label_out_of_range.csv")
    assert [(s.line, s.reason) for s in skipped] == [
        (4, "bad label '7' in column 'sentiment': class 7 is out of range 0..4"),
        (5, "bad label '-1' in column 'sentiment': class -1 is out of range 0..4"),
    ]
    assert_all_lines_accounted(path, examples, skipped)


def test_label_not_an_integer_class():
    path = BROKEN / "label_not_integer.csv"
    examples, skipped = read("label_not_integer.csv")
    assert only_skip(skipped, path, 4).endswith("2.5 is not an integer class")
    assert_all_lines_accounted(path, examples, skipped)


def test_similarity_out_of_range_and_nan():
    path = BROKEN / "similarity_out_of_range.csv"
    examples, skipped = read("similarity_out_of_range.csv", task=STS)
    assert [(s.line, s.reason) for s in skipped] == [
        (4, "bad label '5.5' in column 'similarity': 5.5 is out of range 0..5"),
        (5, "bad label 'nan' in column 'similarity': not a finite number"),
    ]
    assert [e.label for e in examples] == [4.8, 0.4]
    assert_all_lines_accounted(path, examples, skipped)


def test_duplicate_ids_keep_the_first():
    path = BROKEN / "duplicate_ids.csv"
    examples, skipped = read("duplicate_ids.csv")
    assert only_skip(skipped, path, 4) == "duplicate id 'aaa0' (first seen on line 2)"
    assert [e.line for e in examples if e.id == "aaa0"] == [2]
    assert_all_lines_accounted(path, examples, skipped)


def test_blank_line_is_reported():
    path = BROKEN / "blank_line.csv"
    examples, skipped = read("blank_line.csv")
    assert only_skip(skipped, path, 4) == "blank line"
    assert_all_lines_accounted(path, examples, skipped)


def test_invalid_utf8_costs_only_its_line():
    path = BROKEN / "invalid_utf8.csv"
    examples, skipped = read("invalid_utf8.csv")
    reason = only_skip(skipped, path, 4)
    assert reason.startswith("invalid UTF-8: byte 0xe9 at byte offset")
    assert len(examples) == 4
    assert_all_lines_accounted(path, examples, skipped)


# -- files that read fine ----------------------------------------------------------------------


def test_byte_order_mark_is_not_part_of_the_first_column_name():
    examples, skipped = read("bom.csv")
    assert skipped == []
    assert [(e.id, e.label) for e in examples] == [("aaa0", 3)]


def test_crlf_line_ends_read_like_lf():
    crlf, crlf_skipped = read("crlf.csv")
    assert crlf_skipped == []
    assert [(e.id, e.texts, e.label, e.line) for e in crlf] == [
        ("aaa0", ("A good first sentence .",), 3, 2),
        ("aaa1", ("Another good sentence .",), 1, 3),
        ("aaa5", ("A good sentence after the broken row .",), 4, 4),
        ("aaa6", ("And one more good sentence .",), 0, 5),
    ]


def test_crlf_test_file_has_no_carriage_return_in_the_last_column():
    examples, skipped = read("crlf_test.csv")
    assert skipped == []
    assert [e.texts for e in examples] == [("The sentence is the last column",), ("So is this",)]
    assert all(e.label is None for e in examples)


def test_sentence_far_longer_than_512_tokens_reads():
    examples, skipped = read("long_sentence.csv")
    assert skipped == []
    assert max(len(e.texts[0].split()) for e in examples) > 2000


def test_quoted_fields_are_unquoted_like_csv(tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text(
        "\tid\tsentence1\tsentence2\tis_duplicate\n"
        '0\tx1\t"What does ""hi"" mean?"\tA 5" screen\t1.0\n',
        encoding="utf-8",
    )
    examples, skipped = PARA.read(path)
    assert skipped == []
    assert examples[0].texts == ('What does "hi" mean?', 'A 5" screen')


# -- whole-file problems -----------------------------------------------------------------------


def test_empty_file():
    with pytest.raises(DataError, match=r"empty\.csv: empty file"):
        read("empty.csv")


def test_header_only_file():
    with pytest.raises(DataError, match=r"header_only\.csv: no rows"):
        read("header_only.csv")


def test_missing_file_names_the_path():
    with pytest.raises(DataError, match=r"no_such_file\.csv: file not found"):
        read("no_such_file.csv")


def test_header_without_a_needed_column():
    with pytest.raises(DataError, match=r"wrong_header\.csv:1: no column 'sentence'"):
        read("wrong_header.csv")


def test_test_file_without_label_column():
    examples, skipped = SST.read(DATA / "ids-sst-test-student.csv")
    assert skipped == [] and len(examples) == 12
    assert all(e.label is None for e in examples)
    with pytest.raises(DataError, match=r":1: no label column 'sentiment'"):
        SST.read(DATA / "ids-sst-test-student.csv", require_label=True)


# -- strict mode and the report ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, line, reason",
    [
        ("unbalanced_quote.csv", 4, "unbalanced quote"),
        ("missing_column.csv", 4, "found 3"),
        ("duplicate_ids.csv", 4, "duplicate id"),
        ("invalid_utf8.csv", 4, "invalid UTF-8"),
        ("label_out_of_range.csv", 4, "out of range"),
    ],
)
def test_strict_mode_raises_with_file_and_line(name, line, reason):
    with pytest.raises(DataError) as error:
        read(name, strict=True)
    message = str(error.value)
    assert message.startswith(f"{BROKEN / name}:{line}: ")
    assert reason in message


def test_strict_mode_accepts_a_clean_file():
    examples, skipped = read("crlf.csv", strict=True)
    assert len(examples) == 4 and skipped == []


def test_format_skip_report_lists_every_row_and_counts():
    _, skipped_a = read("label_out_of_range.csv")
    _, skipped_b = read("empty_id.csv")
    report = format_skip_report(skipped_a + skipped_b)
    lines = report.splitlines()
    assert lines[0] == f"{BROKEN / 'label_out_of_range.csv'}:4: " + skipped_a[0].reason
    assert lines[2] == f"{BROKEN / 'empty_id.csv'}:4: empty id"
    assert lines[-1] == "3 rows skipped in 2 files"
    assert format_skip_report([]) == "0 rows skipped"
    assert format_skip_report(skipped_b).splitlines()[-1] == "1 row skipped"


def test_read_examples_without_a_task():
    examples, skipped = read_examples(
        DATA / "sts-dev.csv", ["sentence1", "sentence2"], None, float, require_label=True
    )
    assert skipped == [] and len(examples) == 20
    assert all(len(e.texts) == 2 and e.label is None for e in examples)


# -- clean files and the real course files ---------------------------------------------------------


def test_clean_pair_file_reads_in_strict_mode():
    examples, skipped = STS.read(DATA / "sts-dev.csv", strict=True, require_label=True)
    assert skipped == [] and len(examples) == 20
    assert all(len(e.texts) == 2 and 0.0 <= e.label <= 5.0 for e in examples)
    assert [e.line for e in examples] == list(range(2, 22))


# Rows each real file is known to lose; anything else is a regression or a changed file.
REAL_SKIPS = {
    "quora-train.csv": {
        2082: "missing label (column 'is_duplicate' is empty)",
        11259: "empty sentence2; missing label (column 'is_duplicate' is empty)",
    },
}


@pytest.mark.skipif(not REAL.is_dir(), reason=f"no course data in {REAL}")
@pytest.mark.parametrize("task_name", sorted(TASKS))
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_real_files(task_name, split):
    task = get_task(task_name)
    path = task.path(split, REAL)
    if not path.exists():
        pytest.skip(f"{path} is not there")
    examples, skipped = task.read(path, require_label=split != "test")
    assert {s.line: s.reason for s in skipped} == REAL_SKIPS.get(path.name, {})
    lines = path.read_bytes().count(b"\n")
    assert len(examples) + len(skipped) == lines - 1
    assert len(examples) > 200
    assert all((e.label is None) == (split == "test") for e in examples)


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        ("0_5", "not a number"),  # float() reads 5
        ("\u0663", "not a number"),  # an Arabic-Indic three: float() reads 3
        ("1e-400", "not an integer class"),  # float() reads 0.0
        ("2e0", "not an integer class"),
    ],
)
def test_labels_python_accepts_but_a_person_would_not(tmp_path, label, reason):
    path = tmp_path / "f.csv"
    path.write_text(f"\tid\tsentence\tsentiment\n0\ta\tgood .\t{label}\n1\tb\tfine .\t2\n")
    examples, skipped = get_task("sst").read(path)
    assert [e.id for e in examples] == ["b"]
    assert len(skipped) == 1 and skipped[0].line == 2 and reason in skipped[0].reason


def test_invisible_sentences_and_ids_with_the_prediction_separator(tmp_path):
    path = tmp_path / "f.csv"
    rows = ["\u200b\u200b", "\u00ad\u2060", "\x07\x1b", "a visible one ."]
    lines = ["\tid\tsentence\tsentiment"] + [f"{i}\tid{i}\t{t}\t1" for i, t in enumerate(rows)]
    lines.append("9\tx , y\tok .\t1")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    examples, skipped = get_task("sst").read(path)
    assert [e.id for e in examples] == ["id3"]
    assert [s.line for s in skipped] == [2, 3, 4, 6]
    assert all("only invisible characters" in s.reason for s in skipped[:3])
    assert "' , '" in skipped[3].reason


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("\tid\tsentence\n0\ta\tgood .\n".encode("utf-16"), "UTF-16"),
        (b"\x00" * 64, "NUL bytes"),
        (b"\tid\tsentence\n0\ta\tgo\x00od .\n", ":2: NUL byte"),
        (b"\tid\tsentence\r0\ta\tgood .\r1\tb\tbad .\r", "CR alone"),
    ],
)
def test_files_that_are_not_utf8_text_get_their_own_words(tmp_path, content, words):
    path = tmp_path / "f.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=words):
        get_task("sst").read(path)
