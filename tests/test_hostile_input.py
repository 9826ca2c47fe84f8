"""Hostile input, typed and bounded: each case as a test, through real DataLoader workers where a
sample is read (0 and 2 workers); bugs surface whatever the fault policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import write_jpeg
from torchloom import (
    FaultReport,
    FolderDataset,
    Image,
    Label,
    ManifestDataset,
    MixtureSampler,
    Numeric,
    SampleError,
    StreamDataset,
    TableDataset,
    WeightedSampler,
    collate,
)
from torchloom.datasets.index import check_image_file
from torchloom.errors import DecodeError, ManifestError, SkippedSampleError, TransformError, UnsafeFileError
from torchloom.faults import Skipped
from torchloom.fusion import JoinedDataset
from torchloom.io.image import MAX_HEADER_BYTES
from torchloom.transforms import Lambda

WORKERS = [0, 2]


def load_all(dataset: Any, num_workers: int, **options: Any) -> list[Any]:
    loader = DataLoader(dataset, batch_size=4, num_workers=num_workers, collate_fn=collate, **options)
    return list(loader)


def folder_with(tmp_path: Path, extra: dict[str, bytes] | None = None) -> Path:
    root = tmp_path / "data"
    for i in range(5):
        write_jpeg(root / "cat" / f"{i}.jpg", seed=i)
    for name, data in (extra or {}).items():
        (root / "cat" / name).write_bytes(data)
    return root


# --- files that are not what they say --------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", WORKERS)
def test_a_fifo_named_jpg_is_refused_before_open_never_hangs(tmp_path: Path, num_workers: int) -> None:
    root = folder_with(tmp_path)
    os.mkfifo(root / "cat" / "pipe.jpg")
    validated = FolderDataset(root, progress=False)
    assert len(validated) == 5
    assert any("FIFO" in reason for _, reason in validated.report.invalid)
    unvalidated = FolderDataset(root, validate="none", on_error="skip", progress=False)
    report = FaultReport()
    batches = list(report.watch(load_all(unvalidated, num_workers)))
    assert sum(len(b["label"]) for b in batches) == 5
    (skipped,) = report.skipped
    assert skipped.path.endswith("pipe.jpg") and "FIFO" in skipped.reason
    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        list(StreamDataset([str(tmp_path / "pipe.jsonl")]))


def test_header_validation_of_a_huge_non_image_reads_a_bounded_prefix(tmp_path: Path) -> None:
    huge = tmp_path / "huge.jpg"
    with open(huge, "wb") as handle:  # 1 GiB, sparse: costs no disk
        handle.write(b"\xff\xd8\xff\xe0" + b"\0" * 100)
        handle.truncate(1 << 30)
    code = (
        "import resource, sys; from torchloom.datasets.index import check_image_file; "
        f"reason = check_image_file({str(huge)!r}, 'header'); "
        "print(reason is not None, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    )
    before = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, torchloom.datasets.index; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    refused, peak = after.stdout.split()
    assert refused == "True"
    reason = check_image_file(str(huge), "full", max_pixels=1_000_000)  # not read: refused by its size
    assert reason is not None and "larger than any image" in reason
    (tmp_path / "data" / "cat").mkdir(parents=True)
    os.replace(huge, tmp_path / "data" / "cat" / "huge.jpg")
    write_jpeg(tmp_path / "data" / "cat" / "ok.jpg")
    dataset = FolderDataset(tmp_path / "data", validate="none", max_pixels=1_000_000, progress=False)
    with pytest.raises(DecodeError, match="larger than any image"):
        dataset.read_file(dataset.index.paths[0])
    assert int(peak) - int(before.stdout) < 4 * MAX_HEADER_BYTES // (1 << 20) + 32, "MiB of extra memory"


def test_a_jpeg_with_a_large_metadata_block_still_validates(tmp_path: Path) -> None:
    data = write_jpeg(tmp_path / "a.jpg")
    padding = b"\xff\xe1" + (65533).to_bytes(2, "big") + b"\0" * 65531  # one 64 KiB APP1 segment
    (tmp_path / "b.jpg").write_bytes(data[:2] + padding * 3 + data[2:])
    assert check_image_file(str(tmp_path / "b.jpg"), "header") is None


@pytest.mark.parametrize("num_workers", WORKERS)
def test_a_symlink_swapped_in_after_validation_is_refused_at_read_time(
    tmp_path: Path, num_workers: int
) -> None:
    root = folder_with(tmp_path)
    outside = tmp_path / "secret.jpg"
    write_jpeg(outside, seed=9)
    table = pa.table({"image": [f"cat/{i}.jpg" for i in range(5)], "label": [0, 1, 0, 1, 0]})
    dataset = ManifestDataset(
        table, root=root, fields=[Image("image"), Label("label")], on_error="skip", progress=False
    )
    strict = ManifestDataset(table, root=root, fields=[Image("image")], progress=False, validate="none")
    (root / "cat" / "2.jpg").unlink()
    (root / "cat" / "2.jpg").symlink_to(outside)
    report = FaultReport()
    batches = list(report.watch(load_all(dataset, num_workers)))
    assert sum(len(b["label"]) for b in batches) == 4
    assert [s.index for s in report.skipped] == [2] and "outside the dataset root" in report.skipped[0].reason
    with pytest.raises(SampleError, match="outside the dataset root"):
        strict[2]


# --- manifests --------------------------------------------------------------------------------------


def manifest_root(tmp_path: Path, count: int = 6) -> Path:
    for i in range(count):
        write_jpeg(tmp_path / f"{i}.jpg", seed=i)
    return tmp_path


def test_nan_and_inf_labels_are_invalid_rows_and_whole_floats_are_class_numbers(tmp_path: Path) -> None:
    root = manifest_root(tmp_path)
    images = [f"{i}.jpg" for i in range(6)]
    labels = pa.array([0.0, 1.0, float("nan"), 2.0, float("inf"), None])
    dataset = ManifestDataset(
        pa.table({"image": images, "label": labels}),
        root=root,
        fields=[Image("image"), Label("label")],
        progress=False,
    )
    assert len(dataset) == 3 and dataset.classes == [0, 1, 2]
    assert [dataset[i]["label"] for i in range(3)] == [0, 1, 2]
    reasons = [reason for _, reason in dataset.report.invalid]
    assert (
        any("nan" in r for r in reasons)
        and any("inf" in r for r in reasons)
        and any("empty" in r for r in reasons)
    )
    fractional = pa.table({"image": images[:3], "label": [0.5, 1.5, float("nan")]})
    named = ManifestDataset(fractional, root=root, fields=[Image("image"), Label("label")], progress=False)
    assert named.classes == [0.5, 1.5] and len(named) == 2


def test_an_outlier_integer_label_cannot_allocate_millions_of_classes(tmp_path: Path) -> None:
    root = manifest_root(tmp_path, 3)
    table = pa.table({"image": ["0.jpg", "1.jpg", "2.jpg"], "label": [0, 1, 50_000_000]})
    with pytest.raises(ManifestError, match=r"row 2 holds 50,000,000 while only 3 distinct"):
        ManifestDataset(table, root=root, fields=[Image("image"), Label("label")], progress=False)
    sparse_but_fine = pa.table({"image": ["0.jpg", "1.jpg"], "label": [0, 999]})
    fine = ManifestDataset(
        sparse_but_fine, root=root, fields=[Image("image"), Label("label")], progress=False
    )
    assert len(fine.classes) == 1000


def test_inf_follows_the_nan_policy(tmp_path: Path) -> None:
    root = manifest_root(tmp_path, 3)
    table = pa.table({"image": ["0.jpg", "1.jpg", "2.jpg"], "x": [1.0, float("inf"), -float("inf")]})
    with pytest.raises(ManifestError, match="infinite"):
        ManifestDataset(table, root=root, fields=[Image("image"), Numeric("x")], progress=False)
    dropped = ManifestDataset(
        table, root=root, fields=[Image("image"), Numeric("x", nan="drop")], progress=False
    )
    assert len(dropped) == 1
    mean = ManifestDataset(
        table, root=root, fields=[Image("image"), Numeric("x", nan="mean")], progress=False
    )
    assert [mean[i]["numeric"].item() for i in range(3)] == [1.0, 1.0, 1.0]


def test_jsonl_errors_name_the_real_line(tmp_path: Path) -> None:
    lines = [json.dumps({"image": "0.jpg", "n": i}) for i in range(50_000)]
    lines[40_000] = '{"image": "0.jpg", oops}'
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ManifestError, match="line 40001 "):
        ManifestDataset(path, root=manifest_root(tmp_path, 1), fields=[Image("image")], progress=False)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_long_lines_and_a_bom_load(tmp_path: Path, suffix: str) -> None:
    root = manifest_root(tmp_path, 2)
    rows = [{"image": "0.jpg", "text": "x" * 3_000_000}, {"image": "1.jpg", "text": "short"}]
    body = json.dumps(rows) if suffix == ".json" else "\n".join(json.dumps(r) for r in rows)
    path = tmp_path / f"m{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    dataset = ManifestDataset(path, root=root, fields=[Image("image")], progress=False)
    assert len(dataset) == 2


# --- streams ----------------------------------------------------------------------------------------


def test_stream_csv_codes_stay_text_and_bad_shards_are_named(tmp_path: Path) -> None:
    good = tmp_path / "a.csv"
    good.write_text("code,count,score\n007,1,0.5\n010,2,1\n")
    assert list(StreamDataset([str(good)])) == [
        {"code": "007", "count": 1, "score": 0.5},
        {"code": "010", "count": 2, "score": 1.0},
    ]
    bad = tmp_path / "b.csv"
    bad.write_text('code,count\n1,2\n3,4,5\n"unterminated\n')
    with pytest.raises(ManifestError, match=r"shard .*b\.csv' line 3"):
        list(StreamDataset([str(bad)]))
    broken = tmp_path / "c.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ManifestError, match=r"shard .*c\.parquet"):
        list(StreamDataset([str(broken)]))
    bom = tmp_path / "d.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"id": 1}\n')
    assert list(StreamDataset([str(bom)])) == [{"id": 1}]


# --- errors across the worker boundary and the report ---------------------------------------------


@pytest.mark.parametrize("num_workers", WORKERS)
def test_a_path_with_quotes_survives_the_worker_round_trip(tmp_path: Path, num_workers: int) -> None:
    root = folder_with(tmp_path, {'it\'s "bad".jpg': b"\xff\xd8\xff not a jpeg"})
    dataset = FolderDataset(root, validate="none", progress=False)
    with pytest.raises(SampleError) as caught:
        load_all(dataset, num_workers)
    assert caught.value.path is not None and caught.value.path.endswith('it\'s "bad".jpg')


def test_fault_report_keys_by_dataset_and_index_and_escapes_paths(tmp_path: Path) -> None:
    report = FaultReport()
    report.record(Skipped(3, "a.jpg", "DecodeError", "truncated", dataset="FolderDataset('train')"))
    report.record(Skipped(3, "b\n#9 forged.jpg", "DecodeError", "bad\x1b[2J", dataset="FolderDataset('val')"))
    assert len(report) == 2
    summary = report.summary()
    assert "\\n#9 forged" in summary and "\x1b" not in summary and len(summary.splitlines()) == 3


@pytest.mark.parametrize("num_workers", WORKERS)
def test_joined_dataset_builds_when_a_first_sample_is_corrupt(tmp_path: Path, num_workers: int) -> None:
    root = manifest_root(tmp_path, 4)
    (root / "0.jpg").write_bytes(b"\xff\xd8\xff truncated")
    images = ManifestDataset(
        pa.table({"image": [f"{i}.jpg" for i in range(4)], "id": [0, 1, 2, 3]}),
        root=root,
        fields=[Image("image"), Label("id", name="id")],
        validate="none",
        on_error="skip",
        progress=False,
    )
    joined = JoinedDataset(
        {"photo": images, "price": TableDataset(pa.table({"id": [0, 1, 2, 3], "p": [1.0] * 4}))}, on="id"
    )
    report = FaultReport()
    batches = list(report.watch(load_all(joined, num_workers)))
    assert sum(len(b["p"]) for b in batches) == 3 and [s.index for s in report.skipped] == [0]


def test_weights_that_overflow_are_refused() -> None:
    with pytest.raises(ValueError, match="overflow"):
        WeightedSampler([1e308, 1e308], num_samples=2)
    with pytest.raises(ValueError, match="overflow"):
        MixtureSampler([5, 5], [1e308, 1e308])


# --- bugs surface, with the fix -------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", WORKERS)
def test_a_transform_bug_under_skip_fails_the_run_naming_the_sample(tmp_path: Path, num_workers: int) -> None:
    root = folder_with(tmp_path)
    dataset = FolderDataset(root, transform=Lambda(lambda image: "oops"), on_error="skip", progress=False)
    with pytest.raises(TransformError, match="returned a str") as caught:
        load_all(dataset, num_workers)
    text = str(caught.value) + "".join(getattr(caught.value, "__notes__", []))
    assert "while loading sample 0 (" in text and "0.jpg" in text


def test_a_one_argument_transform_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(TransformError, match=r"torchloom\.transforms\.Lambda\(your_transform\)"):
        FolderDataset(folder_with(tmp_path), transform=lambda image: image, progress=False)


@pytest.mark.parametrize("num_workers", WORKERS)
@pytest.mark.parametrize("bad", ["0.jpg", "4.jpg"])  # first in its batch, or after good samples
def test_the_default_collate_meeting_a_skipped_sample_names_the_fix(
    tmp_path: Path, num_workers: int, bad: str
) -> None:
    root = folder_with(tmp_path)
    (root / "cat" / bad).write_bytes(b"")
    dataset = FolderDataset(root, validate="none", on_error="skip", progress=False)
    with pytest.raises((SkippedSampleError, TypeError), match=r"collate_fn=torchloom\.collate"):
        list(DataLoader(dataset, batch_size=8, num_workers=num_workers))


def test_collate_conversion_failures_name_the_field() -> None:
    from torchloom.errors import CollateError

    with pytest.raises(CollateError, match=r"batch\.big"):
        collate([{"big": 2**70}, {"big": 1}])
    with pytest.raises(CollateError, match=r"batch\.names"):
        collate([{"names": np.array(["a"])}, {"names": np.array(["b"])}])
    assert torch.equal(collate([{"x": 1}, {"x": 2}])["x"], torch.tensor([1, 2]))


def test_parquet_manifest_with_a_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.parquet")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        ManifestDataset(tmp_path / "m.parquet", root=tmp_path, fields=[Image("image")], progress=False)


def test_a_window_with_a_skipped_step_is_skipped_whole(tmp_path: Path) -> None:
    from torchloom.datasets import WindowDataset

    root = folder_with(tmp_path)
    (root / "cat" / "2.jpg").write_bytes(b"")
    steps = FolderDataset(root, validate="none", on_error="skip", progress=False)
    windows = WindowDataset(steps, [5], window=2)
    assert isinstance(windows[0], dict) and windows[0]["image"].shape[0] == 2
    broken = windows[1]
    assert isinstance(broken, Skipped) and "step 2" in broken.reason


def test_a_malformed_csv_manifest_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("image,label\n0.jpg,cat\n1.jpg,dog,extra\n")
    with pytest.raises(ManifestError, match=r"m\.csv' line 3"):
        ManifestDataset(path, root=manifest_root(tmp_path, 2), fields=[Image("image")], progress=False)
