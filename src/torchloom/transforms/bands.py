"""Band selection on HWC cubes and patches: random subsets, fixed indices, wavelength ranges.

Each is a transform ``(image, rng) -> image`` on an HWC array whose last axis is the bands. Random
subsets come from the sample's rng, so they are the same for a :class:`torchloom.SampleKey` in
any worker and differ between epochs. Asking for a band the image does not have is a
:class:`TransformError` (a bug in the pipeline, never skipped as a data fault).
PCA to a few components is :class:`torchloom.transforms.pca.PCA`.

Example:
    >>> import numpy as np
    >>> from torchloom.transforms import RandomBands, SelectBands
    >>> patch = np.arange(2 * 2 * 6).reshape(2, 2, 6)
    >>> RandomBands(3)(patch, np.random.default_rng(0)).shape
    (2, 2, 3)
    >>> SelectBands([5, 0])(patch, np.random.default_rng(0))[0, 0].tolist()
    [5, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from torchloom.errors import ConfigError, TransformError

WavelengthRange = tuple[float, float]


def _bands_of(image: Any, transform: object) -> int:
    if not isinstance(image, np.ndarray) or image.ndim != 3:
        kind = f"array of shape {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        raise TransformError(f"{transform!r} needs an HWC numpy array (bands last), got a {kind}")
    return int(image.shape[2])


class RandomBands:
    """Keep ``k`` bands drawn without replacement from the sample's rng, in increasing order.

    Args:
        k: how many bands to keep (at most the image's band count).

    Example:
        >>> import numpy as np
        >>> bands = RandomBands(2)
        >>> image = np.arange(5)[None, None, :]
        >>> bands(image, np.random.default_rng(1)).ravel().tolist() == sorted(
        ...     bands(image, np.random.default_rng(1)).ravel().tolist())
        True
    """

    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or k < 1:
            raise ConfigError(f"RandomBands needs k >= 1, got k={k!r}")
        self.k = k

    def draw(self, bands: int, rng: np.random.Generator) -> np.ndarray:
        """The sorted indices of the bands kept from an image of ``bands`` bands."""
        if self.k > bands:
            raise TransformError(f"{self!r} asks for more bands than the image's {bands}; use k <= {bands}")
        return np.sort(rng.choice(bands, size=self.k, replace=False))

    def __call__(self, image: Any, rng: np.random.Generator) -> np.ndarray:
        return np.ascontiguousarray(image[:, :, self.draw(_bands_of(image, self), rng)])

    def __repr__(self) -> str:
        return f"RandomBands(k={self.k})"


class SelectBands:
    """Keep the bands at fixed ``indices`` (in the order given).

    Example:
        >>> import numpy as np
        >>> SelectBands([2])(np.arange(4)[None, None, :], np.random.default_rng(0)).tolist()
        [[[2]]]
    """

    def __init__(self, indices: Sequence[int] | np.ndarray) -> None:
        chosen = np.asarray(indices)
        if chosen.ndim != 1 or chosen.size == 0 or not np.issubdtype(chosen.dtype, np.integer):
            raise ConfigError(
                f"{type(self).__name__} needs a non-empty list of band indices, got {indices!r}"
            )
        if chosen.min() < 0:
            raise ConfigError(f"band indices must be >= 0, got {chosen.tolist()}")
        self.indices = chosen.astype(np.int64)

    def __call__(self, image: Any, rng: np.random.Generator) -> np.ndarray:
        bands = _bands_of(image, self)
        if self.indices.max() >= bands:
            raise TransformError(
                f"{self!r} selects band {int(self.indices.max())}, but the image has {bands} bands"
            )
        return np.ascontiguousarray(image[:, :, self.indices])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.indices.tolist()})"


class WavelengthBands(SelectBands):
    """Keep the bands whose wavelength lies in any of ``ranges`` (inclusive), in band order.

    Args:
        ranges: one ``(low, high)`` range or several, in the units of ``wavelengths``.
        wavelengths: each band's wavelength, e.g. ``cube.wavelengths`` or ``dataset.wavelengths``.

    Example:
        >>> import numpy as np
        >>> visible = WavelengthBands((400, 700), wavelengths=[350.0, 450.0, 650.0, 900.0])
        >>> visible.indices.tolist()
        [1, 2]
    """

    def __init__(
        self,
        ranges: WavelengthRange | Sequence[WavelengthRange],
        *,
        wavelengths: Sequence[float] | np.ndarray | None,
    ) -> None:
        if wavelengths is None:
            raise ConfigError(
                "WavelengthBands needs the bands' wavelengths, and this source has none "
                "(the ENVI header has no 'wavelength' key, or the HDF5 dataset no 'wavelength' attribute); "
                "select bands by index with SelectBands"
            )
        values = np.asarray(wavelengths, dtype=np.float64)
        pairs = np.asarray(ranges, dtype=np.float64).reshape(-1, 2)
        if (pairs[:, 0] > pairs[:, 1]).any():
            raise ConfigError(f"each wavelength range must be (low, high), got {pairs.tolist()}")
        inside = ((values[:, None] >= pairs[:, 0]) & (values[:, None] <= pairs[:, 1])).any(axis=1)
        if not inside.any():
            raise ConfigError(
                f"no band lies in {pairs.tolist()}; the wavelengths span {values.min():g}–{values.max():g}"
            )
        super().__init__(np.flatnonzero(inside))
        self.ranges = [tuple(pair) for pair in pairs.tolist()]
