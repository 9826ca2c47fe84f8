"""HDF5 cubes through h5py (the ``hdf5`` extra), opened lazily in each process.

An :class:`Hdf5Cube` reads its file's metadata once at construction, then closes it. Reads open
the file on first use in each process (the handle is kept with the process id, so a forked
DataLoader worker opens its own instead of sharing its parent's) and slice the h5py dataset: a
patch reads only the chunks it covers, never the whole cube. The handle is never pickled, so the
cube travels to workers under fork, spawn and forkserver alike. A truncated, corrupt or non-HDF5
file is a :class:`DecodeError` naming it, and so is a dataset reached through an external link or
stored outside the file (:mod:`torchloom.io.hdf5_confined`), or one whose declared shape no
machine could hold (checked before anything is read). So is a dataset in compressed chunks larger
than :data:`MAX_CHUNK_BYTES`: HDF5 inflates a whole compressed chunk to read any value of it, so a
few hundred kilobytes of gzip declaring one (16000, 16000) chunk would cost 256 MB on every patch
read (HDF5 allows 4 GiB chunks), and a whole band of a large scene is a legitimate chunk of that size
only where nothing reads patches. An uncompressed chunk of any size is read in part, so it passes.

Example:
    >>> import h5py, numpy as np, os, tempfile
    >>> from torchloom.io import Hdf5Cube
    >>> path = os.path.join(tempfile.mkdtemp(), "scene.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("cube", data=np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    >>> cube = Hdf5Cube(path)
    >>> cube.shape, cube.read(rows=slice(1, 2), cols=slice(2, 3), bands=[3, 1]).tolist()
    ((2, 3, 4), [[[23, 21]]])
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal

import numpy as np

from torchloom.errors import ConfigError, DecodeError, install_hint
from torchloom.io.array_size import check_in_memory, declared_bytes
from torchloom.io.cube import Bands, band_indices, check_window, native
from torchloom.io.files import Inside, open_file, reopenable_name
from torchloom.io.hdf5_confined import check_stored_in_file, find_in_file

Layout = Literal["HWC", "CHW"]
LAYOUTS = ("HWC", "CHW")
#: Dataset attributes read as the bands' wavelengths, and as their units (first found wins).
WAVELENGTH_ATTRIBUTES = ("wavelength", "wavelengths")
WAVELENGTH_UNIT_ATTRIBUTES = ("wavelength units", "wavelength_units")
#: numpy kinds a cube may hold: bool, integers, floats and complex numbers.
NUMERIC_KINDS = "biufc"
#: Names listed when the requested dataset is not in the file.
NAMES_LISTED = 20
#: A dataset read whole (a label mask) larger than this is refused before it is read.
DEFAULT_MAX_ARRAY_BYTES = 8 << 30
#: The most bytes one compressed chunk may inflate to: every read of a value in it inflates it whole
#: (h5py's automatic chunks stay under 1 MiB; tools chunking for patch reads use a few MiB).
MAX_CHUNK_BYTES = 64 << 20
#: The chunk size a rechunking fix proposes (HDF5's chunk cache holds 1 MiB per dataset).
_PROPOSED_CHUNK_BYTES = 1 << 20
#: Called with a dataset's shape and dtype before its values are read; it raises to refuse them.
ArrayCheck = Callable[[tuple[int, ...], np.dtype], None]


def require_h5py() -> ModuleType:
    """Import h5py, or say how to install it.

    Example:
        >>> require_h5py().__name__
        'h5py'
    """
    try:
        return importlib.import_module("h5py")
    except ImportError as exc:
        raise ImportError(
            f"reading HDF5 needs h5py: {install_hint('h5py', 'hdf5')}"
        ) from exc


def open_hdf5(path: str, *, inside: Inside = None) -> Any:
    """Open ``path`` read-only with h5py; refuse non-regular files, name the file on failure.

    The file layer opens and checks the file (a FIFO or a device is refused on its descriptor),
    then h5py opens that very file, never the path again: by the descriptor's name in
    ``/proc/self/fd`` on Linux (HDF5's native driver, as fast as opening the path), else through
    the file object (h5py's fileobj driver: each read calls back into Python, ~3x slower on a
    patch read that misses HDF5's chunk cache). The file object is also the way when HDF5 cannot
    use the name: it resolves a name's real path, which fails once the opened file was replaced
    or deleted. That file object is closed with the h5py file object. An object in a store
    (``inside``, an :class:`~torchloom.io.ObjectRoot`) is read through a
    :class:`~torchloom.io.ranged_file.RangedFile`: each chunk HDF5 reads is a ranged GET.
    """
    h5py = require_h5py()
    handle = open_file(path, inside=inside)
    try:
        name = reopenable_name(handle)
        if name is not None:
            with contextlib.suppress(OSError):  # else the file object: it works, or says why not
                opened = h5py.File(name, "r")
                handle.close()  # HDF5 holds a descriptor of its own
                return opened
        opened = h5py.File(handle, "r")
    except BaseException as exc:
        handle.close()
        if isinstance(exc, OSError):
            raise DecodeError(path, f"not a readable HDF5 file; truncated or corrupt? (h5py: {exc})") from exc
        raise
    weakref.finalize(opened, handle.close)  # h5py reads through it for as long as the file lives
    return opened


def hdf5_dataset(handle: Any, path: str, name: str) -> Any:
    """The h5py dataset ``name`` of the open file ``handle``, stored in that file and reached through
    it (no external link, external storage or virtual dataset); a missing one names those that exist.
    """
    h5py = require_h5py()
    try:
        found = find_in_file(handle, path, name)
    except (KeyError, ValueError) as exc:
        names: list[str] = []
        handle.visititems(lambda key, item: names.append(key) if isinstance(item, h5py.Dataset) else None)
        raise DecodeError(
            path,
            f"has no dataset {name!r}; its datasets are {names[:NAMES_LISTED]} (pass one of them: array= "
            "for a cube, masks= for label masks)",
        ) from exc
    if not isinstance(found, h5py.Dataset):
        raise DecodeError(path, f"{name!r} is a group, not a dataset (pass the dataset's full name)")
    check_stored_in_file(found, path, name)
    return found


def check_chunk_bytes(dataset: Any, path: str, name: str, max_chunk_bytes: int = MAX_CHUNK_BYTES) -> None:
    """Refuse the h5py ``dataset`` when one of its compressed (filtered) chunks inflates past
    ``max_chunk_bytes``: reading any value of a chunk inflates all of it. A :class:`DecodeError`
    naming the file, the chunk shape, its bytes and a rechunking command.

    Example:
        >>> import h5py, numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "c.h5")
        >>> with h5py.File(path, "w") as f:
        ...     stored = f.create_dataset("cube", (64, 64, 4), "u1", chunks=(64, 64, 1), compression="gzip")
        ...     check_chunk_bytes(stored, path, "cube", max_chunk_bytes=1024)
        Traceback (most recent call last):
        ...
        torchloom.errors.DecodeError: cannot decode '...c.h5': dataset 'cube' is stored in compressed \
chunks of (64, 64, 1) uint8, 4,096 bytes each, more than max_chunk_bytes=1,024: HDF5 inflates a whole \
chunk to read any value of it; rechunk it (h5repack -l cube:CHUNK=32x32x1 IN.h5 OUT.h5) or raise \
max_chunk_bytes
    """
    chunks = dataset.chunks
    if chunks is None or dataset.id.get_create_plist().get_nfilters() == 0:
        return  # contiguous, or chunks read in part
    itemsize = np.dtype(dataset.dtype).itemsize
    inflated = math.prod(int(size) for size in chunks) * itemsize
    if inflated <= max_chunk_bytes:
        return
    extents = zip(chunks, dataset.shape, strict=True)
    proposed = [min(int(size), max(int(extent), 1)) for size, extent in extents]  # none past the data
    target = min(_PROPOSED_CHUNK_BYTES, max_chunk_bytes)
    while math.prod(proposed) * itemsize > target and max(proposed) > 1:
        largest = proposed.index(max(proposed))
        proposed[largest] = -(-proposed[largest] // 2)
    layout = "x".join(map(str, proposed))
    raise DecodeError(
        path,
        f"dataset {name!r} is stored in compressed chunks of {tuple(chunks)} {np.dtype(dataset.dtype)}, "
        f"{inflated:,} bytes each, more than max_chunk_bytes={max_chunk_bytes:,}: HDF5 inflates a whole "
        f"chunk to read any value of it; rechunk it (h5repack -l {name}:CHUNK={layout} IN.h5 OUT.h5) "
        "or raise max_chunk_bytes",
    )


def read_hdf5_array(
    path: str | os.PathLike[str],
    array: str,
    *,
    check: ArrayCheck | None = None,
    max_bytes: int = DEFAULT_MAX_ARRAY_BYTES,
    max_chunk_bytes: int = MAX_CHUNK_BYTES,
    inside: Inside = None,
) -> np.ndarray:
    """Read the whole (small) dataset named ``array`` in the file, e.g. a label mask, into memory.

    Its declared shape is checked before a byte of it is read or allocated: one no machine could
    hold, or larger than ``max_bytes``, is a :class:`DecodeError`, and so is a compressed chunk
    larger than ``max_chunk_bytes`` (a chunk may be larger than the dataset, and is inflated
    whole); ``check(shape, dtype)``, when given, may refuse it too (a mask must match its cube's
    size). ``inside``: the store's root of a URL, as :func:`open_hdf5` takes it.

    Example:
        >>> import h5py, numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "m.h5")
        >>> with h5py.File(path, "w") as f:
        ...     _ = f.create_dataset("labels", data=np.eye(2, dtype=np.uint8))
        >>> read_hdf5_array(path, "labels").tolist()
        [[1, 0], [0, 1]]
    """
    path = os.fspath(path)
    with open_hdf5(path, inside=inside) as handle:
        dataset = hdf5_dataset(handle, path, array)
        if dataset.shape is None:
            raise DecodeError(path, f"dataset {array!r} is an HDF5 null dataspace: it holds no values")
        shape, dtype = tuple(int(size) for size in dataset.shape), np.dtype(dataset.dtype)
        what = f"dataset {array!r}"
        declared = declared_bytes(path, shape, dtype, what=what)
        if check is not None:
            check(shape, dtype)
        check_in_memory(path, declared, max_bytes, what=what)
        check_chunk_bytes(dataset, path, array, max_chunk_bytes)
        try:
            return np.asarray(dataset[()])
        except OSError as exc:
            raise DecodeError(
                path, f"cannot read dataset {array!r}: truncated or corrupt? (h5py: {exc})"
            ) from exc


class Hdf5Cube:
    """A 3-D dataset of an HDF5 file as a cube of ``(lines, samples, bands)``.

    Args:
        path: the HDF5 file.
        array: the name of the cube's dataset in the file.
        layout: how the dataset's axes are stored: ``"HWC"`` (default) or ``"CHW"`` (bands first).
        max_chunk_bytes: the most bytes one compressed chunk may inflate to (every read inflates
            each chunk it touches whole); a dataset in larger ones is refused when the cube opens.
        inside: for a URL, the :class:`~torchloom.io.ObjectRoot` whose store serves it.

    Wavelengths are read from the dataset's ``wavelength`` (or ``wavelengths``) attribute, and
    their units from ``wavelength units``, when present.

    Example:
        >>> import h5py, numpy as np, os, pickle, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "chw.h5")
        >>> with h5py.File(path, "w") as f:
        ...     f.create_dataset("x", data=np.arange(12.0).reshape(3, 2, 2)).attrs["wavelength"] = [1, 2, 3]
        >>> cube = pickle.loads(pickle.dumps(Hdf5Cube(path, "x", layout="CHW")))
        >>> cube.shape, cube.wavelengths.tolist(), cube.read(rows=slice(0, 1), cols=slice(1, 2)).tolist()
        ((2, 2, 3), [1.0, 2.0, 3.0], [[[1.0, 5.0, 9.0]]])
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        array: str = "cube",
        *,
        layout: Layout = "HWC",
        max_chunk_bytes: int = MAX_CHUNK_BYTES,
        inside: Inside = None,
    ) -> None:
        if layout not in LAYOUTS:
            raise ConfigError(
                f"Invalid layout={layout!r}; must be one of {LAYOUTS} (how the axes are stored)"
            )
        self._path = os.fspath(path)
        self.array = array
        self.layout = layout
        self.max_chunk_bytes = max_chunk_bytes
        #: What every open of the file must stay in (a store's root, for a URL), or None.
        self.inside = inside
        self._handle: tuple[int, Any, Any] | None = None  # (pid, file, dataset) of this process
        with open_hdf5(self._path, inside=inside) as handle:
            stored = hdf5_dataset(handle, self._path, array)
            if stored.dtype.kind not in NUMERIC_KINDS:
                raise DecodeError(self._path, f"dataset {array!r} holds {stored.dtype}, not numbers")
            if stored.ndim != 3 or 0 in stored.shape:
                raise DecodeError(
                    self._path, f"dataset {array!r} has shape {stored.shape}; a cube needs 3 non-empty axes"
                )
            shape = tuple(int(size) for size in stored.shape)
            declared_bytes(self._path, shape, native(stored.dtype), what=f"dataset {array!r}")
            check_chunk_bytes(stored, self._path, array, max_chunk_bytes)
            self._shape = (
                (shape[1], shape[2], shape[0]) if layout == "CHW" else (shape[0], shape[1], shape[2])
            )
            self._dtype = native(stored.dtype)
            self._wavelengths, self.wavelength_units = _wavelength_attributes(
                stored, self._path, self._shape[2]
            )

    @property
    def path(self) -> str:
        return self._path

    @property
    def shape(self) -> tuple[int, int, int]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def wavelengths(self) -> np.ndarray | None:
        return self._wavelengths

    def read(self, rows: slice | None = None, cols: slice | None = None, bands: Bands = None) -> np.ndarray:
        """The window ``rows × cols`` (slices, clipped to the cube) of ``bands`` as a new HWC array.

        A band list is read as the range it spans, then picked from in memory (h5py's own list
        selection is slow and needs increasing indices).
        """
        rows, cols = check_window(rows, cols)
        lines, samples, count = self.shape
        row_range = range(*rows.indices(lines))
        col_range = range(*cols.indices(samples))
        chosen = band_indices(bands, count)
        picked = None
        if isinstance(chosen, slice):
            band_range = range(*chosen.indices(count))
        else:
            low = int(chosen.min()) if chosen.size else 0
            band_range = range(low, int(chosen.max()) + 1 if chosen.size else 0)
            picked = chosen - low
        size = (len(row_range), len(col_range), len(picked) if picked is not None else len(band_range))
        out = np.empty(size, dtype=self.dtype)
        if 0 in size:
            return out
        spans = [slice(r.start, r.stop, r.step) for r in (row_range, col_range, band_range)]
        try:
            if self.layout == "CHW":
                window = self._stored()[spans[2], spans[0], spans[1]].transpose(1, 2, 0)
            else:
                window = self._stored()[spans[0], spans[1], spans[2]]
        except OSError as exc:
            raise DecodeError(
                self._path, f"cannot read {self.array!r}: truncated or corrupt? (h5py: {exc})"
            ) from exc
        window = window if picked is None else window[:, :, picked]
        if window.shape != out.shape:  # never broadcast a smaller read into the window asked for
            raise DecodeError(self._path, f"read {window.shape} values for a window of {out.shape}")
        out[...] = window
        return out

    def _stored(self) -> Any:
        """This process's h5py dataset, opening the file on first use here."""
        pid = os.getpid()
        if self._handle is None or self._handle[0] != pid:
            handle = open_hdf5(self._path, inside=self.inside)
            try:
                stored = hdf5_dataset(handle, self._path, self.array)
                self._check_unchanged(stored)
                check_chunk_bytes(stored, self._path, self.array, self.max_chunk_bytes)
            except BaseException:
                handle.close()
                raise
            self._handle = (pid, handle, stored)
        return self._handle[2]

    def _check_unchanged(self, stored: Any) -> None:
        """Refuse a dataset whose shape or dtype differs from the one this cube was built on (the
        file was replaced): a read would otherwise broadcast or mix the new data into the old shape."""
        shape = tuple(int(size) for size in stored.shape)
        expected = self._shape
        if self.layout == "CHW" and len(expected) == 3:
            expected = (expected[2], expected[0], expected[1])
        if shape != expected or native(stored.dtype) != self._dtype:
            raise DecodeError(
                self._path,
                f"dataset {self.array!r} is now {stored.dtype} {shape}, not the {self._dtype} {expected} "
                "it held when this cube was opened: the file was replaced; rebuild the dataset",
            )

    def close(self) -> None:
        """Close this process's handle (the next read reopens it)."""
        if self._handle is not None and self._handle[0] == os.getpid():
            self._handle[1].close()
        self._handle = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_handle"] = None  # h5py handles do not pickle; each process opens its own
        return state

    def __repr__(self) -> str:
        return (
            f"Hdf5Cube({self.path!r}, array={self.array!r}, shape={self.shape}, layout={self.layout!r})"
        )


def _wavelength_attributes(stored: Any, path: str, bands: int) -> tuple[np.ndarray | None, str | None]:
    attributes = stored.attrs
    name = next((key for key in WAVELENGTH_ATTRIBUTES if key in attributes), None)
    units = next((attributes[key] for key in WAVELENGTH_UNIT_ATTRIBUTES if key in attributes), None)
    if isinstance(units, bytes):
        units = units.decode("utf-8", "replace")
    if name is None:
        return None, None if units is None else str(units)
    try:
        values = np.asarray(attributes[name], dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DecodeError(path, f"attribute {name!r} does not hold numbers ({exc})") from exc
    if values.shape != (bands,) or not np.isfinite(values).all():
        raise DecodeError(
            path, f"attribute {name!r} holds {values.size} values for {bands} bands, or a non-finite one"
        )
    return values, None if units is None else str(units)
