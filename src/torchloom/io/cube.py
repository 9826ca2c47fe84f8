"""What every hyperspectral cube reader offers: a lazy ``(lines, samples, bands)`` cube read in windows.

:class:`CubeSource` is the protocol the ENVI and HDF5 readers implement, so datasets and band
transforms work on either; :class:`ArrayCube` wraps an in-memory array the same way.
Selections are normalised here once: rows and columns are slices (clipped to the cube, as numpy
clips them), bands are ``None`` (all), a slice, or a sequence of indices.

Example:
    >>> import numpy as np
    >>> from torchloom.io import ArrayCube
    >>> cube = ArrayCube(np.arange(24).reshape(2, 3, 4))
    >>> cube.shape, cube.read(rows=slice(1, 2), bands=[3, 0]).tolist()
    ((2, 3, 4), [[[15, 12], [19, 16], [23, 20]]])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from torchloom.errors import ConfigError, SampleIndexError

#: Band selections a reader accepts: all bands, a slice, or indices in any order.
Bands = slice | Sequence[int] | np.ndarray | None


@runtime_checkable
class CubeSource(Protocol):
    """A cube of ``lines × samples × bands`` values read lazily, a window at a time.

    :class:`~torchloom.io.ArrayCube`, :class:`~torchloom.io.EnviCube` and
    :class:`~torchloom.io.Hdf5Cube` satisfy it, and so does any class with these members.

    Example:
        >>> import numpy as np
        >>> from torchloom.io import ArrayCube, CubeSource
        >>> cube: CubeSource = ArrayCube(np.zeros((8, 6, 5), np.float32), path="scene")
        >>> cube.shape, cube.read(rows=slice(0, 2), cols=slice(0, 3), bands=[4]).shape
        ((8, 6, 5), (2, 3, 1))
    """

    @property
    def path(self) -> str:
        """The file the cube is read from (named in errors)."""
        ...

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(lines, samples, bands)``: height, width and channels."""
        ...

    @property
    def dtype(self) -> np.dtype:
        """The values' type, in native byte order."""
        ...

    @property
    def wavelengths(self) -> np.ndarray | None:
        """Each band's centre wavelength (float64), or ``None`` when the file does not say."""
        ...

    def read(self, rows: slice | None = None, cols: slice | None = None, bands: Bands = None) -> np.ndarray:
        """The window ``rows × cols`` of ``bands`` as a new HWC array in native byte order."""
        ...


def check_window(rows: slice | None, cols: slice | None) -> tuple[slice, slice]:
    """Rows and columns as slices (``None`` is everything); a negative step is refused.

    Example:
        >>> check_window(None, slice(2, 5))
        (slice(None, None, None), slice(2, 5, None))
    """
    window = []
    for name, value in (("rows", rows), ("cols", cols)):
        if value is None:
            value = slice(None)
        if not isinstance(value, slice):
            raise ConfigError(f"{name} must be a slice or None, got {type(value).__name__}: {value!r}")
        if value.step is not None and value.step < 1:
            raise ConfigError(f"{name}={value!r}: the step must be >= 1 (read forwards, then flip)")
        window.append(value)
    return window[0], window[1]


def band_indices(bands: Bands, count: int) -> slice | np.ndarray:
    """``bands`` as a slice, or as an int64 array of indices in ``[0, count)`` (negatives wrap).

    Example:
        >>> band_indices([0, -1], 5).tolist(), band_indices(None, 5)
        ([0, 4], slice(None, None, None))
    """
    if bands is None:
        return slice(None)
    if isinstance(bands, slice):
        if bands.step is not None and bands.step < 1:
            raise ConfigError(f"bands={bands!r}: the step must be >= 1")
        return bands
    indices = np.asarray(bands)
    if indices.ndim != 1 or not (indices.size == 0 or np.issubdtype(indices.dtype, np.integer)):
        raise ConfigError(f"bands must be a slice or a 1-D sequence of ints, got {bands!r}")
    indices = indices.astype(np.int64)
    if indices.size and (indices.min() < -count or indices.max() >= count):
        raise SampleIndexError(f"bands {indices.tolist()} out of range for a cube of {count} bands")
    return np.where(indices < 0, indices + count, indices)


def native(dtype: np.dtype) -> np.dtype:
    """``dtype`` in this machine's byte order."""
    return dtype.newbyteorder("=")


class ArrayCube:
    """An in-memory HWC array as a :class:`CubeSource` (for tests, or data already loaded).

    Args:
        values: a ``(lines, samples, bands)`` array.
        path: what errors and samples call it.
        wavelengths: one float per band, or ``None``.

    Example:
        >>> import numpy as np
        >>> ArrayCube(np.zeros((4, 5, 6), np.int16), wavelengths=np.arange(6.0)).wavelengths[-1]
        np.float64(5.0)
    """

    def __init__(
        self,
        values: np.ndarray,
        *,
        path: str | os.PathLike[str] = "<array>",
        wavelengths: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        if values.ndim != 3 or min(values.shape) < 1:
            raise ConfigError(
                f"ArrayCube needs a non-empty (lines, samples, bands) array, got {values.shape}"
            )
        self.values = values
        self._path = os.fspath(path)
        self._wavelengths = None if wavelengths is None else np.asarray(wavelengths, dtype=np.float64)
        if self._wavelengths is not None and self._wavelengths.shape != (values.shape[2],):
            raise ConfigError(
                f"ArrayCube got {self._wavelengths.shape} wavelengths for {values.shape[2]} bands"
            )

    @property
    def path(self) -> str:
        return self._path

    @property
    def shape(self) -> tuple[int, int, int]:
        lines, samples, bands = self.values.shape
        return int(lines), int(samples), int(bands)

    @property
    def dtype(self) -> np.dtype:
        return native(self.values.dtype)

    @property
    def wavelengths(self) -> np.ndarray | None:
        return self._wavelengths

    def read(self, rows: slice | None = None, cols: slice | None = None, bands: Bands = None) -> np.ndarray:
        rows, cols = check_window(rows, cols)
        window = self.values[rows, cols][:, :, band_indices(bands, self.shape[2])]
        return np.array(window, dtype=self.dtype, order="C")

    def __repr__(self) -> str:
        return f"ArrayCube({self.path!r}, shape={self.shape}, dtype={self.dtype})"
