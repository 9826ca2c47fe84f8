"""A manifest's ``bytes`` column on a real S3 server (SeaweedFS behind the counting proxy): the sizes
vouch for the objects at construction and check every read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from s3proxy import FaultProxy
from s3server import S3Bucket, S3Server
from torchloom import Image, Label, ManifestDataset
from torchloom.errors import ManifestError, ObjectChangedError
from torchloom.faults import Skipped
from torchloom.io import ObjectStore
from torchloom.testing import write_class_folders


def put_manifest(fs: Any, bucket: S3Bucket, tmp_path: Path, count: int, *, sizes: bool = True) -> list[str]:
    """``count`` JPEGs below ``train/`` and ``train/manifest.csv`` naming them (with their sizes
    in a ``bytes`` column when ``sizes``); the keys relative to ``train``."""
    local = tmp_path / "images"
    write_class_folders(local, [count], size=(16, 16), class_names=["cat"], progress=False)
    files = sorted(path for path in local.rglob("*.jpg"))
    keys = [path.relative_to(local).as_posix() for path in files]
    fs.pipe({bucket.path(f"train/{key}"): path.read_bytes() for key, path in zip(keys, files, strict=True)})
    columns: dict[str, Any] = {"image": keys, "label": ["cat"] * count}
    if sizes:
        columns["bytes"] = [path.stat().st_size for path in files]
    manifest = tmp_path / "manifest.csv"
    pa_csv.write_csv(pa.table(columns), manifest)
    fs.pipe(bucket.path("train/manifest.csv"), manifest.read_bytes())
    return keys


def dataset(bucket: S3Bucket, proxy: FaultProxy, **options: Any) -> ManifestDataset:
    return ManifestDataset(
        bucket.url_of("train/manifest.csv"),
        fields=[Image("image"), Label("label")],
        storage_options=ObjectStore(proxy.storage_options, backoff=0.01),
        progress=False,
        **options,
    )


def test_exists_with_sizes_makes_no_request_per_row(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    put_manifest(s3_server.filesystem(), s3_bucket, tmp_path, 6)
    made = dataset(s3_bucket, s3_proxy, validate="exists")
    assert len(made) == 6
    assert s3_proxy.requests.total == 1  # the manifest alone
    s3_proxy.reset_counts()
    assert made[3]["image"].shape == (3, 16, 16)
    assert s3_proxy.requests.object_gets == 1 and s3_proxy.requests.heads == 0


def test_exists_without_sizes_still_asks_the_store_for_each_row(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    put_manifest(s3_server.filesystem(), s3_bucket, tmp_path, 4, sizes=False)
    assert len(dataset(s3_bucket, s3_proxy, validate="exists")) == 4
    assert s3_proxy.requests.object_gets == 1 + 4


def test_an_object_of_another_size_than_the_manifest_says_is_named_at_read(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    keys = put_manifest(fs, s3_bucket, tmp_path, 3)
    made = dataset(s3_bucket, s3_proxy, validate="exists")
    fs.pipe(s3_bucket.path(f"train/{keys[1]}"), fs.cat(s3_bucket.path(f"train/{keys[1]}")) + b"\0\0")
    with pytest.raises(Exception, match=keys[1]) as changed:
        made[1]
    assert isinstance(changed.value.__cause__, ObjectChangedError)
    assert "bytes when indexed" in str(changed.value.__cause__)
    assert made[0]["image"].shape == (3, 16, 16)


def test_a_changed_size_is_refused_by_header_validation(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    keys = put_manifest(fs, s3_bucket, tmp_path, 3)
    fs.pipe(s3_bucket.path(f"train/{keys[2]}"), fs.cat(s3_bucket.path(f"train/{keys[2]}")) + b"\0")
    made = dataset(s3_bucket, s3_proxy)  # validate="header": one ranged GET per row, checked
    assert len(made) == 2
    ((path, reason),) = made.report.invalid
    assert path.endswith(keys[2]) and "bytes when indexed" in reason


def test_an_object_vouched_for_but_missing_is_skipped_when_read(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    keys = put_manifest(fs, s3_bucket, tmp_path, 3)
    fs.rm(s3_bucket.path(f"train/{keys[0]}"))
    made = dataset(s3_bucket, s3_proxy, validate="exists", on_error="skip")
    assert len(made) == 3  # the manifest vouched for it: nothing was asked of the store
    missing = made[0]
    assert isinstance(missing, Skipped) and missing.error == "MissingFileError"
    assert made[1]["image"].shape == (3, 16, 16)


def test_a_bytes_column_that_is_not_whole_numbers_is_refused(
    s3_server: S3Server, s3_bucket: S3Bucket
) -> None:
    table = pa.table({"image": ["cat/1.jpg"], "bytes": ["12 KB"]})
    with pytest.raises(ManifestError, match="'bytes' column holds each file's size"):
        ManifestDataset(
            table, root=s3_bucket.url, fields=[Image("image")], progress=False,
            storage_options=s3_server.storage_options,
        )
