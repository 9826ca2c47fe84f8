"""``torchloom prepare``: labels, a deterministic stratified split, manifests, materialized folders."""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import write_jpeg
from torchloom import FolderDataset, ManifestDataset
from torchloom.errors import UnsafeFileError
from torchloom.testing import write_class_folders
from torchloom.tools.cli import main
from torchloom.tools.prepare import parse_rules, prepare_dataset
from torchloom.tools.prepare.materialize import materialize
from torchloom.tools.prepare.split import nearest_counts, stratified_split

COUNTS = (40, 21, 9)
CLASSES = ("scratch", "ok", "dent")
FRACTIONS = (0.8, 0.1, 0.1)


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    """Three imbalanced classes of small JPEGs plus a text file, in class-named folders."""
    root = tmp_path / "raw"
    write_class_folders(root, COUNTS, size=(24, 24), class_names=CLASSES, progress=False)
    (root / "notes.txt").write_text("not an image")
    return root


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Content hash, mtime (ns) and size of every file under ``root``."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            found[str(path.relative_to(root))] = (
                hashlib.blake2b(path.read_bytes()).hexdigest(),
                stat.st_mtime_ns,
                stat.st_size,
            )
    return found


def label_map(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.parent.name for p in sorted(root.rglob("*.jpg"))}


def prepare(*args: str | Path) -> int:
    return main(["prepare", *map(str, args)])


def manifest(out: Path) -> dict[str, dict[str, object]]:
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    return {str(row["source"]): row for row in rows}


def test_end_to_end_identical_runs_stratified_raw_untouched(raw: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(label_map(raw)))
    before = snapshot(raw)
    results = []
    for out in (tmp_path / "a", tmp_path / "b"):
        command = [sys.executable, "-m", "torchloom", "prepare", str(raw), "--labels", str(labels)]
        done = subprocess.run(
            [*command, "--out", str(out), "--fractions", "0.8,0.1,0.1", "--seed", "3", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        results.append(json.loads(done.stdout))
    assert results[0]["counts"] == results[1]["counts"]
    assert manifest(tmp_path / "a") == manifest(tmp_path / "b")
    assert (tmp_path / "a" / "manifest.csv").read_bytes() == (tmp_path / "b" / "manifest.csv").read_bytes()
    for label, count in zip(CLASSES, COUNTS, strict=True):
        got = [results[0]["counts"][label][name] for name in ("train", "val", "test")]
        assert sum(got) == count
        assert np.all(np.abs(np.array(got) - count * np.array(FRACTIONS)) < 1), (label, got)
    assert snapshot(raw) == before
    rows = manifest(tmp_path / "a")
    assert all(len(str(row["blake2b"])) == 32 for row in rows.values())
    assert all(row["bytes"] == (raw / str(source)).stat().st_size for source, row in rows.items())
    dataset = ManifestDataset(tmp_path / "a" / "manifest.parquet", root=raw, progress=False)
    assert len(dataset) == sum(COUNTS) and dataset.classes == sorted(CLASSES)
    assert dataset[0]["image"].shape == (3, 24, 24)
    assert len(ManifestDataset(tmp_path / "a" / "manifest.csv", root=raw, progress=False)) == sum(COUNTS)


def _add_files(raw: Path, tmp_path: Path, counts: tuple[int, ...], seed: int) -> None:
    more = tmp_path / f"more{seed}"
    write_class_folders(more, counts, size=(24, 24), class_names=CLASSES, seed=seed, progress=False)
    for path in more.rglob("*.jpg"):
        shutil.copy(path, raw / path.parent.name / f"new{seed}_{path.name}")


def _split_counts(rows: dict[str, dict[str, object]], label: str) -> list[int]:
    splits = [row["split"] for row in rows.values() if row["label"] == label]
    return [splits.count(name) for name in ("train", "val", "test")]


def test_adding_files_keeps_every_old_split(
    raw: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A re-run reads the manifest in --out (or --previous) and places only the new files, restoring
    the balance with them; before, balancing moved 5 of 70 old files here."""
    rules = ["--rule", "scratch:scratch/", "--rule", "ok:ok/", "--rule", "dent:dent/"]
    out = tmp_path / "out"
    assert prepare(raw, *rules, "--out", out) == 0
    before = manifest(out)
    shutil.copytree(out, tmp_path / "first")
    _add_files(raw, tmp_path, (12, 6, 3), seed=7)
    capsys.readouterr()
    assert prepare(raw, *rules, "--out", out, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    after = manifest(out)
    assert len(after) == len(before) + 21
    assert [path for path in before if before[path]["split"] != after[path]["split"]] == []
    assert report["previous"] == str(out / "manifest.parquet") and report["kept"] == len(before)
    for label, count in zip(CLASSES, (52, 27, 12), strict=True):  # the nearest counts, every class
        assert _split_counts(after, label) == nearest_counts(count, FRACTIONS).tolist(), label
    # --previous names the manifest (here the CSV of the first run) when --out is another folder.
    elsewhere = tmp_path / "elsewhere"
    assert prepare(raw, *rules, "--out", elsewhere, "--previous", tmp_path / "first" / "manifest.csv") == 0
    assert manifest(elsewhere) == after
    assert "70 file(s) kept their split" in capsys.readouterr().out
    assert prepare(raw, *rules, "--out", elsewhere, "--previous", tmp_path / "none.parquet") == 2


def test_a_previous_manifest_with_a_split_no_longer_made_is_a_usage_error(
    raw: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = ["--rule", "scratch:scratch/", "--rule", "ok:ok/", "--rule", "dent:dent/"]
    assert prepare(raw, *rules, "--out", tmp_path / "out") == 0
    assert prepare(raw, *rules, "--out", tmp_path / "out", "--fractions", "0.8,0.2") == 2
    assert "puts files in split(s) ['test']" in capsys.readouterr().err


def test_split_rule_nearest_counts_and_fewest_moves() -> None:
    rng = np.random.default_rng(0)
    for trial in range(30):
        sizes = rng.integers(0, 60, size=4)
        classes = np.repeat(np.arange(4), sizes)
        keys = [f"t{trial}/{i}.jpg" for i in range(len(classes))]
        fractions = (0.7, 0.2, 0.1) if trial % 2 else (0.5, 0.5)
        previous = np.where(rng.random(len(keys)) < 0.5, rng.integers(0, len(fractions), len(keys)), -1)
        for given in (None, previous):
            result = stratified_split(keys, classes, fractions, seed=trial, previous=given)
            kept = np.zeros(len(keys), bool) if given is None else given >= 0
            assert np.array_equal(result.split[kept], previous[kept]) and np.array_equal(result.kept, kept)
            for label in range(4):
                new = (classes == label) & ~kept
                held = np.bincount(result.split[(classes == label) & kept], minlength=len(fractions))
                counts = np.bincount(result.split[new], minlength=len(fractions))
                assert counts.tolist() == nearest_counts(int(sizes[label]), fractions, held=held).tolist()
                start = np.bincount(result.hash_split[new], minlength=len(fractions))
                assert result.rebalanced[new].sum() == np.maximum(start - counts, 0).sum()  # the fewest


def test_nearest_counts() -> None:
    assert nearest_counts(7, (0.7, 0.15, 0.15)).tolist() == [5, 1, 1]  # the ±1 rule allowed 4/1/2
    assert nearest_counts(10, (0.8, 0.1, 0.1)).tolist() == [8, 1, 1]  # 10 * 0.1 = 1.0000000000000002
    assert nearest_counts(5, (0.8, 0.1, 0.1)).tolist() == [4, 1, 0]  # a tie goes to the earlier split
    assert nearest_counts(20, (0.5, 0.5), held=np.array([2, 8])).tolist() == [8, 2]
    # Old files overfill test: the new ones go where they bring the counts nearest the targets.
    assert nearest_counts(110, (0.8, 0.1, 0.1), held=np.array([10, 10, 80])).tolist() == [10, 0, 0]
    # 4/0/10 against targets 7/3.5/3.5: no split further than 3.5 from its target (3/1/10: 4).
    assert nearest_counts(14, (0.5, 0.25, 0.25), held=np.array([0, 0, 10])).tolist() == [4, 0, 0]


def test_a_small_class_gets_the_nearest_counts_and_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    for i in range(7):
        write_jpeg(raw / "cat" / f"{i}.jpg", seed=i)
    for i in range(5):
        write_jpeg(raw / "dog" / f"{i}.jpg", seed=10 + i)
    rules = parse_rules(["cat:cat/", "dog:dog/"])
    result = prepare_dataset(str(raw), str(tmp_path / "out"), rules=rules, fractions=(0.7, 0.15, 0.15))
    assert result.counts().tolist() == [[5, 1, 1], [3, 1, 1]] and result.warnings == []
    assert prepare(raw, "--rule", "cat:cat/", "--rule", "dog:dog/", "--out", tmp_path / "o2") == 0
    printed = capsys.readouterr().out
    assert (
        "warning: class 'dog' has no test file (5 file(s) at --fractions 0.8,0.1,0.1): add files of it, "
        "or it cannot be evaluated in test"
    ) in printed
    assert "class 'cat'" not in printed  # 7 files at 0.8/0.1/0.1: 5/1/1


def test_unknown_unmatched_and_ambiguous_are_reported(
    raw: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = label_map(raw)
    del entries["ok/000003.jpg"]
    entries["gone/missing.jpg"] = "ok"
    labels = tmp_path / "labels.csv"
    with open(labels, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["file", "class"])
        writer.writerows(entries.items())
    assert prepare(raw, "--labels", labels, "--out", tmp_path / "out") == 1
    printed = capsys.readouterr().out
    assert "unmatched: 1" in printed and "ok/000003.jpg" in printed
    assert "unknown label entry: 1" in printed and "gone/missing.jpg" in printed
    with open(tmp_path / "out" / "problems.csv") as handle:
        problems = list(csv.DictReader(handle))
    assert {(p["kind"], p["name"]) for p in problems} == {
        ("unmatched", "ok/000003.jpg"),
        ("unknown label entry", "gone/missing.jpg"),
    }
    assert len(manifest(tmp_path / "out")) == sum(COUNTS) - 1
    write_jpeg(raw / "scratch_ok.jpg")
    assert (
        prepare(raw, "--rule", "scratch:scratch", "--rule", "ok:ok", "--out", tmp_path / "r", "--json") == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in report["problems"]["ambiguous"]] == ["scratch_ok.jpg"]
    assert len(report["problems"]["unmatched"]) == COUNTS[2]  # dent has no rule
    assert "scratch_ok.jpg" not in manifest(tmp_path / "r")


@pytest.mark.parametrize("mode", ["link", "copy"])
def test_materialize_class_folders(raw: Path, tmp_path: Path, mode: str) -> None:
    write_jpeg(raw / "extra" / "a" / "same.jpg", seed=1)
    write_jpeg(raw / "extra" / "b" / "SAME.jpg", seed=2)
    before = snapshot(raw)
    out = tmp_path / "out"
    rules = ["--rule", "scratch:scratch/", "--rule", "ok:ok/,extra/", "--rule", "dent:dent/"]
    args = [raw, *rules, "--out", out, "--materialize", mode, "--fractions", "0.5,0.5"]
    assert prepare(*args) == 0
    assert prepare(*args) == 0  # a rerun replaces its own split folders
    assert snapshot(raw) == before
    rows = manifest(out)
    for source, row in rows.items():
        target, original = out / str(row["image"]), raw / source
        assert str(row["image"]).startswith(f"{row['split']}/{row['label']}/")
        assert target.read_bytes() == original.read_bytes()
        assert (target.stat().st_ino == original.stat().st_ino) == (mode == "link")
    same = [str(rows[s]["image"]) for s in ("extra/a/same.jpg", "extra/b/SAME.jpg")]
    assert len({name.casefold() for name in same}) == 2 and all("__" in name for name in same)
    dataset = ManifestDataset(out / "manifest.parquet", progress=False)  # read as is
    assert len(dataset) == sum(COUNTS) + 2
    train = FolderDataset(out / "train", progress=False)
    assert len(train) == sum(1 for row in rows.values() if row["split"] == "train")
    assert not (out / ".torchloom-prepare-staging").exists()


def test_group_duplicates_keeps_copies_in_one_split(raw: Path, tmp_path: Path) -> None:
    planted = [raw / "scratch" / f"{i:06d}.jpg" for i in range(0, 40, 4)]
    for number, original in enumerate(planted):
        for copy in range(2):
            shutil.copy(original, raw / "scratch" / f"copy{copy}_{number}.jpg")
    rules = ["--rule", "scratch:scratch/", "--rule", "ok:ok/", "--rule", "dent:dent/"]
    out = tmp_path / "out"
    assert prepare(raw, *rules, "--out", out, "--group-duplicates") == 0
    rows = manifest(out)
    for number, original in enumerate(planted):
        members = [f"scratch/{original.name}", *(f"scratch/copy{c}_{number}.jpg" for c in range(2))]
        assert len({rows[m]["split"] for m in members}) == 1, members
        assert (
            len({rows[m]["duplicate_group"] for m in members}) == 1
            and rows[members[0]]["duplicate_group"] >= 0
        )


def test_usage_errors_exit_2(raw: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out")
    assert prepare(raw, "--rule", "ok", "--out", out) == 2
    assert "LABEL:substr1,substr2" in capsys.readouterr().err
    assert prepare(raw, "--rule", "ok:ok", "--out", out, "--fractions", "0.8,0.3") == 2
    assert "sums to 1.1" in capsys.readouterr().err
    assert prepare(tmp_path / "nowhere", "--rule", "ok:ok", "--out", out) == 2
    assert prepare(raw, "--labels", tmp_path / "none.json", "--out", out) == 2
    assert "does not exist" in capsys.readouterr().err
    assert prepare(raw, "--rule", "ok:ok", "--out", raw / "inside") == 2
    assert "inside RAW" in capsys.readouterr().err
    (tmp_path / "mine" / "train").mkdir(parents=True)
    assert prepare(raw, "--rule", "ok:ok", "--out", tmp_path / "mine", "--materialize", "copy") == 2
    assert (tmp_path / "mine" / "train").exists() and not (raw / "inside").exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{"ok/000001.jpg": ["ok"]}')
    assert prepare(raw, "--labels", bad, "--out", out) == 1
    assert "labels must be non-empty strings" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        prepare(raw, "--rule", "ok:ok", "--labels", bad, "--out", out)
    assert exit_info.value.code == 2


def test_link_falls_back_to_copy_across_devices(
    raw: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def cross_device(source: str, target: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link", source)

    monkeypatch.setattr(os, "link", cross_device)
    rules = ["--rule", "scratch:scratch/", "--rule", "ok:ok/", "--rule", "dent:dent/"]
    assert prepare(raw, *rules, "--out", tmp_path / "out", "--materialize", "link", "--json") == 0
    assert json.loads(capsys.readouterr().out)["copied_instead_of_linked"] == sum(COUNTS)
    assert len(list((tmp_path / "out").rglob("*.jpg"))) == sum(COUNTS)


def test_label_names_match_files_in_nfc(tmp_path: Path) -> None:
    """A name copied from macOS (NFD: e + a combining accent) and the same name typed in a label
    file (NFC) look identical: they match, for maps and for rules."""
    raw = tmp_path / "raw"
    write_jpeg(raw / unicodedata.normalize("NFD", "café.jpg"), seed=1)
    write_jpeg(raw / "plain.jpg", seed=2)
    write_jpeg(raw / unicodedata.normalize("NFC", "naïve.jpg"), seed=3)  # and the other way round
    entries = [
        (unicodedata.normalize("NFC", "café.jpg"), "food"),
        ("plain.jpg", "plain"),
        (unicodedata.normalize("NFD", "naïve.jpg"), "plain"),
    ]
    result = prepare_dataset(str(raw), str(tmp_path / "out"), label_entries=entries, fractions=(1.0, 0.0))
    assert result.problem_count == 0
    assert result.manifest.column("image").to_pylist() == [
        unicodedata.normalize("NFD", "café.jpg"),
        unicodedata.normalize("NFC", "naïve.jpg"),
        "plain.jpg",
    ]
    rules = parse_rules([unicodedata.normalize("NFC", "food:café"), "plain:plain"])
    by_rule = prepare_dataset(str(raw), str(tmp_path / "out2"), rules=rules, fractions=(1.0, 0.0))
    assert by_rule.manifest.column("label").to_pylist() == ["food", "plain"]


def test_a_name_no_manifest_can_hold_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    write_jpeg(raw / "cat" / "ok.jpg", seed=1)
    with open(os.path.join(os.fsencode(raw), b"cat", b"caf\xe9.jpg"), "wb") as handle:
        handle.write((raw / "cat" / "ok.jpg").read_bytes())
    out = tmp_path / "out"
    assert prepare(raw, "--rule", "cat:cat", "--out", out, "--fractions", "1,0") == 1
    printed = capsys.readouterr().out
    assert "cat/caf\\xe9.jpg" in printed and "not valid UTF-8" in printed
    with open(out / "problems.csv", newline="", encoding="utf-8") as handle:
        problems = list(csv.DictReader(handle))
    assert [(row["kind"], row["name"]) for row in problems] == [("unreadable", "cat/caf\\xe9.jpg")]
    assert pq.read_table(out / "manifest.parquet").column("image").to_pylist() == ["cat/ok.jpg"]


@pytest.mark.parametrize("mode", ["copy", "link"])
def test_materialize_copies_only_files_inside_raw(tmp_path: Path, mode: str) -> None:
    """A file swapped for a link out of RAW after it was checked is refused, never copied."""
    raw = tmp_path / "raw"
    write_jpeg(raw / "ok_1.jpg", seed=1)
    secret = write_jpeg(tmp_path / "secret.jpg", seed=2)
    (raw / "ok_1.jpg").unlink()
    (raw / "ok_1.jpg").symlink_to(tmp_path / "secret.jpg")
    target = tmp_path / "out" / "ok_1.jpg"
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        materialize([str(raw / "ok_1.jpg")], [str(target)], mode=mode, inside=os.path.realpath(raw))
    assert not target.exists() or target.read_bytes() != secret


def test_a_link_that_is_not_the_checked_file_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = tmp_path / "raw"
    write_jpeg(raw / "ok_1.jpg", seed=1)
    write_jpeg(tmp_path / "secret.jpg", seed=2)
    real_link = os.link

    def swap_then_link(source: str, target: str) -> None:  # the swap lands between the open and the link
        (raw / "ok_1.jpg").rename(raw / "kept.jpg")
        (raw / "ok_1.jpg").symlink_to(tmp_path / "secret.jpg")
        real_link(os.path.realpath(raw / "ok_1.jpg"), target)

    monkeypatch.setattr(os, "link", swap_then_link)
    target = tmp_path / "out" / "ok_1.jpg"
    with pytest.raises(UnsafeFileError, match="changed while it was linked"):
        materialize([str(raw / "ok_1.jpg")], [str(target)], mode="link", inside=os.path.realpath(raw))
    assert not target.exists()


def test_a_label_file_that_cannot_be_read_is_one_line(
    raw: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\nok/000000.jpg,ok\n")
    real_open = os.open

    def locked(path: str, *args: int, **kwargs: int) -> int:
        if os.fspath(path) == str(labels):
            raise PermissionError(errno.EACCES, "Permission denied", str(labels))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", locked)
    assert prepare(raw, "--labels", labels, "--out", tmp_path / "out") == 1
    assert capsys.readouterr().err == (
        f"torchloom prepare: UnreadableFileError: cannot read {str(labels)!r}: permission denied; fix its "
        "permissions (or run as a user who may read it)\n"
    )
