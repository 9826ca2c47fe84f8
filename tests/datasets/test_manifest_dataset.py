"""ManifestDataset: formats, declared fields, NaN policy, path safety, workers."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import write_jpeg
from torchloom import FaultReport, Image, Label, ManifestDataset, Numeric, Text, collate
from torchloom.errors import (
    FieldNotFoundError,
    ManifestError,
    PathOutsideRootError,
    ValidationFailedError,
)

ROWS = [
    {"file": "img/a 1.jpg", "defect": "scratch", "age": 3.0, "size": 1.5, "title": "划痕 零件"},
    {"file": "img/b.jpg", "defect": "ok", "age": 5.0, "size": 2.5, "title": "plain part"},
    {"file": "img/c.jpg", "defect": "dent", "age": 7.0, "size": 0.5, "title": "dent, left side"},
    {"file": "img/d.jpg", "defect": "ok", "age": 9.0, "size": 1.0, "title": "another"},
]
FIELDS = [Image("file"), Label("defect"), Numeric(["age", "size"]), Text("title")]


def _write(root: Path, name: str, rows: list[dict[str, object]]) -> Path:
    path = root / name
    table = pa.Table.from_pylist(rows)
    if name.endswith(".parquet"):
        pq.write_table(table, path)
    elif name.endswith(".csv"):
        import pyarrow.csv as pa_csv

        pa_csv.write_csv(table, path)
    elif name.endswith(".jsonl"):
        path.write_text(
            "\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8"
        )
    else:
        path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def manifest_root(tmp_path: Path) -> Path:
    for i, row in enumerate(ROWS):
        write_jpeg(tmp_path / str(row["file"]), seed=i)
    return tmp_path


@pytest.mark.parametrize("name", ["m.csv", "m.json", "m.jsonl", "m.parquet"])
def test_formats_give_identical_samples(manifest_root: Path, name: str) -> None:
    dataset = ManifestDataset(_write(manifest_root, name, ROWS), fields=FIELDS, progress=False)
    assert len(dataset) == 4
    assert dataset.classes == ["dent", "ok", "scratch"]
    assert dataset.targets.tolist() == [2, 1, 0, 1]
    sample = dataset[0]
    assert set(sample) == {"image", "path", "label", "numeric", "title", "index"}
    assert sample["image"].shape == (3, 48, 64) and sample["image"].dtype == torch.uint8
    assert sample["numeric"].dtype == torch.float32 and sample["numeric"].tolist() == [3.0, 1.5]
    assert sample["title"] == "划痕 零件"
    assert sample["path"] == os.path.join(manifest_root, "img/a 1.jpg")


def test_fixed_classes_and_unknown_label(manifest_root: Path) -> None:
    path = _write(manifest_root, "m.csv", ROWS)
    fields = [Image("file"), Label("defect", classes=["ok", "scratch"])]
    dataset = ManifestDataset(path, fields=fields, progress=False)
    assert len(dataset) == 3 and dataset.targets.tolist() == [1, 0, 0]
    assert "'dent' is not one of classes" in dataset.report.invalid[0][1]
    with pytest.raises(ValidationFailedError, match="dent"):
        ManifestDataset(path, fields=fields, strict=True, progress=False)


def test_integer_labels_are_used_as_given(manifest_root: Path) -> None:
    rows = [dict(row, grade=g) for row, g in zip(ROWS, [4, 0, 4, 2], strict=True)]
    dataset = ManifestDataset(
        _write(manifest_root, "m.parquet", rows), fields=[Image("file"), Label("grade")], progress=False
    )
    assert dataset.targets.tolist() == [4, 0, 4, 2]


def test_missing_column_names_it_and_the_columns_present(manifest_root: Path) -> None:
    path = _write(manifest_root, "m.csv", ROWS)
    with pytest.raises(ManifestError) as caught:
        ManifestDataset(path, fields=[Image("file"), Numeric(["age", "weight"])], progress=False)
    assert "'weight'" in str(caught.value)
    for column in ("file", "defect", "age", "size", "title"):
        assert column in str(caught.value)


NAN_ROWS = [dict(row) for row in ROWS]
NAN_ROWS[1]["age"] = float("nan")
NAN_ROWS[3]["size"] = None


def test_nan_policy_raise_names_rows_and_columns(manifest_root: Path) -> None:
    path = _write(manifest_root, "m.parquet", NAN_ROWS)
    with pytest.raises(ManifestError) as caught:
        ManifestDataset(path, fields=[Image("file"), Numeric(["age", "size"])], progress=False)
    assert "rows 1, 3" in str(caught.value) and "'age'" in str(caught.value) and "'size'" in str(caught.value)


def test_nan_policies_drop_mean_keep_and_fill(manifest_root: Path) -> None:
    path = _write(manifest_root, "m.parquet", NAN_ROWS)

    def numeric(nan: object) -> ManifestDataset:
        return ManifestDataset(
            path,
            fields=[Image("file"), Numeric(["age", "size"], nan=nan)],  # type: ignore[arg-type]
            progress=False,
        )

    dropped = numeric("drop")
    assert len(dropped) == 2 and [r for _, r in dropped.report.invalid] == [
        "NaN, infinite or missing in ['age']",
        "NaN, infinite or missing in ['size']",
    ]
    assert numeric("mean")[1]["numeric"].tolist() == [pytest.approx((3 + 7 + 9) / 3), 2.5]
    assert numeric("mean")[3]["numeric"].tolist() == [9.0, pytest.approx((1.5 + 2.5 + 0.5) / 3)]
    assert math.isnan(numeric("keep")[1]["numeric"][0].item())
    assert numeric(-1.0)[3]["numeric"].tolist() == [9.0, -1.0]
    with pytest.raises(ValueError, match="Invalid nan"):
        numeric("zero")


def test_text_missing_policy(manifest_root: Path) -> None:
    rows = [dict(row) for row in ROWS]
    rows[2]["title"] = None
    path = _write(manifest_root, "m.jsonl", rows)
    with pytest.raises(ManifestError, match="rows 2"):
        ManifestDataset(path, fields=[Image("file"), Text("title")], progress=False)
    assert (
        len(ManifestDataset(path, fields=[Image("file"), Text("title", missing="drop")], progress=False)) == 3
    )
    empty = ManifestDataset(path, fields=[Image("file"), Text("title", missing="empty")], progress=False)
    assert empty[2]["title"] == ""


@pytest.mark.parametrize(
    ("value", "why"),
    [("../outside.jpg", "'..'"), ("img/../../outside.jpg", "'..'"), ("/etc/passwd", "absolute")],
)
def test_paths_leaving_root_are_refused_naming_the_row(manifest_root: Path, value: str, why: str) -> None:
    rows = [dict(row) for row in ROWS]
    rows[2]["file"] = value
    path = _write(manifest_root, "m.csv", rows)
    with pytest.raises(PathOutsideRootError) as caught:
        ManifestDataset(path, fields=[Image("file")], progress=False)
    assert caught.value.row == 2 and "row 2" in str(caught.value) and why in str(caught.value)


def test_symlink_leading_out_of_root_is_refused(
    manifest_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    write_jpeg(outside / "secret.jpg")
    os.symlink(outside / "secret.jpg", manifest_root / "img" / "link.jpg")
    rows = [dict(row) for row in ROWS] + [dict(ROWS[0], file="img/link.jpg")]
    path = _write(manifest_root, "m.csv", rows)
    with pytest.raises(PathOutsideRootError, match=r"row 4.*symlink"):
        ManifestDataset(path, fields=[Image("file")], progress=False)
    trusted = ManifestDataset(path, fields=[Image("file")], allow_outside_root=True, progress=False)
    assert len(trusted) == 5 and trusted[4]["image"].shape == (3, 48, 64)


def test_symlink_inside_root_is_fine(manifest_root: Path) -> None:
    os.symlink(manifest_root / "img" / "b.jpg", manifest_root / "img" / "alias.jpg")
    rows = [dict(ROWS[0], file="img/alias.jpg")]
    assert (
        len(ManifestDataset(_write(manifest_root, "m.csv", rows), fields=[Image("file")], progress=False))
        == 1
    )


def test_root_argument_and_table_input(manifest_root: Path) -> None:
    table = pa.Table.from_pylist(ROWS)
    with pytest.raises(ManifestError, match="root="):
        ManifestDataset(table, fields=FIELDS, progress=False)
    dataset = ManifestDataset(table, root=manifest_root, fields=FIELDS, progress=False)
    assert len(dataset) == 4


def test_missing_and_broken_images_are_reported(manifest_root: Path) -> None:
    (manifest_root / "img" / "c.jpg").unlink()
    (manifest_root / "img" / "d.jpg").write_bytes(b"")
    dataset = ManifestDataset(_write(manifest_root, "m.csv", ROWS), fields=FIELDS, progress=False)
    assert len(dataset) == 2
    reasons = {os.path.basename(path): reason for path, reason in dataset.report.invalid}
    assert reasons == {"c.jpg": "file does not exist", "d.jpg": "file is empty (0 bytes)"}


def test_manifest_without_images(manifest_root: Path) -> None:
    path = _write(manifest_root, "m.csv", ROWS)
    dataset = ManifestDataset(path, fields=[Label("defect"), Numeric("age"), Text("title")], progress=False)
    sample = dataset[3]
    assert len(dataset) == 4 and set(sample) == {"label", "numeric", "title", "index"}
    assert (sample["label"], sample["numeric"].tolist(), sample["title"]) == (1, [9.0], "another")


def test_bad_manifests(tmp_path: Path) -> None:
    (tmp_path / "m.xlsx").write_text("x")
    with pytest.raises(ManifestError, match="extension"):
        ManifestDataset(tmp_path / "m.xlsx", progress=False)
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        ManifestDataset(tmp_path / "nope.csv", progress=False)
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ManifestError, match="list of objects"):
        ManifestDataset(tmp_path / "bad.json", progress=False)
    (tmp_path / "m.csv").write_text("file,label\na.jpg,x\n")
    with pytest.raises(ManifestError, match="share a name"):
        ManifestDataset(tmp_path / "m.csv", fields=[Label("file"), Label("label")], progress=False)


def test_each_field_is_named_in_the_sample_by_its_name(manifest_root: Path) -> None:
    path = _write(manifest_root, "m.csv", ROWS)
    fields = [
        Image("file", name="photo"),
        Label("defect", name="target"),
        Numeric(["age", "size"], name="features"),
        Text("title", name="caption"),
    ]
    dataset = ManifestDataset(path, fields=fields, progress=False)
    sample = dataset[0]
    assert set(sample) == {"photo", "target", "features", "caption", "path", "index"}
    assert dataset.image_field == "photo" and sample["photo"].shape == (3, 48, 64)
    assert dataset.column("target").tolist() == dataset.targets.tolist() == [2, 1, 0, 1]
    with pytest.raises(FieldNotFoundError, match="no field named 'label'"):
        dataset.column("label")
    with pytest.raises(ManifestError, match=r"reserved .*another name=, e\.g\. Text\('path', name="):
        ManifestDataset(path, fields=[Image("file"), Text("title", name="path")], progress=False)


def test_workers_and_skip_policy(manifest_root: Path) -> None:
    data = (manifest_root / "img" / "b.jpg").read_bytes()
    (manifest_root / "img" / "b.jpg").write_bytes(data[: len(data) // 2])
    dataset = ManifestDataset(
        _write(manifest_root, "m.csv", ROWS), fields=FIELDS, on_error="skip", progress=False
    )
    report = FaultReport()
    batches = list(report.watch(DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate)))
    assert sum(len(b["label"]) for b in batches) == 3
    assert [s.index for s in report.skipped] == [1]
    assert batches[0]["numeric"].shape == (1, 2) and batches[0]["title"] == ["划痕 零件"]
    assert isinstance(batches[1]["numeric"], torch.Tensor) and np.allclose(
        batches[1]["numeric"][0], [7.0, 0.5]
    )


def test_an_absolute_path_inside_the_root_is_accepted(manifest_root: Path) -> None:
    rows = [dict(ROWS[0], file=str(manifest_root / "img" / "b.jpg"))] + [dict(row) for row in ROWS[1:]]
    dataset = ManifestDataset(_write(manifest_root, "m.csv", rows), fields=[Image("file")], progress=False)
    assert dataset.index.paths[0] == str(manifest_root / "img" / "b.jpg") and len(dataset) == 4
    elsewhere = manifest_root.parent / f"{manifest_root.name}-other"
    write_jpeg(elsewhere / "e.jpg")
    rows[0]["file"] = str(elsewhere / "e.jpg")
    with pytest.raises(
        PathOutsideRootError, match=r"is absolute and leads outside root.*--allow-outside-root"
    ):
        ManifestDataset(_write(manifest_root, "m.csv", rows), fields=[Image("file")], progress=False)


def test_a_url_row_under_a_local_root_is_refused_naming_the_row(manifest_root: Path) -> None:
    table = pa.table({"file": ["img/b.jpg", "s3://bucket/cat/1.jpg"]})
    with pytest.raises(
        PathOutsideRootError, match=r"manifest row 1: path 's3://bucket/cat/1\.jpg' is a URL, and the root is"
    ):
        ManifestDataset(table, root=manifest_root, fields=[Image("file")], progress=False)


def test_a_missing_file_whose_path_looks_mistyped_says_what_looks_wrong(manifest_root: Path) -> None:
    rows = [dict(row) for row in ROWS]
    rows[1]["file"], rows[2]["file"] = "img\\b.jpg", "img/c.jpg "
    dataset = ManifestDataset(_write(manifest_root, "m.csv", rows), fields=[Image("file")], progress=False)
    reasons = dict(dataset.report.invalid)
    assert "folders are separated by '/'" in reasons[str(manifest_root / "img\\b.jpg")]
    assert "whitespace" in reasons[str(manifest_root / "img" / "c.jpg ")]
    assert repr(str(manifest_root / "img" / "c.jpg ")) in str(dataset.report)  # the space stays visible


def test_rows_whose_files_are_missing_are_said_once_as_a_warning(manifest_root: Path) -> None:
    """They were dropped with nothing said unless ``ds.report`` was read: a smaller dataset, silently."""
    import warnings

    from torchloom.datasets.manifest import MissingFilesWarning

    rows = [dict(row) for row in ROWS] + [{**ROWS[0], "file": "img/gone.jpg"}, {**ROWS[1], "file": "x.jpg"}]
    manifest = _write(manifest_root, "m.csv", rows)
    with pytest.warns(MissingFilesWarning) as told:
        dataset = ManifestDataset(manifest, fields=[Image("file")], progress=False)
    assert len(told) == 1 and told[0].filename == __file__  # once, at the user's line
    message = str(told[0].message)
    assert "2 row(s) name files that do not exist" in message and "ds.report" in message
    assert repr(str(manifest_root / "img" / "gone.jpg")) in message and "strict=True" in message
    assert len(dataset) == len(ROWS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingFilesWarning)
        ManifestDataset(_write(manifest_root, "whole.csv", ROWS), fields=[Image("file")], progress=False)
