"""The display matrix of an MP4 or QuickTime track, read from its ``tkhd`` box with a small
bounded parser (positional reads of box headers, never the whole file), through the file object
the container reads: a local file's or an object's (:class:`~torchloom.io.ranged_file.RangedFile`,
whose blocks held since the container's open serve the reads), its position kept.

FFmpeg hands a decoded frame only the matrix's rotation (PyAV's ``VideoFrame.rotation``): a
mirroring matrix reads as a turn (a horizontal flip as 180°, a vertical one as 0°). The whole
matrix is in the track header; PyAV's ``VideoFrame.side_data`` also holds it, but reading that in
PyAV 18 leaves DataLoader workers forked afterwards to crash.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import write_video
    >>> path = os.path.join(tempfile.mkdtemp(), "clip.mp4")
    >>> write_video(path, np.zeros((2, 16, 16, 3), np.uint8), rate=2, codec="libx264")
    >>> with open(path, "rb") as handle:
    ...     track_matrix(handle, track_id=1)
    (65536, 0, 0, 65536)
"""

from __future__ import annotations

from typing import BinaryIO

#: Boxes looked at, at most, on one level (a file with more is not searched further).
MAX_BOXES = 4096
_HEADER = 8
_CONTAINERS = (b"moov", b"trak")


def track_matrix(handle: BinaryIO, *, track_id: int) -> tuple[int, int, int, int] | None:
    """The ``(a, b, c, d)`` entries (16.16 fixed point) of the display matrix of the track
    numbered ``track_id`` in the ISO media file ``handle`` (a seekable binary file object, left at
    the position it was at), where a stored pixel ``(x, y)`` is shown at ``(a x + c y, b x + d y)``
    (plus a translation); ``None`` where no such track header is found."""
    position = handle.tell()
    try:
        return _search(handle, 0, handle.seek(0, 2), track_id, depth=0)
    finally:
        handle.seek(position)


def _read_at(handle: BinaryIO, offset: int, length: int) -> bytes:
    handle.seek(offset)
    return handle.read(length)


def _search(
    handle: BinaryIO, begin: int, end: int, track_id: int, *, depth: int
) -> tuple[int, int, int, int] | None:
    for kind, payload, stop in _boxes(handle, begin, end):
        if kind in _CONTAINERS[depth : depth + 1]:
            found = _search(handle, payload, stop, track_id, depth=depth + 1)
            if found is not None or kind == b"moov":
                return found
        elif kind == b"tkhd" and depth == 2:
            return _tkhd_matrix(_read_at(handle, payload, 88), track_id)
    return None


def _boxes(handle: BinaryIO, begin: int, end: int) -> list[tuple[bytes, int, int]]:
    """``(type, payload offset, end offset)`` of the boxes between ``begin`` and ``end``."""
    found: list[tuple[bytes, int, int]] = []
    at = begin
    while at + _HEADER <= end and len(found) < MAX_BOXES:
        head = _read_at(handle, at, 16)
        if len(head) < _HEADER:
            break
        size, kind, payload = int.from_bytes(head[:4], "big"), head[4:8], at + _HEADER
        if size == 1 and len(head) == 16:
            size, payload = int.from_bytes(head[8:16], "big"), at + 16
        elif size == 0:
            size = end - at  # the box runs to the end of its parent
        if size < payload - at or at + size > end:
            break  # a malformed box: nothing after it can be placed
        found.append((kind, payload, at + size))
        at += size
    return found


def _tkhd_matrix(data: bytes, track_id: int) -> tuple[int, int, int, int] | None:
    version = data[0] if data else -1
    id_at, matrix_at = {0: (12, 40), 1: (20, 52)}.get(version, (0, 0))
    if not matrix_at or len(data) < matrix_at + 20:
        return None
    if int.from_bytes(data[id_at : id_at + 4], "big") != track_id:
        return None
    a, b, _, c, d = (
        int.from_bytes(data[at : at + 4], "big", signed=True) for at in range(matrix_at, matrix_at + 20, 4)
    )
    return a, b, c, d
