"""A window of an ENVI cube in an object store, read as the byte ranges it covers.

A cube's data file is one C-order array on disk (``(bands, lines, samples)`` for bsq,
``(lines, bands, samples)`` for bil, ``(lines, samples, bands)`` for bip). A window picks
indices on each axis; along the last one the values it needs lie together, so each pair of
indices of the first two axes is one run of bytes. Runs closer than :data:`MERGE_GAP` bytes are
fetched as one range (the bytes between cost less than another request), and every range is
requested at once through the cube's :class:`~torchloom.io.ObjectRoot`: a 9x9 patch of a bip
cube is nine ranged GETs of a few kilobytes, whatever the cube's size.

Example:
    >>> import fsspec, numpy as np
    >>> from torchloom.io import ObjectRoot, ObjectStore
    >>> from torchloom.io.envi_header import parse_header
    >>> text = b"ENVI\\nsamples=4\\nlines=3\\nbands=2\\ndata type=2\\ninterleave=bsq\\nbyte order=0\\n"
    >>> header = parse_header(text, "memory://envi/a.hdr")
    >>> fsspec.filesystem("memory").pipe("memory://envi/a.img", np.arange(24, dtype="<i2").tobytes())
    >>> root = ObjectRoot("memory://envi", ObjectStore())
    >>> read_window(header, "memory://envi/a.img", root, range(1, 2), range(2, 4), np.array([1])).tolist()
    [[[18], [19]]]
"""

from __future__ import annotations

import numpy as np

from torchloom.errors import DecodeError
from torchloom.io.envi_header import EnviHeader
from torchloom.io.objects import ObjectRoot
from torchloom.io.ranged_file import fetch_ranges

#: Runs of a window this close (in bytes) are fetched in one range.
MERGE_GAP = 8 << 10
#: The axes each interleave stores, outermost first.
STORED_AXES = {"bsq": ("bands", "lines", "samples"), "bil": ("lines", "bands", "samples")}
_BIP = ("lines", "samples", "bands")


def object_size(root: ObjectRoot, url: str) -> int:
    """The size of the object ``url`` as a one-byte ranged GET tells it (S3's ``Content-Range``),
    or a HEAD where the store's GETs do not say it.

    Example:
        >>> import fsspec
        >>> from torchloom.io import ObjectRoot, ObjectStore
        >>> fsspec.filesystem("memory").pipe("memory://envi/b.img", b"x" * 10)
        >>> object_size(ObjectRoot("memory://envi", ObjectStore()), "memory://envi/b.img")
        10
    """
    fetched = root.fetch(url, 0, 1)
    return fetched.size if fetched.size is not None else root.info(url).size


def read_window(
    header: EnviHeader, url: str, root: ObjectRoot, rows: range, cols: range, bands: np.ndarray
) -> np.ndarray:
    """The window ``rows × cols × bands`` of the cube ``header`` describes, stored in ``url``, as
    an HWC array in the file's dtype, read as the ranges it covers.

    Example:
        >>> import fsspec, numpy as np
        >>> from torchloom.io import ObjectRoot, ObjectStore
        >>> from torchloom.io.envi_header import parse_header
        >>> text = b"ENVI\\nsamples=2\\nlines=2\\nbands=3\\ndata type=1\\ninterleave=bip\\n"
        >>> fsspec.filesystem("memory").pipe("memory://envi/c.img", bytes(range(12)))
        >>> root = ObjectRoot("memory://envi", ObjectStore())
        >>> read_window(parse_header(text, "memory://envi/c.hdr"), "memory://envi/c.img", root,
        ...             range(1, 2), range(0, 2), np.array([2, 0])).tolist()
        [[[8, 6], [11, 9]]]
    """
    picks = {"lines": np.asarray(rows, np.int64), "samples": np.asarray(cols, np.int64), "bands": bands}
    axes = STORED_AXES.get(header.interleave, _BIP)
    sizes = dict(zip(("lines", "samples", "bands"), header.shape, strict=True))
    outer, middle, inner = (np.asarray(picks[axis], np.int64) for axis in axes)
    if 0 in (outer.size, middle.size, inner.size):
        shape = (len(rows), len(cols), bands.size)
        return np.empty(shape, header.dtype)
    middle_size, inner_size = sizes[axes[1]], sizes[axes[2]]
    low, high = int(inner.min()), int(inner.max()) + 1
    item = header.dtype.itemsize
    # One run per (outer, middle) pair: inner values low..high, in the order the file holds them.
    pairs = [(int(o), int(m)) for o in np.unique(outer) for m in np.unique(middle)]
    starts = [header.header_offset + ((o * middle_size + m) * inner_size + low) * item for o, m in pairs]
    run = (high - low) * item
    spans = _merged(starts, run)
    chunks = fetch_ranges(root, url, spans)
    values: dict[tuple[int, int], np.ndarray] = {}
    span_index = 0
    for pair, start in zip(pairs, starts, strict=True):
        while start >= spans[span_index][1]:
            span_index += 1
        span_start, _ = spans[span_index]
        data = chunks[span_index][start - span_start : start - span_start + run]
        if len(data) < run:
            raise DecodeError(url, f"ended before byte {start + run:,} of its data: it is truncated")
        values[pair] = np.frombuffer(data, header.dtype)
    stored = np.stack(
        [np.stack([values[(int(o), int(m))] for m in middle]) for o in outer]
    )[:, :, inner - low]
    if header.interleave == "bsq":
        return stored.transpose(1, 2, 0)
    if header.interleave == "bil":
        return stored.transpose(0, 2, 1)
    return stored


def _merged(starts: list[int], run: int) -> list[tuple[int, int]]:
    """Ranges covering ``[start, start + run)`` of every start (ascending), near ones merged."""
    spans: list[tuple[int, int]] = []
    for start in starts:
        if spans and start - spans[-1][1] <= MERGE_GAP:
            spans[-1] = (spans[-1][0], max(spans[-1][1], start + run))
        else:
            spans.append((start, start + run))
    return spans
