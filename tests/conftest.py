"""Shared fixtures: small generated image sets with planted faults."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

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
