"""Datasets on a real S3 server (SeaweedFS on loopback), behind a proxy that counts every request
and injects the faults real stores produce: throttling, resets, stalls, objects deleted or
rewritten mid-epoch, a volume server that dies and comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import simplejpeg
from torch.utils.data import DataLoader

from s3proxy import FaultProxy
from s3server import S3Bucket, S3Server
from torchloom import FaultReport, FolderDataset, Image, Label, ManifestDataset, collate
from torchloom.errors import MissingFileError, ObjectChangedError, PathOutsideRootError, UnreadableFileError
from torchloom.faults import Skipped
from torchloom.io import ObjectCache, ObjectStore
from torchloom.testing import synthetic_image

CLASSES = ("cat", "dog")


def jpeg(seed: int, size: int = 24) -> bytes:
    return simplejpeg.encode_jpeg(synthetic_image(np.random.default_rng(seed), size, size, seed % 2))


def put_images(fs: Any, bucket: S3Bucket, count: int, prefix: str = "train") -> list[str]:
    """``count`` JPEGs in class folders below ``prefix``, and a manifest of them; their keys."""
    keys = [f"{prefix}/{CLASSES[i % 2]}/{i:03d}.jpg" for i in range(count)]
    fs.pipe({bucket.path(key): jpeg(i) for i, key in enumerate(keys)})
    rows = "\n".join(f"{key.split('/', 1)[1]},{key.split('/')[1]}" for key in keys)
    fs.pipe(bucket.path(f"{prefix}/manifest.csv"), f"file,label\n{rows}\n".encode())
    return keys


def store_for(proxy: FaultProxy, **settings: Any) -> ObjectStore:
    settings.setdefault("backoff", 0.01)
    return ObjectStore(proxy.storage_options, **settings)


def manifest(bucket: S3Bucket, store: ObjectStore, **options: Any) -> ManifestDataset:
    options.setdefault("progress", False)
    return ManifestDataset(
        bucket.url_of("train/manifest.csv"),
        fields=[Image("file"), Label("label")],
        storage_options=store,
        **options,
    )


def test_a_manifest_dataset_makes_no_listing_and_one_get_per_sample(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    keys = put_images(s3_server.filesystem(), s3_bucket, 12)
    store = store_for(s3_proxy)
    dataset = manifest(s3_bucket, store, validate="none")
    assert s3_proxy.requests.total == 1 and s3_proxy.requests.object_gets == 1  # the manifest alone
    batch = collate(dataset.__getitems__(list(range(12))))
    counts = s3_proxy.requests
    assert (counts.lists, counts.heads, counts.object_gets) == (0, 0, 13)
    assert batch["image"].shape == (12, 3, 24, 24)
    assert batch["label"].tolist() == [i % 2 for i in range(12)]
    assert batch["path"] == [s3_bucket.url_of(key) for key in keys]


def test_header_validation_is_one_ranged_get_per_row_and_reads_stay_one_get(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 8)
    s3_server.filesystem().rm(s3_bucket.path("train/cat/002.jpg"))
    store = store_for(s3_proxy)
    with pytest.warns(UserWarning, match="1 row\\(s\\) name files that do not exist"):
        dataset = manifest(s3_bucket, store)
    assert len(dataset) == 7
    assert any("cat/002.jpg" in path for path, _ in dataset.report.invalid)
    counts = s3_proxy.requests
    assert (counts.lists, counts.heads, counts.ranged_gets) == (0, 0, 8)
    s3_proxy.reset_counts()
    for i in range(len(dataset)):
        dataset[i]
    assert s3_proxy.requests.object_gets == 7 and s3_proxy.requests.heads == 0


def test_a_folder_dataset_on_a_bucket_lists_once_and_walks_by_the_same_rules(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    put_images(fs, s3_bucket, 6)
    fs.pipe(
        {
            s3_bucket.path("train/.DS_Store"): b"x",
            s3_bucket.path("train/__MACOSX/cat/._000.jpg"): b"x",
            s3_bucket.path("train/cat/notes.txt"): b"x",
            s3_bucket.path("train/dog/deep/er/009.JPG"): jpeg(9),
        }
    )
    dataset = FolderDataset(s3_bucket.url + "/train/", storage_options=store_for(s3_proxy), validate="exists")
    assert dataset.classes == ["cat", "dog"] and len(dataset) == 7
    assert dataset.root == s3_bucket.url + "/train"
    ignored = {path.rsplit("/", 1)[1] for path, _ in dataset.report.ignored}
    assert ignored == {".DS_Store", "__MACOSX", "notes.txt", "manifest.csv"}
    counts = s3_proxy.requests
    assert counts.object_gets == 0 and counts.heads == 0 and counts.lists >= 1
    assert dataset[6]["path"].endswith("dog/deep/er/009.JPG") and dataset[6]["label"] == 1


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ("../escape.jpg", "climbs with '..'"),
        ("cat/%2e%2E/%2e%2e/escape.jpg", "climbs with '..'"),
        ("cat/%2fescape.jpg", "hides a '/'"),
        ("cat//1.jpg", "empty segment"),
        ("/train/cat/1.jpg", "is absolute"),
        ("s3://another-bucket/train/cat/1.jpg", "another bucket"),
        ("gs://BUCKET/train/cat/1.jpg", "another scheme"),
        ("s3://BUCKET/trainer/cat/1.jpg", "outside the root prefix"),
    ],
)
def test_a_row_leading_outside_the_root_prefix_is_refused_naming_it(
    s3_server: S3Server, s3_bucket: S3Bucket, row: str, why: str
) -> None:
    table = pa.table({"file": ["cat/000.jpg", row.replace("BUCKET", s3_bucket.name)]})
    with pytest.raises(PathOutsideRootError, match=f"manifest row 1: .*{why}"):
        ManifestDataset(
            table, root=s3_bucket.url + "/train", fields=[Image("file")], progress=False,
            storage_options=s3_server.storage_options,
        )


@pytest.mark.parametrize("presigned", [True, False], ids=["presigned GETs", "get_object"])
def test_throttling_resets_and_stalls_are_retried_and_counted(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, presigned: bool
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 4)
    options = {**s3_proxy.storage_options, "config_kwargs": {"read_timeout": 1, "connect_timeout": 1}}
    store = ObjectStore(options, backoff=0.01, presigned_gets=presigned)
    dataset = manifest(s3_bucket, store, validate="none")
    s3_proxy.fail_next(3, 503, "SlowDown", path_glob="*/cat/*")
    s3_proxy.drop_next(2, path_glob="*/dog/001.jpg")  # aiohttp resends once after a reset, unseen
    s3_proxy.fail_next(1, 500, "InternalError", path_glob="*/dog/003.jpg")
    batch = collate(dataset.__getitems__([0, 1, 2, 3]))
    assert batch["image"].shape[0] == 4
    s3_proxy.stall_next(1, 3.0, path_glob="*/cat/000.jpg")
    assert dataset[0]["image"].shape == (3, 24, 24)
    retried = store.stats.retried
    assert retried["SlowDown"] == 3 and retried["InternalError"] == 1
    assert retried["connection lost"] == 1 and retried["timeout"] == 1, retried
    assert "retried:" in store.stats.summary() and not store.stats.failed


def test_a_store_that_keeps_failing_is_a_typed_error_or_a_reported_skip(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 4)
    store = store_for(s3_proxy, retries=2)
    raising = manifest(s3_bucket, store, validate="none")
    s3_proxy.fail_next(3, 503, "SlowDown", path_glob="*/cat/000.jpg")
    with pytest.raises(Exception, match=r"cat/000\.jpg") as caught:
        raising[0]
    assert isinstance(caught.value.__cause__, UnreadableFileError)
    assert "failed 3 times (SlowDown" in str(caught.value.__cause__)
    skipping = manifest(s3_bucket, store, validate="none", on_error="skip")
    s3_proxy.fail_next(3, 503, "SlowDown", path_glob="*/dog/001.jpg")
    report = FaultReport()
    batches = list(report.watch([collate(skipping.__getitems__([0, 1, 2, 3]))]))
    assert batches[0]["image"].shape[0] == 3
    assert [(s.index, s.error) for s in report.skipped] == [(1, "UnreadableFileError")]


def test_an_object_deleted_mid_epoch_is_skipped_and_reported_by_url(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    keys = put_images(fs, s3_bucket, 6)
    dataset = manifest(s3_bucket, store_for(s3_proxy), on_error="skip")
    loader = DataLoader(dataset, batch_size=3, collate_fn=collate)
    report = FaultReport()
    seen = []
    for number, batch in enumerate(report.watch(loader)):
        seen += batch["path"]
        if number == 0:
            fs.rm(s3_bucket.path(keys[4]))
    assert len(seen) == 5 and s3_bucket.url_of(keys[4]) not in seen
    (skipped,) = report.skipped
    assert skipped.path == s3_bucket.url_of(keys[4]) and skipped.error == "MissingFileError"
    assert "not in the store" in skipped.reason


def test_an_object_rewritten_since_indexing_is_named_never_mixed_in(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    keys = put_images(fs, s3_bucket, 4)
    dataset = manifest(s3_bucket, store_for(s3_proxy))  # the header reads see each size and ETag
    fs.pipe(s3_bucket.path(keys[1]), jpeg(100, size=32))  # another size
    original = fs.cat(s3_bucket.path(keys[2]))
    fs.pipe(s3_bucket.path(keys[2]), original[:-2] + b"\x00\xd9")  # same size, other bytes: another ETag
    with pytest.raises(Exception, match=r"001\.jpg") as resized:
        dataset[1]
    assert isinstance(resized.value.__cause__, ObjectChangedError)
    assert "bytes when indexed" in str(resized.value.__cause__)
    with pytest.raises(Exception, match=r"002\.jpg") as rewritten:
        dataset[2]
    assert isinstance(rewritten.value.__cause__, ObjectChangedError)
    assert "ETag" in str(rewritten.value.__cause__)
    assert dataset[0]["image"].shape == (3, 24, 24)


def test_reads_fail_while_the_volume_server_is_down_and_work_once_it_is_back(
    s3_server: S3Server, s3_bucket: S3Bucket
) -> None:
    put_images(s3_server.filesystem(), s3_bucket, 4)
    store = ObjectStore(
        {**s3_server.storage_options, "config_kwargs": {"read_timeout": 2, "connect_timeout": 1}},
        retries=1,
        backoff=0.01,
    )
    dataset = manifest(s3_bucket, store, validate="none", on_error="skip")
    before = dataset[0]["image"]
    s3_server.kill_volume()
    try:
        down = dataset[1]
        assert isinstance(down, Skipped) and down.error in ("UnreadableFileError", "MissingFileError")
    finally:
        s3_server.start_volume()
    assert (dataset[0]["image"] == before).all()
    assert dataset[1]["image"].shape == (3, 24, 24)


def test_dataloader_workers_read_every_sample_once_from_the_store(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    keys = put_images(s3_server.filesystem(), s3_bucket, 10)
    dataset = manifest(s3_bucket, store_for(s3_proxy), validate="none")
    loader = DataLoader(dataset, batch_size=4, collate_fn=collate, num_workers=2)
    paths = [path for batch in loader for path in batch["path"]]
    assert sorted(paths) == sorted(s3_bucket.url_of(key) for key in keys)
    assert s3_proxy.requests.object_gets == 1 + 10 and s3_proxy.requests.heads == 0


def test_a_missing_manifest_names_its_url(s3_server: S3Server, s3_bucket: S3Bucket) -> None:
    with pytest.raises(MissingFileError, match=r"manifest\.csv' is not in the store"):
        manifest(s3_bucket, ObjectStore(s3_server.storage_options))


def test_an_object_cache_serves_the_second_epoch_and_asks_the_store_in_a_new_process(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    keys = put_images(fs, s3_bucket, 8)
    cache = ObjectCache(tmp_path / "objects", max_bytes=1 << 20)
    dataset = manifest(s3_bucket, store_for(s3_proxy, cache=cache), validate="none")
    first = collate(dataset.__getitems__(list(range(8))))
    s3_proxy.reset_counts()
    again = collate(dataset.__getitems__(list(range(8))))
    assert s3_proxy.requests.total == 0  # every ETag known, every object kept
    assert (again["image"] == first["image"]).all()
    # A new store and dataset (another process, a later run): one conditional GET each, no bytes.
    store = store_for(s3_proxy, cache=ObjectCache(tmp_path / "objects", max_bytes=1 << 20))
    later = manifest(s3_bucket, store, validate="none")
    fs.pipe(s3_bucket.path(keys[3]), jpeg(50))  # rewritten: the store sends it anew
    s3_proxy.reset_counts()
    batch = collate(later.__getitems__(list(range(8))))
    assert s3_proxy.requests.object_gets == 8
    assert store.stats.requests["conditional get"] == 8 + 1  # and the manifest, kept too
    assert store.stats.bytes == len(fs.cat(s3_bucket.path(keys[3])))
    assert not (batch["image"][3] == first["image"][3]).all()  # the new version, not the kept one
    assert (batch["image"][:3] == first["image"][:3]).all()


def test_an_object_cache_stays_under_max_bytes(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    fs = s3_server.filesystem()
    put_images(fs, s3_bucket, 12)
    one = len(fs.cat(s3_bucket.path("train/cat/000.jpg")))
    cache = ObjectCache(tmp_path / "objects", max_bytes=4 * one)
    dataset = manifest(s3_bucket, store_for(s3_proxy, cache=cache), validate="none", on_error="raise")
    for i in range(12):
        dataset[i]
    assert 0 < cache.size() <= 4 * one + one  # evicted in steps of max_bytes / 16, past the bound
    assert cache.evict() >= 0 and cache.size() <= 4 * one


def test_dataloader_workers_share_one_object_cache(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    keys = put_images(s3_server.filesystem(), s3_bucket, 12)
    cache = ObjectCache(tmp_path / "objects", max_bytes=1 << 20)
    dataset = manifest(s3_bucket, store_for(s3_proxy, cache=cache), validate="exists")
    s3_proxy.reset_counts()
    for _ in range(2):  # two epochs, two worker processes each, one cache folder
        loader = DataLoader(dataset, batch_size=4, collate_fn=collate, num_workers=2)
        paths = [path for batch in loader for path in batch["path"]]
        assert sorted(paths) == sorted(s3_bucket.url_of(key) for key in keys)
    assert s3_proxy.requests.object_gets == 12  # the first epoch's; the second is served by the cache
    objects = sum(len(s3_server.filesystem().cat(s3_bucket.path(key))) for key in keys)
    assert cache.size() == objects + len(s3_server.filesystem().cat(s3_bucket.path("train/manifest.csv")))
