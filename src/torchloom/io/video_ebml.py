"""The display matrix of a Matroska or WebM video track, read from its ``Video > Projection``
element with a small bounded EBML parser (element headers read in place, only the ``Tracks``
element read whole).

Matroska has no display matrix: FFmpeg's muxer writes one (``-display_rotation``,
``-display_hflip``, a phone's rotation) as the track's projection pose, a horizontal flip as
``ProjectionPoseYaw`` 180° and the turn as ``ProjectionPoseRoll``, and its demuxer builds the matrix
back from them. A decoded frame carries only that matrix's rotation (PyAV's
``VideoFrame.rotation``: a horizontal flip reads as 180°, a vertical one as 0°), and this PyAV
exposes no stream side data, so the pose is read here from the file, through
:func:`torchloom.io.files.read_range`, and turned into the matrix FFmpeg builds.

Only the elements on the path ``Segment > Tracks > TrackEntry > Video > Projection`` are entered;
everything else is skipped by its declared size. A size that runs past its parent, an element
header cut short, or a ``Tracks`` element larger than :data:`MAX_TRACKS_BYTES` is a
:class:`~torchloom.errors.DecodeError`; more than :data:`MAX_ELEMENTS` elements on one level, or a
``Cluster`` before any ``Tracks``, ends the search (no matrix: the frame's rotation is used).

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import write_video
    >>> path = os.path.join(tempfile.mkdtemp(), "clip.mkv")
    >>> write_video(path, np.zeros((2, 16, 16, 3), np.uint8), rate=2, codec="libx264")
    >>> projection_matrix(path) is None  # no projection: nothing turned
    True
    >>> pose_matrix(yaw=180.0, pitch=0.0, roll=0.0)  # what -display_hflip writes
    (-65536, 0, 0, 65536)
"""

from __future__ import annotations

import math
import os
import struct
from typing import BinaryIO

from torchloom.errors import DecodeError
from torchloom.io.files import Inside, read_range

#: Elements looked at, at most, on one level (a file with more is not searched further).
MAX_ELEMENTS = 4096
#: The largest ``Tracks`` element read (codec settings of every track: kilobytes in real files).
MAX_TRACKS_BYTES = 1 << 20
#: Bytes read at once from the start of the file: the headers before ``Tracks`` lie within them.
FIRST_READ = 1 << 16

_EBML, _SEGMENT, _TRACKS, _CLUSTER = 0x1A45DFA3, 0x18538067, 0x1654AE6B, 0x1F43B675
_TRACK_ENTRY, _TRACK_TYPE, _VIDEO, _PROJECTION = 0xAE, 0x83, 0xE0, 0x7670
_PROJECTION_TYPE, _YAW, _PITCH, _ROLL = 0x7671, 0x7673, 0x7674, 0x7675
_VIDEO_TRACK, _RECTANGULAR = 1, 0
_HEADER_BYTES = 12  # the longest element header: a 4-byte ID and an 8-byte size
_ONE = 1 << 16

# (element ID, payload offset, payload end or None for an unknown size)
_Element = tuple[int, int, int | None]


def projection_matrix(
    path: str | os.PathLike[str], *, inside: Inside = None, handle: BinaryIO | None = None
) -> tuple[int, int, int, int] | None:
    """The ``(a, b, c, d)`` entries (16.16 fixed point, as :func:`pose_matrix`) of the display
    matrix FFmpeg's demuxer builds from the projection pose of the first video track of the
    Matroska or WebM file ``path``; ``None`` where it builds none (no projection, a pose of zeros,
    a 360° or 3-D pose).

    ``inside``: a real folder the file must resolve into (checked at every read). ``handle``: the
    file already open (a container's), read through instead, its position kept: an object's first
    block, held since the container's open, then costs no GET.
    """
    reader = _Reader(path, inside, handle)
    tracks = _tracks(reader)
    if tracks is None:
        return None
    pose = _video_pose(path, tracks)
    return None if pose is None else pose_matrix(yaw=pose[0], pitch=pose[1], roll=pose[2])


def pose_matrix(*, yaw: float, pitch: float, roll: float) -> tuple[int, int, int, int] | None:
    """The display matrix ``(a, b, c, d)`` (a stored pixel ``(x, y)`` shown at
    ``(a x + c y, b x + d y)``, 16.16 fixed point) of a rectangular projection's pose in degrees,
    built as FFmpeg's Matroska demuxer builds it: a yaw of ±180° mirrors left to right, applied
    before the roll, a counter-clockwise turn. ``None`` for a pose FFmpeg builds no matrix from
    (all zeros; a pitch, or a yaw other than 0 or ±180°, which no flat frame shows).

    Example:
        >>> pose_matrix(yaw=0.0, pitch=0.0, roll=90.0)  # a phone held upright
        (0, -65536, 65536, 0)
        >>> pose_matrix(yaw=0.0, pitch=30.0, roll=0.0) is None
        True
    """
    if (yaw == pitch == roll == 0.0) or pitch != 0.0 or yaw not in (0.0, 180.0, -180.0) or math.isnan(roll):
        return None
    mirrored = yaw != 0.0
    # FFmpeg's av_display_rotation_set takes a clockwise angle: the roll negated, and negated again
    # for a mirrored frame, whose yaw comes first; its entries are truncated to 16.16 as there.
    radians = math.radians(roll if not mirrored else -roll)
    cos, sin = int(math.cos(radians) * _ONE), int(math.sin(radians) * _ONE)
    a, b, c, d = cos, -sin, sin, cos
    return (-a, b, -c, d) if mirrored else (a, b, c, d)


class _Reader:
    """Bounded reads of one file: the first :data:`FIRST_READ` bytes once, the rest on demand."""

    def __init__(self, path: str | os.PathLike[str], inside: Inside, handle: BinaryIO | None) -> None:
        self.path, self.inside, self.handle = path, inside, handle
        self.first = self._read(0, FIRST_READ)

    def read(self, offset: int, length: int) -> bytes:
        if offset + length <= len(self.first) or len(self.first) < FIRST_READ:
            return self.first[offset : offset + length]
        return self._read(offset, length)

    def _read(self, offset: int, length: int) -> bytes:
        if self.handle is None:
            return read_range(self.path, offset, length, inside=self.inside)
        position = self.handle.tell()
        try:
            self.handle.seek(offset)
            return self.handle.read(length)
        finally:
            self.handle.seek(position)


def _tracks(reader: _Reader) -> bytes | None:
    """The payload of the Segment's ``Tracks`` element, or None where none precedes the media."""
    path = reader.path
    kind, _, end = _element_at(path, reader.read(0, _HEADER_BYTES), 0)
    if kind != _EBML or end is None:
        raise DecodeError(path, "it does not start with an EBML header: it is no Matroska or WebM file")
    segment = _next_in_file(reader, end, None, {_SEGMENT})
    if segment is None:
        return None
    found = _next_in_file(reader, segment[1], segment[2], {_TRACKS, _CLUSTER})
    if found is None or found[0] == _CLUSTER:
        return None
    _, begin, stop = found
    if stop is None:
        raise DecodeError(path, f"its Tracks element (content from byte {begin}) declares an unknown size")
    if stop - begin > MAX_TRACKS_BYTES:
        raise DecodeError(
            path,
            f"its Tracks element declares {stop - begin:,} bytes, more than the {MAX_TRACKS_BYTES:,} read "
            "for its display matrix; read the frames as stored with display_rotation=False",
        )
    data = reader.read(begin, stop - begin)
    if len(data) < stop - begin:
        raise DecodeError(
            path, f"its Tracks element (content from byte {begin}) is cut short: the file is truncated"
        )
    return data


def _next_in_file(reader: _Reader, begin: int, end: int | None, wanted: set[int]) -> _Element | None:
    """The first element of ``wanted`` among those from ``begin`` to ``end`` (None: to the end of
    the file), the others skipped by their size; None where none is found."""
    at = begin
    for _ in range(MAX_ELEMENTS):
        if end is not None and at >= end:
            return None
        head = reader.read(at, _HEADER_BYTES)
        if not head:
            return None  # the end of the file
        element = _element_at(reader.path, head, at)
        if element[0] in wanted:
            return element
        if element[2] is None:
            return None  # an element of unknown size: what follows cannot be placed
        at = element[2]
    return None


def _video_pose(path: str | os.PathLike[str], tracks: bytes) -> tuple[float, float, float] | None:
    """The ``(yaw, pitch, roll)`` of the first video track's rectangular projection, if it has one."""
    for kind, begin, end in _children(path, tracks, 0, len(tracks)):
        if kind != _TRACK_ENTRY:
            continue
        entry = {child: (b, e) for child, b, e in _children(path, tracks, begin, end)}
        if _TRACK_TYPE not in entry or _uint(tracks, *entry[_TRACK_TYPE]) != _VIDEO_TRACK:
            continue
        projection = _child(path, tracks, entry.get(_VIDEO), _PROJECTION)
        if projection is None:
            return None
        fields = {child: (b, e) for child, b, e in _children(path, tracks, *projection)}
        if _PROJECTION_TYPE in fields and _uint(tracks, *fields[_PROJECTION_TYPE]) != _RECTANGULAR:
            return None  # a 360° or cube-map projection: FFmpeg builds no display matrix from it
        yaw, pitch, roll = (_float(path, tracks, fields.get(child)) for child in (_YAW, _PITCH, _ROLL))
        return yaw, pitch, roll
    return None


def _child(
    path: str | os.PathLike[str], data: bytes, parent: tuple[int, int] | None, wanted: int
) -> tuple[int, int] | None:
    if parent is None:
        return None
    return next(((b, e) for kind, b, e in _children(path, data, *parent) if kind == wanted), None)


def _children(path: str | os.PathLike[str], data: bytes, begin: int, end: int) -> list[tuple[int, int, int]]:
    """``(ID, payload offset, payload end)`` of the elements between ``begin`` and ``end`` of an
    element read whole (at most :data:`MAX_ELEMENTS`), each checked to end within it."""
    found: list[tuple[int, int, int]] = []
    at = begin
    while at < end and len(found) < MAX_ELEMENTS:
        kind, payload, stop = _element_at(path, data[at : min(end, at + _HEADER_BYTES)], at)
        if stop is None or stop > end:
            declared = "an unknown size" if stop is None else f"{stop - payload:,} bytes"
            raise DecodeError(
                path,
                f"its Tracks element holds an element (ID 0x{kind:X}) that declares {declared}, more than "
                "its parent holds: the file is corrupt",
            )
        found.append((kind, payload, stop))
        at = stop
    return found


def _element_at(path: str | os.PathLike[str], head: bytes, at: int) -> _Element:
    """The element whose header starts ``head``, read from offset ``at``."""
    kind, id_length = _vint(path, head, 0, 4, at, keep_marker=True)
    size, size_length = _vint(path, head, id_length, 8, at, keep_marker=False)
    payload = at + id_length + size_length
    unknown = size == (1 << (7 * size_length)) - 1  # every value bit set: a size to be found by reading on
    return kind, payload, None if unknown else payload + size


def _vint(
    path: str | os.PathLike[str], head: bytes, at: int, most: int, offset: int, *, keep_marker: bool
) -> tuple[int, int]:
    """An EBML variable-length integer at ``head[at:]``, and its length in bytes."""
    first = head[at] if at < len(head) else 0
    length = 9 - first.bit_length()
    if not first or length > most or at + length > len(head):
        what = "cut short: the file is truncated" if at + length > len(head) and first else "malformed"
        raise DecodeError(path, f"the element header at offset {offset} is {what}")
    value = first if keep_marker else first & (0xFF >> length)
    for byte in head[at + 1 : at + length]:
        value = value << 8 | byte
    return value, length


def _uint(data: bytes, begin: int, end: int) -> int:
    return int.from_bytes(data[begin:end], "big")


def _float(path: str | os.PathLike[str], data: bytes, span: tuple[int, int] | None) -> float:
    """An EBML float (0, 4 or 8 bytes; an absent element is 0, its default)."""
    if span is None or span[0] == span[1]:
        return 0.0
    begin, end = span
    if end - begin not in (4, 8):
        raise DecodeError(
            path, f"a projection pose of {end - begin} bytes at offset {begin} of its Tracks is no float"
        )
    value: float = struct.unpack(">f" if end - begin == 4 else ">d", data[begin:end])[0]
    return value
