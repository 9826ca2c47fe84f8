"""EXIF orientation: how a camera says the stored pixels must be turned to show the photo upright.

Phones store most portrait photos sideways with an orientation tag; every image viewer applies it.
:func:`jpeg_orientation` reads the tag from a JPEG's first EXIF segment without decoding anything
(bounded, never raises: a malformed segment means "as stored"); :func:`orient` applies it to an
HWC array; :func:`oriented_size` gives the displayed ``(height, width)``.

Example:
    >>> import numpy as np
    >>> image = np.arange(6).reshape(2, 3, 1)
    >>> orient(image, 6).shape, oriented_size(2, 3, 6)
    ((3, 2, 1), (3, 2))
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

import numpy as np

#: The EXIF tag holding the orientation (1..8).
ORIENTATION_TAG = 0x0112
_SOS, _EOI, _APP1 = 0xDA, 0xD9, 0xE1
# Orientations 5..8 swap height and width.
_TRANSPOSED = frozenset({5, 6, 7, 8})


def jpeg_orientation(data: bytes) -> int:
    """The orientation (1..8) a JPEG's EXIF segment declares; 1 when none or unreadable.

    Example:
        >>> jpeg_orientation(b"\\xff\\xd8\\xff\\xd9")
        1
    """
    position = 2
    size = len(data)
    while position + 4 <= size and data[position] == 0xFF:
        kind = data[position + 1]
        if kind in (_SOS, _EOI):
            break
        length = int.from_bytes(data[position + 2 : position + 4], "big")
        if length < 2:
            break
        start, end = position + 4, position + 2 + length
        if kind == _APP1 and data[start : start + 6] == b"Exif\0\0":
            return _tiff_orientation(data[start + 6 : min(end, size)])
        position = end
    return 1


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: Chunks a PNG walk looks at before giving up (8 KiB IDAT chunks: a ~800 MB image).
MAX_PNG_CHUNKS = 100_000
#: The largest eXIf chunk read (an orientation sits in the first IFD; this bounds a hostile length).
MAX_EXIF_BYTES = 1 << 20


def png_orientation(handle: BinaryIO) -> int:
    """The orientation (1..8) a PNG's ``eXIf`` chunk declares, wherever it sits (the PNG spec lets it
    follow the pixel data): the walk reads chunk headers only and seeks over their data. 1 when
    there is none or it is unreadable.

    Example:
        >>> import io
        >>> png_orientation(io.BytesIO(PNG_MAGIC + bytes(8)))
        1
    """
    if handle.read(len(PNG_MAGIC)) != PNG_MAGIC:
        return 1
    for _ in range(MAX_PNG_CHUNKS):
        header = handle.read(8)
        if len(header) < 8:
            return 1
        length, kind = struct.unpack(">I4s", header)
        if kind == b"eXIf":
            return _tiff_orientation(handle.read(length)) if length <= MAX_EXIF_BYTES else 1
        if kind == b"IEND":
            return 1
        handle.seek(length + 4, os.SEEK_CUR)  # the data, then the CRC
    return 1


def _tiff_orientation(tiff: bytes) -> int:
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    order = "<" if tiff[:2] == b"II" else ">"
    magic, first_ifd = struct.unpack_from(order + "HI", tiff, 2)
    if magic != 42 or first_ifd + 2 > len(tiff):
        return 1
    (entries,) = struct.unpack_from(order + "H", tiff, first_ifd)
    for entry in range(entries):
        offset = first_ifd + 2 + 12 * entry
        if offset + 12 > len(tiff):
            return 1
        tag, kind, count = struct.unpack_from(order + "HHI", tiff, offset)
        if tag == ORIENTATION_TAG and kind == 3 and count >= 1:  # one SHORT, stored inline
            (value,) = struct.unpack_from(order + "H", tiff, offset + 8)
            return value if 1 <= value <= 8 else 1
    return 1


def oriented_size(height: int, width: int, orientation: int) -> tuple[int, int]:
    """The displayed ``(height, width)`` of a stored ``height`` × ``width`` image."""
    return (width, height) if orientation in _TRANSPOSED else (height, width)


def stored_size(height: int, width: int, orientation: int) -> tuple[int, int]:
    """The stored ``(height, width)`` of a displayed size (the same swap, undone)."""
    return oriented_size(height, width, orientation)


def orient(image: np.ndarray, orientation: int) -> np.ndarray:
    """Turn a stored HWC image upright for ``orientation`` (as Pillow's ``exif_transpose``).

    Returns a C-contiguous array (a copy unless the orientation is 1).
    """
    if orientation == 1:
        return image
    turned = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.swapaxes(0, 1),
        6: lambda a: a.swapaxes(0, 1)[:, ::-1],
        7: lambda a: a[::-1, ::-1].swapaxes(0, 1),
        8: lambda a: a.swapaxes(0, 1)[::-1],
    }[orientation](image)
    return np.ascontiguousarray(turned)
