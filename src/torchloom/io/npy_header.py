"""The header of an ``.npy`` file or an npz member, read and checked before any of its data.

An npy header may declare any shape and dtype, and numpy allocates what it declares before it
reads a byte: a 200-byte member declaring 2**37 float64 is a 1 TiB ``MemoryError`` in
``np.load``. An npz member may also use a zip compression method Python's :mod:`zipfile` cannot
inflate (Deflate64, method 9, as 7-Zip and Windows' "compressed folder" write large archives;
Zstandard, 93, before Python 3.14), which it refuses with a bare ``NotImplementedError``. Here
each is a :class:`~torchloom.errors.DecodeError` naming the file:

- :func:`read_npy_header` parses a header (versions 1.0 and 2.0), refusing a dtype outside the
  kinds the caller reads (object arrays, which need pickle, always);
- :func:`check_holds` refuses a header declaring more bytes than the file or member holds, so
  no read allocates past what the archive actually stores, and a shape numpy cannot address;
- :func:`open_member` opens an npz member, naming an encrypted one or the method it uses and
  the fix, and :func:`read_member_header` reads its header and holds it to the member's size;
- :func:`read_member` does all of it and reads the member's array.

Example:
    >>> import io, numpy as np
    >>> buffer = io.BytesIO()
    >>> np.save(buffer, np.zeros((2, 3), np.float32))
    >>> _ = buffer.seek(0)
    >>> read_npy_header("x.npy", buffer, kinds="f")
    NpyHeader(shape=(2, 3), dtype=dtype('float32'), fortran_order=False)
"""

from __future__ import annotations

import lzma
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO

import numpy as np

from torchloom.errors import DecodeError
from torchloom.io.array_size import declared_bytes

#: The longest npy header read (numpy's own default limit).
NPY_HEADER_LIMIT = 10_000
#: Names of the zip compression methods an archiver may use, for the message refusing one.
ZIP_METHODS = {
    9: "Deflate64, as 7-Zip and Windows write large archives",
    10: "PKWARE implode",
    93: "Zstandard",
    95: "xz",
    97: "WavPack",
    98: "PPMd",
    99: "AES encryption",
}
_KIND_NAMES = {
    "b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex", "U": "text", "S": "bytes"
}
#: What inflating a member raises when its bytes are damaged.
_INFLATE_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError)


@dataclass(frozen=True)
class NpyHeader:
    """An npy header's shape, dtype and order; ``nbytes`` is the data it declares.

    Example:
        >>> NpyHeader((2, 3), np.dtype("int16"), False).nbytes
        12
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # Python ints: a huge header cannot wrap


def read_npy_header(
    path: str | os.PathLike[str], stream: IO[bytes], *, kinds: str, what: str = "its npy header"
) -> NpyHeader:
    """The npy header at ``stream``'s position (left just past it), refusing a dtype whose kind is
    not in ``kinds`` (numpy's one-letter kinds), a structured one, and a shape that is not sizes
    >= 0: each a :class:`DecodeError` naming ``path`` and ``what``. :func:`check_holds` then
    holds it to the bytes there are.

    Example:
        >>> import io, numpy as np
        >>> buffer = io.BytesIO()
        >>> np.save(buffer, np.array(["a"]))
        >>> _ = buffer.seek(0)
        >>> read_npy_header("labels.npy", buffer, kinds="iu")
        Traceback (most recent call last):
        ...
        torchloom.errors.DecodeError: cannot decode 'labels.npy': its npy header declares dtype <U1, \
not int or uint
    """
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream, NPY_HEADER_LIMIT)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream, NPY_HEADER_LIMIT)
        else:
            why = f"npy format version {version} is not supported (1.0 and 2.0 are)"
            raise DecodeError(path, f"{what}: {why}")
    except (ValueError, EOFError) as exc:
        raise DecodeError(path, f"invalid npy header in {what} ({exc})") from exc
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in kinds:
        wanted = " or ".join(_KIND_NAMES.get(kind, kind) for kind in kinds)
        raise DecodeError(path, f"{what} declares dtype {dtype}, not {wanted}")
    if not isinstance(shape, tuple) or any(not isinstance(n, int) or n < 0 for n in shape):
        raise DecodeError(path, f"invalid npy header in {what}: shape {shape!r} is not a tuple of sizes >= 0")
    return NpyHeader(tuple(int(n) for n in shape), dtype, bool(fortran))


def check_holds(path: str | os.PathLike[str], header: NpyHeader, available: int, where: str) -> None:
    """Refuse a header declaring more data than the ``available`` bytes ``where`` holds, or a
    shape numpy cannot address (huge axes beside a zero-length one hold nothing, yet numpy refuses
    them with a bare ``ValueError``).

    Example:
        >>> check_holds("ct.npy", NpyHeader((4,), np.dtype("<f8"), False), 16, "the file")
        Traceback (most recent call last):
        ...
        torchloom.errors.DecodeError: cannot decode 'ct.npy': the file holds 16 data bytes, but its \
header declares (4,) float64 (32 bytes): it is truncated
    """
    if available < header.nbytes:
        raise DecodeError(
            path,
            f"{where} holds {max(available, 0):,} data bytes, but its header declares {header.shape} "
            f"{header.dtype} ({header.nbytes:,} bytes): it is truncated",
        )
    declared_bytes(path, header.shape, header.dtype, what="its npy header")


def open_member(path: str | os.PathLike[str], archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> IO[bytes]:
    """The member ``info`` of ``archive`` opened for reading; an encrypted one, or one compressed
    with a method :mod:`zipfile` cannot inflate, is a :class:`DecodeError` naming the method.

    Example:
        >>> import io, zipfile
        >>> buffer = io.BytesIO()
        >>> with zipfile.ZipFile(buffer, "w") as archive:
        ...     archive.writestr("a.npy", b"data")
        >>> with zipfile.ZipFile(buffer) as archive:
        ...     with open_member("a.npz", archive, archive.getinfo("a.npy")) as member:
        ...         member.read()
        b'data'
    """
    where = f"member {info.filename!r}"
    if info.flag_bits & 0x1:
        raise DecodeError(path, f"{where} is encrypted: save the arrays again without a password")
    try:
        return archive.open(info)
    except NotImplementedError as exc:
        method = ZIP_METHODS.get(info.compress_type, "unknown")
        raise DecodeError(
            path,
            f"{where} is compressed with zip method {info.compress_type} ({method}), which Python's zipfile "
            "cannot inflate: save the arrays again with np.savez_compressed (or np.savez), or re-zip the "
            "folder with plain deflate (7-Zip: -mm=Deflate)",
        ) from exc


def read_member_header(
    path: str | os.PathLike[str], member: IO[bytes], info: zipfile.ZipInfo, *, kinds: str
) -> NpyHeader:
    """The npy header of the opened npz member ``member`` (:func:`read_npy_header`), refused when
    it declares more data than the member inflates to (``info.file_size``).

    Example:
        >>> import io, numpy as np, zipfile
        >>> buffer = io.BytesIO()
        >>> np.savez_compressed(buffer, ct=np.zeros((4, 5), np.int16))
        >>> with zipfile.ZipFile(buffer) as archive, archive.open("ct.npy") as member:
        ...     read_member_header("ct.npz", member, archive.getinfo("ct.npy"), kinds="i").shape
        (4, 5)
    """
    where = f"member {info.filename!r}"
    header = read_npy_header(path, member, kinds=kinds, what=where)
    check_holds(path, header, info.file_size - member.tell(), where)
    return header


def read_member(
    path: str | os.PathLike[str], archive: zipfile.ZipFile, info: zipfile.ZipInfo, *, kinds: str
) -> np.ndarray:
    """The array of the npz member ``info``, its header checked (:func:`read_npy_header`) and
    held to the bytes the member inflates to before any data is allocated.

    Example:
        >>> import io, numpy as np, zipfile
        >>> buffer = io.BytesIO()
        >>> np.savez_compressed(buffer, mean=np.arange(3.0))
        >>> with zipfile.ZipFile(buffer) as archive:
        ...     read_member("pca.npz", archive, archive.getinfo("mean.npy"), kinds="f").tolist()
        [0.0, 1.0, 2.0]
    """
    where = f"member {info.filename!r}"
    try:
        with open_member(path, archive, info) as member:
            header = read_member_header(path, member, info, kinds=kinds)
            data = member.read(header.nbytes)
    except _INFLATE_ERRORS as exc:
        raise DecodeError(path, f"{where} does not inflate ({type(exc).__name__}: {exc})") from exc
    except MemoryError as exc:  # within what the archive declares, but more than this machine has
        raise DecodeError(path, f"{where} does not fit in memory: {exc}") from exc
    if len(data) < header.nbytes:
        why = f"ends after {len(data):,} of {header.nbytes:,} bytes"
        raise DecodeError(path, f"{where} {why}: it is truncated")
    array = np.frombuffer(data, dtype=header.dtype)
    return array.reshape(header.shape, order="F" if header.fortran_order else "C")
