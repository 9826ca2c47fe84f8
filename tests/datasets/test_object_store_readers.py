"""Every reader beside images on a real S3 server (SeaweedFS on loopback, behind the counting
proxy): volumes, hyperspectral cubes, tables, streams and the decoded cache."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pa_parquet
import pytest
from test_object_store import jpeg, put_images
from torch.utils.data import DataLoader

from s3proxy import FaultProxy
from s3server import S3Bucket, S3Server
from torchloom import DecodedCache, FolderDataset, Image, Label, ManifestDataset, TableDataset
from torchloom.datasets import HyperspectralDataset, Manifest, VolumeDataset
from torchloom.errors import CacheError, ConfigError, DecodeError, PathOutsideRootError
from torchloom.io import ObjectStore, write_envi
from torchloom.streaming import StreamDataset


def store_for(proxy: FaultProxy) -> ObjectStore:
    return ObjectStore(proxy.storage_options, backoff=0.01)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def put_volumes(fs: Any, bucket: S3Bucket) -> dict[str, np.ndarray]:
    """Four volumes in class folders: three ``.npy`` (one of 1 MiB), one stored ``.npz``."""
    volumes = {
        "scans/ct/a.npy": np.arange(4 * 8 * 8, dtype=np.int16).reshape(4, 8, 8),
        "scans/ct/big.npy": np.arange(64 * 64 * 64, dtype=np.float32).reshape(64, 64, 64),
        "scans/mri/b.npy": np.ones((2, 3, 5, 5), np.uint8),
        "scans/mri/c.npz": np.full((3, 4, 4), 7, np.int32),
    }
    for key, array in volumes.items():
        data = npz_bytes(ct=array) if key.endswith(".npz") else npy_bytes(array)
        fs.pipe(bucket.path(key), data)
    return volumes


def test_a_volume_folder_url_is_listed_once_and_probed_by_one_ranged_get_each(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    volumes = put_volumes(s3_server.filesystem(), s3_bucket)
    store = store_for(s3_proxy)
    dataset = VolumeDataset(s3_bucket.url_of("scans"), array="ct", storage_options=store, progress=False)
    counts = s3_proxy.requests
    # The prefix listed once (its first level, then each class prefix), then per .npy one ranged
    # GET of its first block (the 1 MiB one is not downloaded); the npz's zip directory is read
    # from its end: at most three per archive.
    assert (counts.lists, counts.heads, counts.gets) == (3, 0, 0)
    assert 4 <= counts.ranged_gets <= 6
    assert store.stats.bytes < 300_000
    assert dataset.classes == ["ct", "mri"]
    assert dataset.shapes.tolist() == [[0, 4, 8, 8], [0, 64, 64, 64], [2, 3, 5, 5], [0, 3, 4, 4]]
    for i, key in enumerate(sorted(volumes)):
        sample = dataset[i]
        assert sample["path"] == s3_bucket.url_of(key)
        assert np.array_equal(sample["volume"].numpy(), volumes[key])
    assert s3_proxy.requests.heads == 0


def test_a_volume_manifest_url_reads_its_rows_from_the_store(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    volumes = put_volumes(fs, s3_bucket)
    fs.pipe(s3_bucket.path("scans/list.csv"), b"path,label\nct/a.npy,ct\nmri/b.npy,mri\nmri/gone.npy,mri\n")
    store = store_for(s3_proxy)
    source = Manifest(s3_bucket.url_of("scans/list.csv"))
    dataset = VolumeDataset(source, storage_options=store, progress=False)
    assert s3_proxy.requests.lists == 0
    assert len(dataset) == 2 and dataset.classes == ["ct", "mri"]
    assert [reason for path, reason in dataset.report.invalid if path.endswith("gone.npy")]
    assert np.array_equal(dataset[1]["volume"].numpy(), volumes["scans/mri/b.npy"])
    table = pa.table({"path": ["ct/a.npy"], "label": [0]})
    rows = VolumeDataset(
        Manifest(table, root=s3_bucket.url_of("scans")), storage_options=store, progress=False
    )
    assert np.array_equal(rows[0]["volume"].numpy(), volumes["scans/ct/a.npy"])


def test_a_volume_url_outside_the_manifest_root_is_refused(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    put_volumes(s3_server.filesystem(), s3_bucket)
    table = pa.table({"path": ["a.npy", s3_bucket.url_of("scans/mri/b.npy")]})
    with pytest.raises(PathOutsideRootError, match=r"row 1: path 's3://.*/scans/mri/b\.npy' is outside"):
        VolumeDataset(Manifest(table, root=s3_bucket.url_of("scans/ct")), storage_options=store_for(s3_proxy))
    assert s3_proxy.requests.total == 0


def test_a_truncated_npy_object_is_left_out_naming_it(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    put_volumes(fs, s3_bucket)
    fs.pipe(s3_bucket.path("scans/ct/cut.npy"), npy_bytes(np.zeros((4, 8, 8), np.int16))[:-10])
    dataset = VolumeDataset(s3_bucket.url_of("scans"), array="ct", storage_options=store_for(s3_proxy),
                            progress=False)
    assert len(dataset) == 4
    assert [path for path, _ in dataset.report.invalid] == [s3_bucket.url_of("scans/ct/cut.npy")]


# -- hyperspectral cubes ----------------------------------------------------------------------

SCENE = (200, 300, 32)  # lines, samples, bands: 3,840,000 bytes of int16


def scene() -> np.ndarray:
    return np.arange(np.prod(SCENE), dtype=np.int16).reshape(SCENE)


def put_envi(fs: Any, bucket: S3Bucket, tmp_path: Path, interleave: str) -> str:
    """An ENVI cube (header and data file) below ``scenes/``; the header's URL."""
    data = write_envi(str(tmp_path / f"{interleave}.img"), scene(), interleave=interleave)
    fs.put_file(data, bucket.path(f"scenes/{interleave}.img"))
    fs.put_file(data[: -len(".img")] + ".hdr", bucket.path(f"scenes/{interleave}.hdr"))
    return bucket.url_of(f"scenes/{interleave}.hdr")


@pytest.mark.parametrize("interleave", ["bsq", "bil", "bip"])
def test_a_patch_of_an_envi_url_is_ranged_gets_of_far_fewer_bytes_than_the_cube(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path, interleave: str
) -> None:
    header = put_envi(s3_server.filesystem(), s3_bucket, tmp_path, interleave)
    mask = np.zeros(SCENE[:2], np.int64)
    mask[40, 30], mask[0, 299] = 3, 5
    store = store_for(s3_proxy)
    patches = HyperspectralDataset(header, masks=mask, patch_size=9, storage_options=store)
    assert (s3_proxy.requests.gets, s3_proxy.requests.heads) == (0, 0)  # header and size: ranged
    s3_proxy.reset_counts()
    before = store.stats.bytes
    sample = patches[1]  # pixels in row order: (0, 299), then (40, 30)
    counts = s3_proxy.requests
    assert counts.total == counts.ranged_gets > 0
    assert store.stats.bytes - before < np.prod(SCENE) * 2 // 10
    expected = scene()[36:45, 26:35].transpose(2, 0, 1)
    assert sample["label"] == 3 and np.array_equal(sample["image"].numpy(), expected)
    edge = patches[0]["image"].numpy()  # reflected past the corner, as a local cube is
    local = HyperspectralDataset(str(tmp_path / f"{interleave}.img"), masks=mask, patch_size=9)
    assert np.array_equal(edge, local[0]["image"].numpy())


def test_an_envi_cube_url_is_found_from_its_data_file_and_its_size_is_checked(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    put_envi(fs, s3_bucket, tmp_path, "bip")
    store = store_for(s3_proxy)
    whole = HyperspectralDataset(s3_bucket.url_of("scenes/bip.img"), labels=[1], storage_options=store)
    assert np.array_equal(whole[0]["image"].numpy(), scene().transpose(2, 0, 1))
    fs.pipe(s3_bucket.path("scenes/bip.img"), b"\0" * 100)
    with pytest.raises(DecodeError, match=r"holds 100 bytes, but its header .* declares 3,840,000"):
        HyperspectralDataset(s3_bucket.url_of("scenes/bip.hdr"), labels=[1], storage_options=store)


def test_a_patch_of_an_hdf5_url_reads_its_chunks_by_ranged_gets(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    path = tmp_path / "scene.h5"
    mask = np.zeros(SCENE[:2], np.uint8)
    mask[60, 50] = 2
    with h5py.File(path, "w") as f:
        f.create_dataset("cube", data=scene(), chunks=(16, 16, SCENE[2]))
        f.create_dataset("labels", data=mask)
    s3_server.filesystem().put_file(str(path), s3_bucket.path("scenes/scene.h5"))
    store = store_for(s3_proxy)
    patches = HyperspectralDataset(
        s3_bucket.url_of("scenes/scene.h5"), masks="labels", patch_size=9, storage_options=store
    )
    s3_proxy.reset_counts()
    before = store.stats.bytes
    sample = patches[0]
    assert s3_proxy.requests.total == s3_proxy.requests.ranged_gets > 0
    assert store.stats.bytes - before < path.stat().st_size // 2
    assert np.array_equal(sample["image"].numpy(), scene()[56:65, 46:55].transpose(2, 0, 1))
    assert sample["label"] == 2


# -- tables and streams ----------------------------------------------------------------------


def test_a_table_url_is_one_get_from_the_store_storage_options_reach(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("meta/parts.csv"), b"id,price\n007,1.5\n012,0.25\n")
    store = store_for(s3_proxy)
    parts = TableDataset(s3_bucket.url_of("meta/parts.csv"), id_column="id", storage_options=store)
    assert [parts[0], len(parts)] == [{"id": "007", "price": 1.5}, 2]
    assert (s3_proxy.requests.object_gets, s3_proxy.requests.total) == (1, 1)
    with_options = TableDataset(s3_bucket.url_of("meta/parts.csv"), storage_options=s3_proxy.storage_options)
    assert len(with_options) == 2


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_stream_shards_on_a_custom_endpoint_are_read_with_storage_options(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, suffix: str
) -> None:
    fs = s3_server.filesystem()
    shards = []
    for part in range(3):
        values = [part * 10 + i for i in range(4)]
        rows = pa.table({"id": values})
        key = f"stream/part-{part}{suffix}"
        if suffix == ".parquet":
            buffer = pa.BufferOutputStream()
            pa_parquet.write_table(rows, buffer)
            fs.pipe(s3_bucket.path(key), buffer.getvalue().to_pybytes())
        elif suffix == ".csv":
            fs.pipe(s3_bucket.path(key), ("id\n" + "".join(f"{v}\n" for v in values)).encode())
        else:
            fs.pipe(s3_bucket.path(key), "".join(f'{{"id": {v}}}\n' for v in values).encode())
        shards.append(s3_bucket.url_of(key))
    stream = StreamDataset(shards, storage_options=s3_proxy.storage_options)
    assert sorted(record["id"] for record in stream) == [p * 10 + i for p in range(3) for i in range(4)]
    assert s3_proxy.requests.object_gets >= 3
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    assert sorted(record["id"] for record in loader) == [p * 10 + i for p in range(3) for i in range(4)]
    with pytest.raises(ConfigError, match="storage_options is a dict"):
        StreamDataset(shards, storage_options="endpoint")  # type: ignore[arg-type]


# -- the decoded cache -----------------------------------------------------------------------


def test_a_decoded_cache_of_a_url_dataset_builds_reopens_and_names_a_rewritten_object(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    keys = put_images(fs, s3_bucket, 6)
    store = store_for(s3_proxy)
    dataset = FolderDataset(s3_bucket.url_of("train"), storage_options=store, progress=False)
    cache = DecodedCache(dataset, tmp_path / "cache", progress=False)
    assert cache.report.built and len(cache) == 6
    assert np.array_equal(cache[3]["image"].numpy(), dataset[3]["image"].numpy())
    s3_proxy.reset_counts()
    again = DecodedCache(dataset, tmp_path / "cache", progress=False)
    counts = s3_proxy.requests
    # The fingerprint is one listing of the root (its first level and each class prefix), not a
    # HEAD per object, and nothing is read again.
    assert not again.report.built
    assert (counts.heads, counts.object_gets, counts.lists) == (0, 0, 3)
    fs.pipe(s3_bucket.path(keys[2]), jpeg(99, size=32))
    with pytest.raises(CacheError, match=r"1 file changed .*cat/002\.jpg.*size"):
        DecodedCache(dataset, tmp_path / "cache", rebuild=False, progress=False)
    fs.pipe(s3_bucket.path(keys[2]), jpeg(2))
    manifest = ManifestDataset(
        s3_bucket.url_of("train/manifest.csv"),
        fields=[Image("file"), Label("label")],
        storage_options=store,
        validate="none",
        progress=False,
    )
    built = DecodedCache(manifest, tmp_path / "from-manifest", progress=False)
    assert built.report.built
    rewritten = bytearray(jpeg(4))
    rewritten[-3] ^= 0xFF  # the same size, other bytes: another ETag
    fs.pipe(s3_bucket.path(keys[4]), bytes(rewritten))
    with pytest.raises(CacheError, match=r"1 file changed .*rewritten \(another ETag\)"):
        DecodedCache(manifest, tmp_path / "from-manifest", rebuild=False, progress=False)
