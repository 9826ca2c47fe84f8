"""Adversarial review of the object-store support (issue #22): each test is a reproduction of a
bug found in review and FAILS on the code as reviewed; its comment says what is wrong and what the
fix should be. They assert the behaviour the docs promise (or that a user would need)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import simplejpeg

from s3proxy import FaultProxy
from s3server import S3Bucket, S3Server
from torchloom import FolderDataset, Image, Label, ManifestDataset
from torchloom.errors import MissingFileError, ObjectChangedError, UnsafeFileError
from torchloom.io import ObjectRoot, ObjectStore
from torchloom.testing import synthetic_image


def jpeg(seed: int, size: int = 24) -> bytes:
    return simplejpeg.encode_jpeg(synthetic_image(np.random.default_rng(seed), size, size, seed % 2))


def store_for(proxy: FaultProxy, **settings: Any) -> ObjectStore:
    settings.setdefault("backoff", 0.01)
    return ObjectStore(proxy.storage_options, **settings)


def root_of(bucket: S3Bucket, store: ObjectStore, prefix: str = "train") -> ObjectRoot:
    return ObjectRoot(bucket.url_of(prefix), store)


# BUG (medium): s3fs.split_path() cuts a key at "?versionId=", so the row key "a.bin?versionId=1"
# silently reads the object "a.bin" (another object, passing confinement). Fix: in s3_get, build
# Bucket/Key from the URL ourselves (split at the first "/"), and refuse or escape "?versionId=" in
# keys unless storage_options asks for version_aware.
def test_key_with_versionid_text_is_refused_never_read_as_another_object(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    fs.pipe({s3_bucket.path("train/a.bin"): b"AAAA", s3_bucket.path("train/a.bin?versionId=1"): b"BBBB"})
    root = root_of(s3_bucket, store_for(s3_proxy))
    url = s3_bucket.url_of("train/a.bin?versionId=1")
    with pytest.raises(UnsafeFileError, match=r"names an object version \('\?versionId='\)"):
        root.read(url, inside=root.url, max_bytes=None, too_large=None)
    assert s3_proxy.requests.total == 0


# BUG (medium): outside_reason() lower-cases the scheme, so "S3://bucket/train/a.bin" passes
# confinement (and a manifest row so spelled is accepted at construction), but the read passes the
# URL unchanged to s3fs, which does not strip "S3://": botocore raises ParamValidationError (bucket
# "S3:"), classified "other" and raised as a bug. Fix: normalise the URL (scheme lower-cased) once,
# in _resolve_key/ObjectRoot._check, and read the normalised URL.
def test_uppercase_scheme_row_is_read_or_refused_not_a_crash(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("train/a.bin"), b"AAAA")
    root = root_of(s3_bucket, store_for(s3_proxy))
    url = "S3://" + s3_bucket.path("train/a.bin")
    assert root.read(url, inside=root.url, max_bytes=None, too_large=None) == b"AAAA"


# BUG (high): ObjectStore.get_many() keeps only OSError/UnsupportedURLError per request; any other
# exception from one request (here ParamValidationError; also any non-OSError a store library
# raises) propagates out of asyncio.gather and kills the whole batch in getitems_into, which runs
# OUTSIDE the fault policy, so on_error="skip" cannot skip it and the 63 good samples are lost.
# Fix: per-request results for every store-side failure (wrap classify()=="other" from the store
# call as UnreadableFileError naming the URL), or fall back to per-sample reads on a batch error.
def test_uppercase_scheme_in_a_batch_fails_that_sample_only(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("train/a.bin"), b"AAAA")
    root = root_of(s3_bucket, store_for(s3_proxy))
    good = s3_bucket.url_of("train/a.bin")
    results = root.read_many([good, "S3://" + s3_bucket.path("train/a.bin")], max_bytes=None, too_large=None)
    assert results[0] == b"AAAA"


# BUG (high): a zero-byte "folder marker" object ("train/cat/", what the S3 console's "Create
# folder" and many sync tools write) makes FolderDataset construction crash with IndexError in
# walk.resolve (name[0] of ""): PrefixListing turns "train/cat/" into an entry named "".
# Fix: in PrefixListing (or list_below) drop keys ending in "/" and the root key itself.
def test_folder_markers_are_not_samples_or_reported_entries(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    fs.pipe({s3_bucket.path("train/cat/1.jpg"): jpeg(1), s3_bucket.path("train/dog/2.jpg"): jpeg(2)})
    fs.pipe({s3_bucket.path("train/"): b"", s3_bucket.path("train/cat/"): b""})  # console "folders"
    dataset = FolderDataset(s3_bucket.url_of("train"), storage_options=store_for(s3_proxy), progress=False)
    assert dataset.classes == ["cat", "dog"] and len(dataset) == 2


# BUG (medium): an object whose key equals a prefix ("train/cat" beside "train/cat/1.jpg") replaces
# the folder entry in PrefixListing (dict key "cat" overwritten / setdefault keeps the file), so the
# whole class "cat" and its images vanish silently (classes == ["dog"]). Fix: keep folders and
# objects apart (an object "cat" and a prefix "cat/" are two entries; report the object as ignored).
def test_an_object_named_like_a_class_folder_does_not_hide_the_class(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    fs = s3_server.filesystem()
    fs.pipe(
        {
            s3_bucket.path("train/cat"): b"not a folder",
            s3_bucket.path("train/cat/1.jpg"): jpeg(1),
            s3_bucket.path("train/dog/2.jpg"): jpeg(2),
        }
    )
    dataset = FolderDataset(s3_bucket.url_of("train"), storage_options=store_for(s3_proxy), progress=False)
    assert dataset.classes == ["cat", "dog"] and len(dataset) == 2


# BUG (low): for an empty prefix s3fs ls raises FileNotFoundError, so the user gets "<prefix> is not
# in the store (no such object): check the URL, or whether it was deleted", naming a prefix as if it
# were an object; PrefixListing's "holds no objects: check the bucket and prefix (and endpoint and
# credentials)" is dead code on S3. Fix: catch MissingFileError in PrefixListing and raise its own.
def test_an_empty_prefix_is_a_missing_file_error(
    s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    s3_server.filesystem().pipe(s3_bucket.path("other/cat/1.jpg"), jpeg(1))
    with pytest.raises(MissingFileError, match="holds no objects"):
        FolderDataset(s3_bucket.url_of("train"), storage_options=store_for(s3_proxy), progress=False)


# validate="exists" records each object's size and ETag at construction (its probe is a one-byte
# GET whose response names the version), so a change after it is named; with validate="none"
# nothing is known before the first read, as the guide says.
@pytest.mark.parametrize("validate", ["exists", "header"])
def test_rewritten_before_first_read_with_validate_none_is_named(
    validate: str, s3_server: S3Server, s3_proxy: FaultProxy, s3_bucket: S3Bucket
) -> None:
    # The guide: "an object rewritten since the dataset was built (another size or ETag) ->
    # ObjectChangedError: its new bytes are never mixed in silently".
    fs = s3_server.filesystem()
    fs.pipe({s3_bucket.path("train/cat/1.jpg"): jpeg(1)})
    fs.pipe(s3_bucket.path("train/manifest.csv"), b"file,label\ncat/1.jpg,cat\n")
    dataset = ManifestDataset(
        s3_bucket.url_of("train/manifest.csv"),
        fields=[Image("file"), Label("label")],
        storage_options=store_for(s3_proxy),
        validate=validate,
        progress=False,
    )
    fs.pipe(s3_bucket.path("train/cat/1.jpg"), jpeg(7, size=32))
    with pytest.raises(Exception) as raised:
        dataset[0]
    assert isinstance(raised.value.__cause__, ObjectChangedError) or isinstance(
        raised.value, ObjectChangedError
    )
