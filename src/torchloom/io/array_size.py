"""The size a file declares for an array, checked before anything is allocated or read.

A header (an ``.npy`` header, an HDF5 dataspace) may declare any shape: a 2**64 axis, or a
zero-length axis beside axes whose product no machine can address. numpy refuses such shapes
with a bare ``ValueError`` or ``OverflowError`` deep inside ``np.empty`` or ``np.memmap``, and an
addressable but huge one is allocated before anything checks it. :func:`declared_bytes` checks the
shape as numpy would (every axis, and the product of the non-zero axes times the item size, at
most the largest ``intp``) and :func:`check_in_memory` holds a whole read to a byte budget, each a
:class:`~torchloom.errors.DecodeError` naming the file, which the fault policy handles.

Example:
    >>> import numpy as np
    >>> declared_bytes("ct.npy", (2, 3, 4), np.dtype("int16"), what="the array")
    48
    >>> declared_bytes("ct.npy", (0, 2**62, 4), np.dtype("int16"), what="the array")
    Traceback (most recent call last):
    ...
    torchloom.errors.DecodeError: cannot decode 'ct.npy': the array declares shape (0, 4611686018427387904, \
4) of int16, past the 9,223,372,036,854,775,807 bytes numpy can address: the header is corrupt
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from torchloom.errors import DecodeError

#: The most bytes, and the most elements along one axis, numpy can address.
MAX_ADDRESSABLE = int(np.iinfo(np.intp).max)


def declared_bytes(path: str | os.PathLike[str], shape: Sequence[int], dtype: np.dtype, *, what: str) -> int:
    """The bytes an array of ``shape`` and ``dtype`` holds (0 with a zero-length axis); a
    :class:`DecodeError` naming ``path`` and ``what`` for a negative axis or a shape numpy cannot
    address, even empty."""
    sizes = [int(size) for size in shape]
    if any(size < 0 for size in sizes):
        raise DecodeError(path, f"{what} declares shape {tuple(shape)}, with a negative axis")
    spanned = math.prod(size for size in sizes if size) * dtype.itemsize  # Python ints: no wrapping
    if max(sizes, default=0) > MAX_ADDRESSABLE or spanned > MAX_ADDRESSABLE:
        raise DecodeError(
            path,
            f"{what} declares shape {tuple(sizes)} of {dtype}, past the {MAX_ADDRESSABLE:,} bytes numpy "
            "can address: the header is corrupt",
        )
    return math.prod(sizes) * dtype.itemsize


def check_in_memory(
    path: str | os.PathLike[str],
    declared: int,
    max_bytes: int,
    *,
    what: str,
    fix: str = "check that it is the array meant, or raise max_bytes",
) -> None:
    """Refuse to read ``declared`` bytes into memory past ``max_bytes``, before reading any;
    ``fix`` says what to do about it.

    Example:
        >>> check_in_memory("m.h5", 10, 8, what="dataset 'mask'")
        Traceback (most recent call last):
        ...
        torchloom.errors.DecodeError: cannot decode 'm.h5': dataset 'mask' declares 10 bytes, more than \
max_bytes=8 read into memory; check that it is the array meant, or raise max_bytes
    """
    if declared > max_bytes:
        raise DecodeError(
            path,
            f"{what} declares {declared:,} bytes, more than max_bytes={max_bytes:,} read into memory; {fix}",
        )
