"""ENVI cubes: a ``.hdr`` header beside a raw binary file, read through a read-only memmap.

Every interleave (``bsq``, ``bil``, ``bip``), both byte orders and the ENVI data types 1–6, 9 and
12–15 are read; a window comes back as an HWC array in native byte order, whatever the layout on
disk. The data file is the header's ``data file`` key when given, else the file beside the header
with the same name and no extension or one of :data:`DATA_EXTENSIONS` (or the path opened, when
the cube is opened from its data file). However it is found, it must lie in the header's folder
once symlinks are resolved, checked when the cube opens and again on every open. It must hold exactly
``header offset + lines × samples × bands × itemsize`` bytes: anything else is a
:class:`DecodeError` naming it. FIFOs and devices are refused before they are opened for reading.
The memmap is made on first read in each process and is not pickled, so a cube travels to
DataLoader workers as a few numbers and paths.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import open_envi, write_envi
    >>> cube = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    >>> path = write_envi(os.path.join(tempfile.mkdtemp(), "scene.img"), cube, interleave="bil")
    >>> envi = open_envi(path)
    >>> envi.shape, envi.read(rows=slice(1, 2), cols=slice(0, 1)).tolist()
    ((2, 3, 4), [[[12, 13, 14, 15]]])
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from torchloom.errors import (
    ConfigError,
    DecodeError,
    HeaderError,
    MissingFileError,
    UnsafeFileError,
    UsageError,
)
from torchloom.io.cube import Bands, band_indices, check_window, native
from torchloom.io.envi_header import ENVI_DTYPES, INTERLEAVES, EnviHeader, parse_header
from torchloom.io.envi_ranges import object_size, read_window
from torchloom.io.files import Inside, file_info, lies_inside, open_file, read_bytes
from torchloom.io.objects import ObjectRoot

#: Extensions tried, in order, for the data file beside ``name.hdr`` (after ``name`` itself).
DATA_EXTENSIONS = (".img", ".raw", ".dat", ".spe", ".bsq", ".bil", ".bip")
#: A larger ``.hdr`` is refused unread (thousands of bands with names fit in far less).
MAX_HEADER_BYTES = 4 << 20
_HEADER_TOO_LARGE = f"larger than an ENVI header can be ({MAX_HEADER_BYTES:,} bytes): is it the data file?"
#: The array axes each interleave stores, as positions of (line, sample, band).
_DISK_AXES = {"bsq": ("bands", "lines", "samples"), "bil": ("lines", "bands", "samples"), "bip": None}


def read_header(path: str | os.PathLike[str], *, inside: Inside = None) -> EnviHeader:
    """Parse an ENVI ``.hdr`` file (a regular file of at most :data:`MAX_HEADER_BYTES`; an object
    of the store ``inside``, an :class:`~torchloom.io.ObjectRoot`, for a URL).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.hdr")
        >>> text = "ENVI\\nsamples=2\\nlines=1\\nbands=3\\ndata type=4\\ninterleave=bip\\n"
        >>> _ = open(path, "w").write(text)
        >>> read_header(path).dtype.str
        '<f4'
    """
    try:
        data = read_bytes(path, inside=inside, max_bytes=MAX_HEADER_BYTES, too_large=_HEADER_TOO_LARGE)
    except FileNotFoundError as exc:
        raise MissingFileError(f"ENVI header {os.fspath(path)!r} does not exist; check the path") from exc
    return parse_header(data, path)


class EnviCube:
    """An ENVI cube, validated at construction and read lazily a window at a time.

    Build it with :func:`open_envi`. ``shape`` is ``(lines, samples, bands)``; ``read`` returns
    an HWC array in native byte order. ``inside`` is the real folder the data file must lie in on
    every open: by default its header's, and a data file resolving outside it is refused. For a
    cube in an object store it is the :class:`~torchloom.io.ObjectRoot` of the header's prefix,
    and a window is read as the byte ranges it covers (:mod:`torchloom.io.envi_ranges`).

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = write_envi(os.path.join(tempfile.mkdtemp(), "c.img"), np.ones((2, 2, 3), ">f4"),
        ...                   wavelengths=[450.0, 550.0, 650.0])
        >>> cube = open_envi(path)
        >>> cube.dtype.str, cube.wavelengths.tolist(), cube.wavelength_units
        ('<f4', [450.0, 550.0, 650.0], 'Nanometers')
    """

    def __init__(
        self, header: EnviHeader, data_path: str | os.PathLike[str], *, inside: Inside = None
    ) -> None:
        self.header = header
        self._path = os.fspath(data_path)
        #: The real folder (or the store's root prefix) the data file must lie in on every open.
        self.inside = inside if inside is not None else _header_folder(header, self._path)
        if isinstance(self.inside, ObjectRoot):
            _check_size(header, self._path, object_size(self.inside, self._path))
        else:
            check_data_size(header, self._path, inside=self.inside)
        self._memmap: np.memmap | None = None

    @property
    def path(self) -> str:
        """The data file."""
        return self._path

    @property
    def header_path(self) -> str:
        return self.header.path

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.header.shape

    @property
    def dtype(self) -> np.dtype:
        return native(self.header.dtype)

    @property
    def interleave(self) -> str:
        return self.header.interleave

    @property
    def wavelengths(self) -> np.ndarray | None:
        return self.header.wavelengths

    @property
    def wavelength_units(self) -> str | None:
        return self.header.wavelength_units

    @property
    def band_names(self) -> tuple[str, ...] | None:
        return self.header.band_names

    @property
    def memmap(self) -> np.memmap:
        """The data as stored, shaped ``(bands, lines, samples)`` for bsq, ``(lines, bands, samples)``
        for bil, ``(lines, samples, bands)`` for bip; mapped read-only on first use in this process."""
        if isinstance(self.inside, ObjectRoot):
            raise UsageError(f"{self._path!r} is an object in a store, not mapped: read windows with read()")
        if self._memmap is None:
            self._memmap = _map(self.header, self._path, self.inside)
        return self._memmap

    def read(self, rows: slice | None = None, cols: slice | None = None, bands: Bands = None) -> np.ndarray:
        """The window ``rows × cols`` (slices, clipped to the cube) of ``bands`` as a new HWC array.

        Example:
            >>> import numpy as np, os, tempfile
            >>> data = np.arange(12, dtype=np.uint16).reshape(2, 2, 3)
            >>> cube = open_envi(write_envi(os.path.join(tempfile.mkdtemp(), "b"), data))
            >>> cube.read(cols=slice(1, 2), bands=[2, 0]).tolist()
            [[[5, 3]], [[11, 9]]]
        """
        rows, cols = check_window(rows, cols)
        chosen = band_indices(bands, self.shape[2])
        if isinstance(self.inside, ObjectRoot):
            lines, samples, count = self.shape
            picked = np.arange(count)[chosen]
            window = read_window(
                self.header, self._path, self.inside, range(lines)[rows], range(samples)[cols], picked
            )
            return window.astype(self.dtype)  # a new array in native byte order
        stored = self.memmap
        _check_not_shrunk(self.header, self._path)
        if self.interleave == "bsq":
            window = stored[chosen, rows, cols].transpose(1, 2, 0)
        elif self.interleave == "bil":
            window = stored[rows, chosen, cols].transpose(0, 2, 1)
        else:
            window = stored[rows, cols, chosen]
        out = np.empty(window.shape, dtype=self.dtype)
        out[...] = window  # one copy, swapping bytes when the file's order is not native
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_memmap"] = None  # each process maps the file itself; never pickle the data
        return state

    def __repr__(self) -> str:
        return (
            f"EnviCube({self.path!r}, shape={self.shape}, dtype={self.dtype}, interleave={self.interleave!r})"
        )


def open_envi(path: str | os.PathLike[str], *, inside: ObjectRoot | None = None) -> EnviCube:
    """Open an ENVI cube from its ``.hdr`` header or from its data file; for a URL, ``inside`` is
    the store's root the header and the data file are read from (both must lie below it).

    Raises :class:`HeaderError` (a :class:`DecodeError`) for a malformed header,
    :class:`DecodeError` for a data file of the wrong size, :class:`MissingFileError` when the
    header or the data file cannot be found, and :class:`torchloom.errors.UnsafeFileError` for a
    FIFO or a device.

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = write_envi(os.path.join(tempfile.mkdtemp(), "d.raw"), np.zeros((3, 4, 5), np.uint8))
        >>> open_envi(path[: -len(".raw")] + ".hdr").shape
        (3, 4, 5)
    """
    path = os.fspath(path)
    if inside is not None:
        return _open_object(path, inside)
    if path.lower().endswith(".hdr"):
        header = read_header(path)
        if header.data_file is not None:
            return EnviCube(header, _named_data_file(header, header.data_file))
        return EnviCube(header, _data_file_beside(header))
    header_path = next((name for name in _header_candidates(path) if os.path.lexists(name)), None)
    if header_path is None:
        raise MissingFileError(
            f"no ENVI header found for {path!r}; tried {_header_candidates(path)}: put the .hdr beside it"
        )
    return EnviCube(read_header(header_path), path)


def _open_object(url: str, root: ObjectRoot) -> EnviCube:
    """:func:`open_envi` of an object: names tried by GET (a store has no cheap "exists")."""
    if url.lower().endswith(".hdr"):
        header = read_header(url, inside=root)
        if header.data_file is not None:
            return EnviCube(header, _named_data_file(header, header.data_file), inside=root)
        stem = url[: -len(".hdr")]
        for name in [stem] + [stem + ext for ext in DATA_EXTENSIONS]:
            with contextlib.suppress(MissingFileError):
                return EnviCube(header, name, inside=root)
        raise MissingFileError(
            f"no data object beside ENVI header {url!r} (tried {stem!r} with no extension and "
            f"{', '.join(DATA_EXTENSIONS)}); name it with a 'data file = ...' line in the header"
        )
    for name in _header_candidates(url):
        with contextlib.suppress(MissingFileError):
            return EnviCube(read_header(name, inside=root), url, inside=root)
    raise MissingFileError(
        f"no ENVI header found for {url!r}; tried {_header_candidates(url)}: put the .hdr beside it"
    )


def check_data_size(header: EnviHeader, data_path: str, *, inside: Inside = None) -> None:
    """Refuse a data file that is not a regular file of exactly ``header.data_bytes`` bytes (inside
    the real folder ``inside``, when given)."""
    with open_file(data_path, inside=inside) as handle:
        _check_size(header, data_path, os.fstat(handle.fileno()).st_size)


def _check_size(header: EnviHeader, data_path: str, actual: int) -> None:
    expected = header.data_bytes
    if actual != expected:
        lines, samples, bands = header.shape
        raise DecodeError(
            data_path,
            f"holds {actual:,} bytes, but its header {header.path!r} declares {expected:,} "
            f"(header offset {header.header_offset} + {lines} lines × {samples} samples × {bands} bands × "
            f"{header.dtype.itemsize} bytes); the file is truncated or the header does not describe it",
        )


def _check_not_shrunk(header: EnviHeader, data_path: str) -> None:
    """Refuse to touch the map of a data file cut short since it was mapped: reading past a mapped
    file's end kills the process with SIGBUS instead of raising."""
    try:
        size = file_info(data_path).size
    except OSError as exc:
        raise DecodeError(data_path, f"cannot be checked before reading ({exc.strerror or exc})") from exc
    if size < header.data_bytes:
        raise DecodeError(
            data_path,
            f"shrank to {size:,} bytes after it was opened (its header declares {header.data_bytes:,}); "
            "something rewrote it while it was in use: rebuild the dataset once it is complete",
        )


def _map(header: EnviHeader, data_path: str, inside: Inside) -> np.memmap:
    """Map the data file read-only, checking its size on the descriptor mapped (the file may have
    changed since the cube was opened)."""
    lines, samples, bands = header.shape
    sizes = {"lines": lines, "samples": samples, "bands": bands}
    axes = _DISK_AXES[header.interleave] or ("lines", "samples", "bands")
    with open_file(data_path, inside=inside) as handle:
        _check_size(header, data_path, os.fstat(handle.fileno()).st_size)
        return np.memmap(
            handle,
            dtype=header.dtype,
            mode="r",
            offset=header.header_offset,
            shape=tuple(sizes[a] for a in axes),
        )


def _named_data_file(header: EnviHeader, name: str) -> str:
    """The path of the header's ``data file``: a relative path without ``..``, joined to the
    header's folder (where it leads once symlinks are resolved is :func:`_header_folder`'s check)."""
    if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise HeaderError(
            header.path,
            f"data file = {name!r} must be a relative path inside the header's folder "
            "(no absolute path, no '..')",
        )
    return os.path.join(os.path.dirname(header.path), name)


def _header_folder(header: EnviHeader, data_path: str) -> str:
    """The header's real folder, refusing a data file that resolves outside it: a symlinked file or
    sub-folder leads anywhere, whether the header names the file or it was found beside it."""
    folder = os.path.dirname(header.path)
    root = os.path.realpath(folder or os.curdir)
    real = os.path.realpath(data_path)
    if lies_inside(real, root):
        return root
    fix = "move the data file into that folder, or the header beside it"
    named = header.data_file is not None and os.path.join(folder, header.data_file) == data_path
    if named:
        raise HeaderError(
            header.path,
            f"data file = {header.data_file!r} resolves to {real!r}, outside the header's folder {root!r} "
            f"(through a symlink): {fix}",
        )
    raise UnsafeFileError(
        data_path,
        f"the data file of ENVI header {header.path!r} resolves to {real!r}, outside the header's folder "
        f"{root!r} (through a symlink): {fix}",
    )


def _data_file_beside(header: EnviHeader) -> str:
    stem = header.path[: -len(".hdr")]
    candidates = (
        [stem] + [stem + ext for ext in DATA_EXTENSIONS] + [stem + ext.upper() for ext in DATA_EXTENSIONS]
    )
    found = next((name for name in candidates if os.path.lexists(name) and not os.path.isdir(name)), None)
    if found is None:
        names = ", ".join(os.path.basename(name) for name in candidates[: 1 + len(DATA_EXTENSIONS)])
        raise MissingFileError(
            f"no data file beside ENVI header {header.path!r} (tried {names}, also upper-case); "
            "put it there or name it with a 'data file = ...' line in the header"
        )
    return found


def _header_candidates(data_path: str) -> list[str]:
    stem = os.path.splitext(data_path)[0]
    names = [data_path + ".hdr", stem + ".hdr", data_path + ".HDR", stem + ".HDR"]
    return list(dict.fromkeys(names))


def write_envi(
    path: str | os.PathLike[str],
    values: np.ndarray,
    *,
    interleave: str = "bsq",
    byte_order: int | None = None,
    header_offset: int = 0,
    wavelengths: Sequence[float] | np.ndarray | None = None,
    wavelength_units: str = "Nanometers",
    band_names: Sequence[str] | None = None,
) -> str:
    """Write the HWC array ``values`` as an ENVI data file at ``path`` plus ``<stem>.hdr``; return
    ``path``.

    ``byte_order`` is 0 (little-endian) or 1 (big-endian); by default that of ``values``. The header
    goes beside the data as ``path`` without its extension plus ``.hdr``.

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = write_envi(os.path.join(tempfile.mkdtemp(), "w.dat"), np.zeros((1, 2, 3), np.float64))
        >>> sorted(os.listdir(os.path.dirname(path)))
        ['w.dat', 'w.hdr']
    """
    path = os.fspath(path)
    if values.ndim != 3 or interleave not in INTERLEAVES:
        raise ConfigError(
            f"write_envi needs HWC values and one of {INTERLEAVES}, got {values.shape}, {interleave!r}"
        )
    codes = {np.dtype(kind): code for code, kind in ENVI_DTYPES.items()}
    code = codes.get(native(values.dtype))
    if code is None:
        raise ConfigError(f"ENVI stores none of dtype {values.dtype}; use one of {sorted(map(str, codes))}")
    if byte_order is None:
        byte_order = (
            1 if values.dtype.byteorder == ">" or (values.dtype.byteorder == "=" and _big_endian()) else 0
        )
    stored = values.astype(values.dtype.newbyteorder("<" if byte_order == 0 else ">"), copy=False)
    stored = {"bsq": stored.transpose(2, 0, 1), "bil": stored.transpose(0, 2, 1), "bip": stored}[interleave]
    lines = [
        "ENVI",
        f"samples = {values.shape[1]}",
        f"lines = {values.shape[0]}",
        f"bands = {values.shape[2]}",
        f"header offset = {header_offset}",
        "file type = ENVI Standard",
        f"data type = {code}",
        f"interleave = {interleave}",
        f"byte order = {byte_order}",
    ]
    if wavelengths is not None:
        lines += [
            f"wavelength units = {wavelength_units}",
            "wavelength = {" + ", ".join(map(repr, map(float, wavelengths))) + "}",
        ]
    if band_names is not None:
        lines.append("band names = {" + ", ".join(band_names) + "}")
    with open(path, "wb") as handle:
        handle.write(b"\0" * header_offset)
        handle.write(np.ascontiguousarray(stored).tobytes())
    with open(os.path.splitext(path)[0] + ".hdr", "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def _big_endian() -> bool:
    return np.dtype("=i2").str.startswith(">")
