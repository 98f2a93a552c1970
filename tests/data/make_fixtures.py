"""Write the test fixtures in tests/data/: ``python tests/data/make_fixtures.py`` from anywhere.

The fixtures are committed; this script is how they were made, so that they can be reviewed and
re-made. All text is synthetic: the course data is never copied into the repository.

    ids-sst-test-student.csv   a clean test file with the course's odd header (two index columns)
    sts-dev.csv                a clean labelled pair file
    broken/                    one file per way a data file can be broken (see README.md)
"""

from __future__ import annotations

import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

SST_HEADER = "\tid\tsentence\tsentiment"
TEST_HEADER = "0\t\tid\tsentence"  # the odd header of ids-sst-test-student.csv, extra column
QUORA_HEADER = "\tid\tsentence1\tsentence2\tis_duplicate"
STS_HEADER = "\tid\tsentence1\tsentence2\tsimilarity"

ADJECTIVES = ["awful", "dull", "fine", "good", "wonderful"]
NOUNS = ["movie", "film", "story", "plot", "cast", "ending", "script", "score"]
SUBJECTS = ["a dog", "the man", "two children", "a woman", "the band", "a cat", "an old car"]
VERBS = ["runs in the park", "plays the guitar", "eats an apple", "reads a book", "sleeps"]


def _id(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(25))


def _write(path: Path, lines: list[str], newline: str = "\n", encoding_prefix: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encoding_prefix + "".join(line + newline for line in lines).encode("utf-8"))


def sst_test_rows(rng: random.Random, n: int) -> list[str]:
    """Rows of a test file with the odd two-index-column layout, no label."""
    rows = []
    for i in range(n):
        words = " ".join(rng.choice(NOUNS) for _ in range(rng.randint(0, 6)))
        sentence = f"The {rng.choice(NOUNS)} was {rng.choice(ADJECTIVES)} {words} ."
        rows.append(f"{i + 1}\t{float(i)}\t{_id(rng)}\t{sentence}")
    return rows


def sts_rows(rng: random.Random, n: int) -> list[str]:
    """Labelled STS rows: same verb -> high similarity, different verb -> low."""
    rows = []
    for i in range(n):
        subject, verb = rng.choice(SUBJECTS).capitalize(), rng.choice(VERBS)
        same = i % 2 == 0
        other = verb if same else rng.choice([v for v in VERBS if v != verb])
        score = round(rng.uniform(3.5, 5.0) if same else rng.uniform(0.0, 2.5), 1)
        rows.append(f"{i}\t{_id(rng)}\t{subject} {verb}.\t{subject} {other}.\t{score}")
    return rows


def make_clean(rng: random.Random) -> None:
    _write(HERE / "ids-sst-test-student.csv", [TEST_HEADER] + sst_test_rows(rng, 12))
    _write(HERE / "sts-dev.csv", [STS_HEADER] + sts_rows(rng, 20))


def make_broken() -> None:
    broken = HERE / "broken"
    good = [
        "0\taaa0\tA good first sentence .\t3",
        "1\taaa1\tAnother good sentence .\t1",
    ]
    tail = [
        "5\taaa5\tA good sentence after the broken row .\t4",
        "6\taaa6\tAnd one more good sentence .\t0",
    ]

    def sst_file(name: str, *bad: str) -> None:
        _write(broken / name, [SST_HEADER, *good, *bad, *tail])

    # A field that opens a quote and never closes it: csv with quotechar '"' reads on over tabs
    # and line ends until the next quote, merging the following rows into this one.
    sst_file(
        "unbalanced_quote.csv",
        '2\taaa2\t"An opening quote that never closes .\t2',
        "3\taaa3\tThis row would be swallowed by a csv reader .\t3",
        '4\taaa4\tSo would this one , up to the next " quote .\t1',
    )
    sst_file("missing_column.csv", "2\taaa2\tA row without its label column .")
    sst_file("extra_column.csv", "2\taaa2\tA row with\ta tab inside its sentence .\t2")
    sst_file("empty_sentence.csv", "2\taaa2\t   \t2")
    sst_file("empty_id.csv", "2\t\tA row without an id .\t2")
    sst_file("non_numeric_label.csv", "2\taaa2\tA row labelled with a word .\tpositive")
    sst_file(
        "label_out_of_range.csv",
        "2\taaa2\tA row with class seven .\t7",
        "3\taaa3\tA row with class minus one .\t-1",
    )
    sst_file("label_not_integer.csv", "2\taaa2\tA row with a fractional class .\t2.5")
    sst_file(
        "duplicate_ids.csv",
        "2\taaa0\tA second row with the first row's id .\t2",
    )
    sst_file("blank_line.csv", "")
    # Invalid UTF-8 is written as bytes below, after a valid placeholder.
    sst_file("invalid_utf8.csv", "2\taaa2\tA row with a broken byte @@ here .\t2")
    path = broken / "invalid_utf8.csv"
    path.write_bytes(path.read_bytes().replace(b"@@", b"caf\xe9"))  # latin-1 é, not UTF-8

    long_sentence = " ".join(f"word{i % 97}" for i in range(2000))  # far beyond 512 tokens
    sst_file("long_sentence.csv", f"2\taaa2\t{long_sentence} .\t2")

    # Pair files (Quora format), like the two broken rows of the real quora-train.csv.
    pair_good = [
        "10\tbbb0\tHow do I learn Python?\tWhat is the best way to learn Python?\t1.0",
        "11\tbbb1\tWhat is love?\tHow tall is Mount Everest?\t0.0",
    ]
    _write(
        broken / "missing_label.csv",
        [QUORA_HEADER, *pair_good, "12\tbbb2\tIs this a question?\tIs this one too?\t"],
    )
    _write(
        broken / "empty_sentence2.csv",
        [QUORA_HEADER, *pair_good, "12\tbbb2\tA question with no partner?\t\t"],
    )
    sts_good = ["1\tccc0\tA dog runs.\tA dog is running.\t4.8", "2\tccc1\tA cat.\tA car.\t0.4"]
    _write(
        broken / "similarity_out_of_range.csv",
        [STS_HEADER, *sts_good, "3\tccc2\tToo similar.\tToo similar.\t5.5", "4\tccc3\tA.\tB.\tnan"],
    )

    # Encodings and line ends: these read without any skipped row.
    _write(
        broken / "bom.csv",
        ["id\tsentence\tsentiment", "aaa0\tThe first column is id , not an index .\t3"],
        encoding_prefix="\ufeff".encode(),
    )
    _write(broken / "crlf.csv", [SST_HEADER, *good, *tail], newline="\r\n")
    _write(
        broken / "crlf_test.csv",
        [TEST_HEADER, "1\t0.0\tddd0\tThe sentence is the last column", "2\t1.0\tddd1\tSo is this"],
        newline="\r\n",
    )

    # Whole-file problems: these raise DataError.
    _write(broken / "empty.csv", [])
    _write(broken / "header_only.csv", [SST_HEADER])
    _write(broken / "wrong_header.csv", ["\tid\ttext\tsentiment", "0\taaa0\tA sentence .\t3"])


def main() -> None:
    make_clean(random.Random(0))
    make_broken()


if __name__ == "__main__":
    main()
