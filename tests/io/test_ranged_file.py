"""RangedFile's blocks: a readahead that doubles on sequential reads and starts small after a seek,
header blocks held, and bytes always those of the object, read in any order."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator

import fsspec
import numpy as np
import pytest

from torchloom.io import ObjectRoot, ObjectStore
from torchloom.io.ranged_file import BLOCK_BYTES, MAX_READAHEAD_BYTES, RangedFile

MIB = 1 << 20


@pytest.fixture
def bucket() -> Iterator[str]:
    name = f"memory://ranged-{uuid.uuid4().hex[:8]}"
    yield name
    fsspec.filesystem("memory").rm(name, recursive=True)  # the memory filesystem outlives the test


def put(bucket: str, size: int) -> tuple[ObjectRoot, str, bytes]:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    url = f"{bucket}/object.bin"
    fsspec.filesystem("memory").pipe(url, data)
    return ObjectRoot(bucket, ObjectStore()), url, data


def test_a_sequential_read_doubles_each_fetch_up_to_the_cap(bucket: str) -> None:
    root, url, data = put(bucket, 20 * MIB)
    read = bytearray()
    with RangedFile(root, url) as handle:
        while chunk := handle.read(32 << 10):  # as PyAV reads a file object
            read += chunk
    assert read == data
    # 64 KiB, 128 KiB, ... 8 MiB (16,320 KiB in 8 GETs), then one of the last 4,160 KiB.
    doubling = [BLOCK_BYTES << step for step in range(8)]
    assert doubling[-1] == MAX_READAHEAD_BYTES and sum(doubling) < len(data) <= sum(doubling) + doubling[-1]
    assert root.store.stats.requests["ranged get"] == 9
    assert root.store.stats.bytes == len(data)  # nothing past the end asked for


def test_a_seek_starts_small_again_and_a_short_skip_still_reads_ahead(bucket: str) -> None:
    root, url, data = put(bucket, 16 * MIB)
    stats = root.store.stats
    with RangedFile(root, url) as handle:
        handle.read(MIB)
        before = stats.bytes
        handle.seek(10 * MIB)
        assert handle.read(1000) == data[10 * MIB : 10 * MIB + 1000]
        assert stats.bytes - before == BLOCK_BYTES
        # A skip forward of less than a block past the one just read (a demuxer passing another
        # stream's packets) continues the run: twice the block.
        skip_to = 10 * MIB + BLOCK_BYTES + 1000
        handle.seek(skip_to)
        assert handle.read(10) == data[skip_to : skip_to + 10]
        assert stats.bytes - before == 3 * BLOCK_BYTES


def test_the_header_blocks_read_at_an_open_are_held_for_later_reads(bucket: str) -> None:
    root, url, data = put(bucket, 4 * MIB)
    stats = root.store.stats
    with RangedFile(root, url) as handle:
        handle.read(100)  # an MP4's ftyp, a Matroska's EBML header
        handle.seek(-1000, 2)
        handle.read()  # a moov at the end
        handle.seek(MIB)
        handle.read(BLOCK_BYTES * 8)  # the media, sequentially
        gets = stats.requests["ranged get"]
        # The track header is looked up after decoding: both header blocks are still held.
        handle.seek(20)
        assert handle.read(16) == data[20:36]
        handle.seek(len(data) - 500)
        assert handle.read(16) == data[-500:-484]
        assert stats.requests["ranged get"] == gets


def test_reads_in_any_order_return_the_object_bytes(bucket: str) -> None:
    root, url, data = put(bucket, 3 * MIB + 12345)
    expected = io.BytesIO(data)
    rng = np.random.default_rng(7)
    with RangedFile(root, url) as handle:
        for _ in range(300):
            whence = int(rng.integers(0, 3))
            offset = (
                int(rng.integers(-len(data) // 2, len(data) // 2))
                if whence
                else int(rng.integers(0, len(data) + 1000))
            )
            if expected.seek(0, whence) + offset < 0:
                continue
            assert handle.seek(offset, whence) == expected.seek(offset, whence)
            length = int(rng.choice([1, 100, 32 << 10, BLOCK_BYTES + 3, 300_000]))
            assert handle.read(length) == expected.read(length)
            assert handle.tell() == expected.tell()
        handle.seek(0)
        assert handle.read() == data
