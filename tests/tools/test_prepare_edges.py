"""torchloom prepare on names and label files as real sources make them: names a spreadsheet would
run as formulas, an output folder whose name is not UTF-8, a JSON map that gives a path twice."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import write_jpeg
from torchloom import ManifestDataset
from torchloom.testing import write_class_folders
from torchloom.tools.cli import main

#: Names as people (and attackers) give them: each would run as a formula in a spreadsheet.
FORMULA_NAMES = ("=1+1.jpg", "-x.jpg", "+y.jpg", "@SUM(A1).jpg")


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_csv_cells_a_spreadsheet_would_run_are_escaped(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    for seed, name in enumerate(FORMULA_NAMES):
        write_jpeg(raw / name, seed=seed)
    write_jpeg(raw / "plain.jpg", seed=9)
    labels = tmp_path / "labels.json"
    entries = {name: '=HYPERLINK("http://evil")' for name in FORMULA_NAMES}
    labels.write_text(json.dumps({**entries, "plain.jpg": "-1", "@gone.jpg": "ok"}))
    out = tmp_path / "out"
    assert main(["prepare", str(raw), "--labels", str(labels), "--out", str(out), "--fractions", "1,0"]) == 1
    rows = _csv_rows(out / "manifest.csv")
    escaped = [f"./{name}" for name in FORMULA_NAMES]
    assert sorted(row["image"] for row in rows) == sorted([*escaped, "plain.jpg"])
    assert {row["label"] for row in rows} == {'\'=HYPERLINK("http://evil")', "-1"}  # -1 is a number
    assert [(row["kind"], row["name"]) for row in _csv_rows(out / "problems.csv")] == [
        ("unknown label entry", "./@gone.jpg")
    ]
    # The Parquet manifest holds the names as they are; the CSV's paths name the same files.
    assert sorted(pq.read_table(out / "manifest.parquet").column("image").to_pylist()) == sorted(
        [*FORMULA_NAMES, "plain.jpg"]
    )
    assert len(ManifestDataset(out / "manifest.csv", root=raw, progress=False)) == len(FORMULA_NAMES) + 1
    # A re-run reading the CSV as its previous manifest finds every file in it.
    again = ["prepare", str(raw), "--labels", str(labels), "--out", str(tmp_path / "again"), "--json"]
    assert main([*again, "--previous", str(out / "manifest.csv"), "--fractions", "0.5,0.5"]) == 1


def test_an_out_folder_whose_name_is_not_utf8(tmp_path: Path) -> None:
    raw = os.path.join(os.fsencode(tmp_path), b"photos \xe9t\xe9")
    for name in (b"cat/1.jpg", b"cat/2.jpg", b"dog/1.jpg"):
        write_jpeg(os.fsdecode(os.path.join(raw, name)), seed=len(name) + name[0])
    out = os.path.join(os.fsencode(tmp_path), b"split \xe9t\xe9")
    command = [sys.executable.encode(), b"-m", b"torchloom", b"prepare", raw, b"--rule", b"cat:cat/"]
    done = subprocess.run([*command, b"--rule", b"dog:dog/", b"--out", out], capture_output=True, timeout=120)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    # Named as the terminal shows any undecodable name; the line of Python to paste holds its repr.
    assert b"wrote " + out.decode("utf-8", "backslashreplace").encode() + b"/manifest.parquet" in done.stdout
    assert b"root=" + repr(os.fsdecode(raw)).encode() in done.stdout
    with open(os.path.join(out, b"manifest.parquet"), "rb") as handle:  # pyarrow takes no such name
        table = pq.read_table(handle)
    assert sorted(table.column("source").to_pylist()) == ["cat/1.jpg", "cat/2.jpg", "dog/1.jpg"]
    assert sorted(os.listdir(out)) == [b"manifest.csv", b"manifest.parquet"]


def test_a_path_given_twice_in_a_json_map_is_ambiguous(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_jpeg(raw / "a.jpg", seed=1)
    write_jpeg(raw / "b.jpg", seed=2)
    labels = tmp_path / "labels.json"
    labels.write_text('{"a.jpg": "cat", "b.jpg": "dog", "a.jpg": "dog", "b.jpg": "dog"}')
    out = tmp_path / "out"
    assert main(["prepare", str(raw), "--labels", str(labels), "--out", str(out), "--fractions", "1,0"]) == 1
    assert [(row["kind"], row["name"], row["reason"]) for row in _csv_rows(out / "problems.csv")] == [
        ("ambiguous", "a.jpg", "the label file gives it 'cat', 'dog'")
    ]
    # b.jpg, given the same label twice, is labelled.
    assert pq.read_table(out / "manifest.parquet").column("source").to_pylist() == ["b.jpg"]


def test_grouping_duplicates_on_a_rerun_moves_only_the_copies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    write_class_folders(raw, (30, 10), size=(24, 24), class_names=("cat", "dog"), progress=False)
    for copy in range(8):
        shutil.copy(raw / "cat" / "000000.jpg", raw / "cat" / f"copy_{copy}.jpg")
    out = tmp_path / "out"
    rules = ["--rule", "cat:cat/", "--rule", "dog:dog/"]
    assert main(["prepare", str(raw), *rules, "--out", str(out)]) == 0
    before = {row["source"]: row["split"] for row in pq.read_table(out / "manifest.parquet").to_pylist()}
    copies = ["cat/000000.jpg", *(f"cat/copy_{copy}.jpg" for copy in range(8))]
    group_split = before[min(copies)]  # a group keeps the split of its smallest name
    moving = [name for name in copies if before[name] != group_split]
    assert moving  # the 9 copies did not all hash into one split
    capsys.readouterr()
    assert main(["prepare", str(raw), *rules, "--out", str(out), "--group-duplicates", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    after = {row["source"]: row["split"] for row in pq.read_table(out / "manifest.parquet").to_pylist()}
    assert [name for name in before if before[name] != after[name]] == moving
    assert (report["kept"], report["moved_to_duplicate_group"]) == (len(before) - len(moving), len(moving))


def test_a_previous_manifest_with_empty_splits_or_unreadable_says_what_to_do(tmp_path: Path) -> None:
    import pyarrow as pa

    from torchloom.errors import ManifestError
    from torchloom.tools.prepare.previous import read_previous_splits

    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"source": ["a.jpg", "b.jpg"], "split": [None, "train"]}), nulls)
    with pytest.raises(ManifestError, match=r"1 row\(s\) with no 'split'"):
        read_previous_splits(str(nulls), ("train", "val"))
    corrupt = tmp_path / "manifest.parquet"
    corrupt.write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    with pytest.raises(ManifestError, match=r"delete it to split afresh") as raised:
        read_previous_splits(str(corrupt), ("train", "val"))
    assert str(corrupt) in str(raised.value)


def test_a_corrupt_parquet_manifest_is_a_manifest_error(tmp_path: Path) -> None:
    """pyarrow raises a bare OSError for a footer it cannot deserialize."""
    from torchloom.errors import ManifestError
    from torchloom.io import read_table

    corrupt = tmp_path / "m.parquet"
    corrupt.write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        read_table(corrupt)
