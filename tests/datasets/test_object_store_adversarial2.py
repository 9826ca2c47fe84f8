"""Adversarial review of the second half of the object-store support (issue #22): the object
cache, presigned GETs, RangedFile, the shared index under DDP, the CLI's storage options and the
manifest's ``bytes`` column. Each test reproduces a bug found in review and FAILS on the code as
reviewed; its comment says what is wrong and what the fix should be. They assert the behaviour the
docs promise (or that a user would need)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pa_parquet
import pytest
from test_object_store_adversarial import jpeg, root_of, store_for

from distributed import run_ranks
from s3proxy import FaultProxy
from s3server import S3Bucket, S3Server
from torchloom import FaultReport, FolderDataset, Image, Label, ManifestDataset, collate
from torchloom.errors import ObjectChangedError, UnreadableFileError
from torchloom.io import ObjectCache, ObjectStore
from torchloom.io.ranged_file import RangedFile, fetch_ranges
from torchloom.tools.storage import storage_option

RANK_TIMEOUT_S = 90.0


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pa_parquet.write_table(table, buffer)
    return buffer.getvalue()


def put_sized_manifest(fs: Any, bucket: S3Bucket, files: list[str], sizes: pa.Array) -> str:
    """A Parquet manifest of ``files`` (below ``train/``) with a ``bytes`` column; its URL."""
    table = pa.table({"file": files, "label": ["cat"] * len(files), "bytes": sizes})
    fs.pipe(bucket.path("train/manifest.parquet"), parquet_bytes(table))
    return bucket.url_of("train/manifest.parquet")


def open_manifest(url: str, proxy: FaultProxy, **options: Any) -> ManifestDataset:
    fields: list[Image | Label] = [Image("file"), Label("label")]
    return ManifestDataset(url, fields=fields, storage_options=store_for(proxy), progress=False, **options)


# -- the object cache ------------------------------------------------------------------------


# BUG (high): with a cache, a ranged GET from byte 0 is served the WHOLE object: _get() sends every
# start == 0 request to _get_cached(), which returns the cached entry (a hit on a known ETag, or the
# kept bytes after a 304 to its conditional GET) without cutting it to ``end``. So read_range(url,
# 0, 4) returns all 10 bytes, and fetch_ranges() (ENVI rows and bands) puts the whole object in
# place of its first span: wrong pixels in a patch, silently. Fix: in _get_cached, return
# data[:end] (size=len(data)) for a hit and for a 304 alike, as a 200 that ignored Range is cut.
def test_a_cached_object_serves_only_the_range_asked(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("train/a.bin"), b"0123456789")
    store = store_for(s3_proxy, cache=ObjectCache(tmp_path / "cache", max_bytes=1 << 20))
    url = s3_bucket.url_of("train/a.bin")
    first = root_of(s3_bucket, store)
    assert first.read(url, inside=first.url, max_bytes=None, too_large=None) == b"0123456789"
    again = root_of(s3_bucket, store)  # another dataset on the same cache: ETag not yet known
    assert again.read_range(url, 0, 4, inside=again.url) == b"0123"
    assert fetch_ranges(first, url, [(0, 2), (4, 6)]) == [b"01", b"45"]


# BUG (medium): a cache that cannot be written fails the read of an object that WAS fetched: with
# cache_dir emptied under a running job (a tmp cleaner, another job's `rm -rf`, a full disk, a
# read-only shared cache), ObjectCache.put raises FileNotFoundError/OSError from _get_cached,
# outside the retry rules; read_many turns it into that sample's error (a raw FileNotFoundError
# naming a temporary file, reported as a missing sample under on_error="skip") and read() raises
# it. Fix: a failure to keep an entry is the cache's, not the read's: catch OSError in put (or
# around it in _get_cached), count it in stats ("cache write failed") and return the bytes; re-make
# the incoming/ folder when it is gone.
def test_a_cache_that_cannot_be_written_does_not_fail_the_read(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("train/a.bin"), b"0123456789")
    store = store_for(s3_proxy, cache=ObjectCache(tmp_path / "cache", max_bytes=1 << 20))
    root = root_of(s3_bucket, store)
    shutil.rmtree(tmp_path / "cache")
    url = s3_bucket.url_of("train/a.bin")
    assert root.read_many([url], max_bytes=None, too_large=None) == [b"0123456789"]
    assert root.read(url, inside=root.url, max_bytes=None, too_large=None) == b"0123456789"


# -- RangedFile ------------------------------------------------------------------------------


# BUG (medium): an object that shrinks while a RangedFile reads it is truncated SILENTLY: the next
# ranged GET past the new end gets a 416, _attempts turns PAST_END into Fetched(b"") with no size
# and no ETag, ObjectRoot.checked has nothing to compare, and _fetch then sets the file's size to
# the read's start (200,000 here, though the object was 256,000 and is now 1,000). h5py or numpy
# read zeros or a short array from two versions mixed. Fix: a PAST_END read whose start lies below
# the size the root knows is an ObjectChangedError (the object is shorter than when first read);
# also take the size from a 416's "Content-Range: bytes */N" and never shrink a known size.
def test_a_ranged_file_names_an_object_that_shrank_mid_read(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    fs.pipe(s3_bucket.path("train/a.bin"), bytes(range(256)) * 1000)
    url = s3_bucket.url_of("train/a.bin")
    handle = RangedFile(root_of(s3_bucket, store_for(s3_proxy)), url)
    assert handle.read(4) == b"\x00\x01\x02\x03" and handle.size == 256_000
    fs.pipe(s3_bucket.path("train/a.bin"), b"x" * 1000)  # rewritten, shorter, mid-read
    handle.seek(200_000)
    with pytest.raises(ObjectChangedError):
        handle.read(10)


# BUG (low): a first read past the end of an object of unknown size sets the wrong size: the 416
# comes back as Fetched(b"") with no size, and _fetch takes "fewer bytes than asked" to mean the
# end is at the read's start, so a 50-byte object reports size 100 and seek(0, SEEK_END) goes to
# 100 (a reader that seeks from the end, as zip and h5py do, reads garbage offsets). Fix: on an
# empty past-the-end answer with no size, learn the size (the 416's Content-Range, or a HEAD) and
# never set it from the start of an empty read.
def test_a_ranged_file_knows_its_size_after_a_first_read_past_the_end(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("train/a.bin"), b"x" * 50)
    handle = RangedFile(root_of(s3_bucket, store_for(s3_proxy)), s3_bucket.url_of("train/a.bin"))
    handle.seek(100)
    assert handle.read(10) == b""
    assert handle.size == 50 and handle.seek(0, 2) == 50


# BUG (low): a closed RangedFile goes on reading: readinto() never checks self.closed, so read()
# after close() sends a request (or returns b"") where every Python file raises "ValueError: I/O
# operation on closed file" (a reader that closes too early goes unnoticed). Fix: call
# self._checkClosed() at the top of readinto, seek and tell (io.RawIOBase offers it).
def test_a_closed_ranged_file_refuses_reads(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("train/a.bin"), b"0123456789")
    handle = RangedFile(root_of(s3_bucket, store_for(s3_proxy)), s3_bucket.url_of("train/a.bin"))
    handle.close()
    with pytest.raises(ValueError, match="closed file"):
        handle.read(2)


# -- presigned GETs --------------------------------------------------------------------------


# BUG (low): presigned GETs classify an expired session token otherwise than botocore's path: S3
# answers 400 ExpiredToken (temporary STS credentials outliving a long job), which s3fs maps to
# PermissionError ("access denied ...: check storage_options' credentials"), but a presigned GET's
# StoreResponseError(400, "ExpiredToken") falls to "other": "StoreResponseError: HTTP 400
# ExpiredToken", no hint. Fix: in classify, treat the credential codes s3fs maps to PermissionError
# (ExpiredToken, InvalidToken, TokenRefreshRequired, AccountProblem, InvalidSecurity, NotSignedUp)
# as DENIED, whatever the status.
def test_an_expired_token_is_denied_on_the_presigned_path_as_with_botocore(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("train/a.bin"), b"0123456789")
    root = root_of(s3_bucket, store_for(s3_proxy, presigned_gets=True))
    s3_proxy.fail_next(1, 400, "ExpiredToken")
    with pytest.raises(UnreadableFileError, match="check storage_options' credentials"):
        root.read(s3_bucket.url_of("train/a.bin"), inside=root.url, max_bytes=None, too_large=None)


# -- the shared index under DDP ----------------------------------------------------------------


def _folders_in_rank_order(rank: int, world_size: int, urls: list[str], options: dict[str, Any]) -> list[Any]:
    """Build a FolderDataset of each URL, rank 1 in the reverse order; per URL (in ``urls``'s
    order) the root and classes it got, or the error its construction raised."""
    store = ObjectStore(options, backoff=0.01)
    built: dict[str, Any] = {}
    for url in urls if rank == 0 else urls[::-1]:
        try:
            dataset = FolderDataset(url, storage_options=store, progress=False)
            built[url] = {"root": dataset.root, "classes": dataset.classes}
        except Exception as error:  # the test compares what each rank raised
            built[url] = {"error": type(error).__name__}
    return [built[url] for url in urls]


# BUG (high): ranks that build their datasets in different orders get one another's indexes
# SILENTLY: built_once broadcasts a bare pickled payload, so rank 1's FolderDataset("train")
# receives rank 0's index of "val" (root "…/val", classes ["bird"]) and trains on the validation
# set; only a type mismatch is noticed. The docs ask for the same order, but nothing checks it, and
# the ways to break it are common (a val dataset built first on some ranks, a conditional dataset).
# Fix: broadcast (what, a fingerprint of the dataset's arguments: class, root/manifest, split,
# extensions, validate) with the payload and raise DistributedSetupError on a rank whose own
# differs, naming both datasets.
def test_ranks_building_datasets_in_different_orders_never_swap_indexes(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(
        {
            s3_bucket.path("train/cat/1.jpg"): jpeg(1),
            s3_bucket.path("train/dog/2.jpg"): jpeg(2),
            s3_bucket.path("val/bird/3.jpg"): jpeg(3),
        }
    )
    urls = [s3_bucket.url_of("train"), s3_bucket.url_of("val")]
    ranks = run_ranks(_folders_in_rank_order, 2, urls, s3_proxy.storage_options, timeout=RANK_TIMEOUT_S)
    for outcome, url in zip(ranks[1], urls, strict=True):
        assert outcome.get("error") == "DistributedSetupError" or outcome["root"] == url


def _folder_with_a_session(rank: int, world_size: int, url: str, options: dict[str, Any]) -> Any:
    import aiobotocore.session  # s3fs's own dependency

    store = ObjectStore({**options, "session": aiobotocore.session.AioSession()}, backoff=0.01)
    try:
        return FolderDataset(url, storage_options=store, progress=False).classes
    except Exception as error:  # the test compares what each rank raised
        return f"{type(error).__name__}: {error}"


# BUG (medium): the shared index broadcasts the dataset's ObjectRoot WITH its ObjectStore (every
# storage option, credentials included, pickled to every rank, only to be replaced by bound_to),
# so storage options that do not pickle break DDP alone: an s3fs ``session=`` (an AioSession, for
# a profile or custom credentials) works without a process group (and in fork workers) but makes
# rank 0's pickle.dumps fail, and every rank raises "Can't pickle local object". Fix: broadcast the
# index without the store (ObjectRoot's url, confined and sizes/ETags only; bound_to attaches the
# rank's own store), which also keeps credentials out of the broadcast.
def test_an_unpicklable_storage_option_does_not_break_the_shared_index(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe({s3_bucket.path("train/cat/1.jpg"): jpeg(1)})
    url, options = s3_bucket.url_of("train"), s3_proxy.storage_options
    assert _folder_with_a_session(0, 1, url, options) == ["cat"]  # alone: it works
    ranks = run_ranks(_folder_with_a_session, 2, url, options, timeout=RANK_TIMEOUT_S)
    assert ranks == [["cat"], ["cat"]]


# -- the command line's storage options ---------------------------------------------------------


# BUG (medium): `--storage-option secret=12345` (or key=, token=) is read as JSON, so the secret is
# the int 12345 and every object's read fails with "UnreadableFileError: ...: AttributeError:
# 'int' object has no attribute 'encode'" (botocore's "TypeError: sequence item 0: expected str"
# without presigned GETs): a usage error surfacing as a per-sample store failure, skipped under
# on_error="skip". "NaN", "Infinity", "1e3" and "null" are turned too. Fix: keep the values of the
# options that are text by nature (key, secret, token, profile, region_name, endpoint_url) as text;
# and have ObjectStore refuse a non-str key/secret/token with a ConfigError naming the option.
def test_a_numeric_secret_on_the_command_line_stays_text() -> None:
    assert storage_option("secret=12345") == ("secret", "12345")
    assert storage_option("key=NaN") == ("key", "NaN")


# -- the manifest's bytes column --------------------------------------------------------------


# BUG (medium): a `bytes` column of an unsigned type (uint64: what numpy's stat sizes or a pandas
# frame of them write to Parquet) crashes construction with an untyped "OverflowError: can't convert
# negative value to unsigned int": _expect_sizes calls fill_null(-1) on it. Fix: cast an unsigned
# column to int64 first (pyarrow's checked cast; a value past 2**63 a ManifestError naming the
# row), then fill nulls.
def test_an_unsigned_bytes_column_gives_the_sizes(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs, data = s3_server.filesystem(), jpeg(1)
    fs.pipe(s3_bucket.path("train/cat/1.jpg"), data)
    url = put_sized_manifest(fs, s3_bucket, ["cat/1.jpg"], pa.array([len(data)], pa.uint64()))
    dataset = open_manifest(url, s3_proxy, validate="exists")
    assert len(dataset) == 1


# BUG (low): a `bytes` column with no value at all (every size unknown: a CSV column left empty, a
# JSONL of nulls) has Arrow type null, and the manifest is refused ("it holds null: fix it or rename
# the column"), though null is how a row says "size unknown" and one null among numbers is taken.
# Fix: treat a column of type null as holding no sizes (vouch for no row).
def test_a_bytes_column_of_nulls_means_no_sizes_known(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    fs.pipe(s3_bucket.path("train/cat/1.jpg"), jpeg(1))
    url = put_sized_manifest(fs, s3_bucket, ["cat/1.jpg"], pa.array([None], pa.null()))
    assert len(open_manifest(url, s3_proxy, validate="exists")) == 1


# With a `bytes` column, validate="exists" trusts the manifest: no request per row (and no
# listing: a manifest's dataset lists nothing). An object deleted since the manifest was written
# is then found at its read, skipped and reported under on_error="skip", as the guide says.
def test_validate_exists_with_a_bytes_column_finds_a_missing_object_at_its_read(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs, data = s3_server.filesystem(), jpeg(1)
    fs.pipe(s3_bucket.path("train/cat/1.jpg"), data)
    files = ["cat/1.jpg", "cat/2.jpg"]  # cat/2.jpg was deleted after the manifest was written
    url = put_sized_manifest(fs, s3_bucket, files, pa.array([len(data), 1234], pa.int64()))
    dataset = open_manifest(url, s3_proxy, validate="exists", on_error="skip")
    assert len(dataset) == 2 and s3_proxy.requests.total == 1  # the manifest alone
    report = FaultReport()
    batches = list(report.watch([collate(dataset.__getitems__([0, 1]))]))
    assert len(batches[0]["path"]) == 1
    (skipped,) = report.skipped
    assert skipped.path == s3_bucket.url_of("train/cat/2.jpg") and skipped.error == "MissingFileError"
