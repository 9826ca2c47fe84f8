"""Read 3D volumes from ``.npy`` and ``.npz`` files, memory-mapped where the bytes allow it.

A ``.npy`` file and a *stored* (uncompressed) ``.npz`` member are memory-mapped read-only:
nothing is read until pages are touched, so cropping a region reads only that region. In an
object store (a URL) the header is one ranged GET and the data one more, into a read-only array. An npz
member's data lies at the member's local header offset plus the local header and npy header
lengths, which :func:`probe_volume` finds with :mod:`zipfile` (``np.load`` of an npz never
memory-maps). A *compressed* member (``np.savez_compressed``) must be inflated: it is read
whole, within ``max_bytes``. Shape and dtype come from the npy header, checked without reading
data: object (pickled), structured and non-numeric dtypes are refused, a file holding fewer
bytes than its header declares is a truncated file, and a shape numpy cannot address (a 2**64
axis, or huge axes beside a zero-length one) is refused before numpy sees it. Every failure is a
:class:`DecodeError` naming the file; FIFOs and devices are refused before they are opened.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import probe_volume, read_volume
    >>> path = os.path.join(tempfile.mkdtemp(), "ct.npy")
    >>> np.save(path, np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    >>> header = probe_volume(path)
    >>> header.shape, header.dtype, header.memmappable
    ((2, 3, 4), dtype('int16'), True)
    >>> volume = read_volume(path)
    >>> type(volume).__name__, int(volume[1, 2, 3])
    ('memmap', 23)
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from torchloom.errors import DecodeError
from torchloom.io.files import Inside, open_file
from torchloom.io.npy_header import (
    NpyHeader,
    check_holds,
    open_member,
    read_member,
    read_member_header,
    read_npy_header,
)

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
#: Compressed members are inflated into memory; larger ones are refused.
DEFAULT_MAX_VOLUME_BYTES = 8 << 30
#: dtype kinds a volume may have: bool, signed, unsigned, float, complex.
VOLUME_KINDS = "biufc"
# A zip local file header: signature, versions, flags, method, time, date, crc, sizes, name and
# extra field lengths (the last two say where the member's data starts).
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_EMPTY = "file is empty (0 bytes)"
# Bytes read at a time when a volume is read through to verify it.
_READ_THROUGH_CHUNK = 16 << 20


@dataclass(frozen=True)
class VolumeHeader(NpyHeader):
    """A volume's shape and dtype (its npy header), and where its bytes are.

    ``offset`` is the data's position in the file when it can be memory-mapped (a ``.npy`` or a
    stored npz member), else ``-1``; ``member`` is the npz member name (None for ``.npy``).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io import probe_volume
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "ct.npz")
        ...     np.savez(path, ct=np.zeros((4, 5, 6), np.float32))
        ...     header = probe_volume(path)
        >>> header.shape, header.dtype, header.member, header.memmappable
        ((4, 5, 6), dtype('float32'), 'ct.npy', True)
    """

    offset: int
    member: str | None = None

    @property
    def memmappable(self) -> bool:
        return self.offset >= 0


def probe_volume(
    path: str | os.PathLike[str], *, array: str | None = None, inside: Inside = None
) -> VolumeHeader:
    """Read a ``.npy`` file's or an npz member's header, checking it against the file's size.

    ``array``: the npz member (``"image"`` or ``"image.npy"``); None takes the only member.
    ``inside``: a real folder the path must resolve into (checked when the file is opened).

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "scan.npz")
        >>> np.savez_compressed(path, image=np.zeros((4, 5, 6), np.float32), mask=np.zeros(3))
        >>> header = probe_volume(path, array="image")
        >>> header.shape, header.member, header.memmappable
        ((4, 5, 6), 'image.npy', False)
    """
    with open_file(path, inside=inside) as handle:
        return _probe_open(path, handle, array)


def read_volume(
    path: str | os.PathLike[str],
    *,
    array: str | None = None,
    inside: Inside = None,
    max_bytes: int = DEFAULT_MAX_VOLUME_BYTES,
) -> np.ndarray:
    """A volume as a read-only array: an ``np.memmap`` for ``.npy`` and stored npz members, an
    array read whole for compressed members (refused beyond ``max_bytes``); ``array`` is the npz
    member, as in :func:`probe_volume`.

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "scan.npz")
        >>> np.savez(path, np.ones((2, 3, 4), np.uint8))
        >>> volume = read_volume(path)
        >>> isinstance(volume, np.memmap), volume.shape, int(volume.sum())
        (True, (2, 3, 4), 24)
    """
    with open_file(path, inside=inside) as handle:
        header = _probe_open(path, handle, array)
        if header.nbytes == 0:
            return np.empty(header.shape, header.dtype, order="F" if header.fortran_order else "C")
        if header.memmappable and not _has_descriptor(handle):
            return _read_stored(path, handle, header)
        if header.memmappable:
            return np.memmap(
                handle,
                dtype=header.dtype,
                mode="r",
                offset=header.offset,
                shape=header.shape,
                order="F" if header.fortran_order else "C",
            )
        if header.nbytes > max_bytes:
            raise DecodeError(
                path,
                f"member {header.member!r} is compressed and declares {header.nbytes:,} bytes, more than "
                f"max_bytes={max_bytes:,}; save it uncompressed (np.savez) to memory-map it, "
                "or raise max_bytes",
            )
        with zipfile.ZipFile(handle) as archive:
            return read_member(path, archive, archive.getinfo(str(header.member)), kinds=VOLUME_KINDS)


def verify_volume(
    path: str | os.PathLike[str],
    *,
    array: str | None = None,
    inside: Inside = None,
    max_bytes: int = DEFAULT_MAX_VOLUME_BYTES,
) -> VolumeHeader:
    """:func:`probe_volume`, then read the volume's every byte once: a compressed member is
    inflated (one that does not, or ends early, is a :class:`DecodeError`), a memory-mappable one
    read through the file (an I/O error then, not in a worker touching a page).

    Costs a whole read, where :func:`probe_volume` reads the header only.

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "scan.npy")
        >>> np.save(path, np.zeros((2, 3, 4), np.uint8))
        >>> verify_volume(path).shape
        (2, 3, 4)
    """
    with open_file(path, inside=inside) as handle:
        header = _probe_open(path, handle, array)
        if header.memmappable:
            handle.seek(header.offset)
            remaining = header.nbytes
            while remaining > 0:
                chunk = handle.read(min(remaining, _READ_THROUGH_CHUNK))
                if not chunk:  # it shrank since its header was checked against its size
                    raise DecodeError(path, f"ends {remaining:,} bytes short of its data: it is truncated")
                remaining -= len(chunk)
    if not header.memmappable:
        read_volume(path, array=array, inside=inside, max_bytes=max_bytes)
    return header


def _probe_open(path: str | os.PathLike[str], handle: BinaryIO, array: str | None) -> VolumeHeader:
    magic = handle.read(len(NPY_MAGIC))
    handle.seek(0)
    size = handle.seek(0, os.SEEK_END)  # an object's size came with the GET of its magic
    handle.seek(0)
    if magic.startswith(NPY_MAGIC):
        npy = read_npy_header(path, handle, kinds=VOLUME_KINDS)
        check_holds(path, npy, size - handle.tell(), "the file")
        return _volume_header(npy, handle.tell())
    if magic[:4] in ZIP_MAGICS:
        try:
            return _npz_header(path, handle, array, size)
        except (zipfile.BadZipFile, zlib.error, EOFError, struct.error) as exc:
            raise DecodeError(path, f"broken npz archive ({type(exc).__name__}: {exc})") from exc
    raise DecodeError(path, "not a .npy or .npz file (no NUMPY or zip signature)" if magic else _EMPTY)


def _read_stored(path: str | os.PathLike[str], handle: BinaryIO, header: VolumeHeader) -> np.ndarray:
    """The data of a volume in a file with no descriptor to map (an object in a store): its bytes
    read in one range, as a read-only array as a memmap would be."""
    handle.seek(header.offset)
    data = handle.read(header.nbytes)
    if len(data) < header.nbytes:
        short = header.nbytes - len(data)
        raise DecodeError(path, f"ends {short:,} bytes short of its data: it is truncated")
    values = np.frombuffer(data, dtype=header.dtype)
    return values.reshape(header.shape, order="F" if header.fortran_order else "C")


def _has_descriptor(handle: BinaryIO) -> bool:
    try:
        handle.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return False
    return True


def _volume_header(npy: NpyHeader, offset: int, member: str | None = None) -> VolumeHeader:
    return VolumeHeader(npy.shape, npy.dtype, npy.fortran_order, offset, member)


def _npz_header(
    path: str | os.PathLike[str], handle: BinaryIO, array: str | None, size: int
) -> VolumeHeader:
    with zipfile.ZipFile(handle) as archive:
        info = _member(path, archive, array)
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:  # open_member names both
            with open_member(path, archive, info) as member:
                npy = read_member_header(path, member, info, kinds=VOLUME_KINDS)
                return _volume_header(npy, -1, info.filename)
    handle.seek(info.header_offset)
    local = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
    if local[0] != b"PK\x03\x04":
        raise DecodeError(path, f"member {info.filename!r} has no local zip header where the directory says")
    start = info.header_offset + _LOCAL_HEADER.size + local[9] + local[10]
    handle.seek(start)
    where = f"member {info.filename!r}"
    npy = read_npy_header(path, handle, kinds=VOLUME_KINDS, what=where)
    offset = handle.tell()
    check_holds(path, npy, min(info.file_size, size - start) - (offset - start), where)
    return _volume_header(npy, offset, info.filename)


def _member(path: str | os.PathLike[str], archive: zipfile.ZipFile, array: str | None) -> zipfile.ZipInfo:
    names = archive.namelist()
    if array is None:
        if len(names) != 1:
            raise DecodeError(
                path, f"the npz holds {len(names)} arrays {names[:10]}; pass array= to pick one"
            )
        return archive.getinfo(names[0])
    for name in (array, f"{array}.npy"):
        if name in names:
            return archive.getinfo(name)
    raise DecodeError(path, f"the npz holds no array {array!r}; it holds {names[:10]}")
