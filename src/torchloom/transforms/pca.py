"""PCA of the bands, fitted once on a seeded sample of pixels and saved beside the data.

:meth:`PCA.fit` reads ``pixels`` spectra (one window of 1×1 each, never a whole cube) from the
cubes, or from the sample centres of a :class:`torchloom.datasets.HyperspectralDataset` (so a training
split's PCA never sees validation pixels), and keeps the top ``k`` components. :meth:`PCA.save`
writes an ``.npz`` (no pickle) holding the components and the fit's settings: ``k``, ``pixels``,
``seed``, every cube's description (path, shape, dtype, size and modification time of its file)
and a hash of the candidate pixels. :meth:`PCA.load` given the same inputs refuses a file whose
settings differ, naming what changed, and any file whose arrays disagree with its settings (a
tampered or damaged one: ``k`` components of one value per band, orthonormal, finite), naming the
file; :meth:`PCA.fit_or_load` fits once and reuses the file after.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import ArrayCube
    >>> from torchloom.transforms import PCA
    >>> cube = ArrayCube(np.random.default_rng(0).normal(size=(16, 16, 8)))
    >>> pca = PCA.fit([cube], 3, pixels=100, seed=0)
    >>> pca(cube.read(rows=slice(0, 5), cols=slice(0, 5)), np.random.default_rng(0)).shape
    (5, 5, 3)
    >>> path = os.path.join(tempfile.mkdtemp(), "pca.npz")
    >>> PCA.fit_or_load(path, [cube], 3, pixels=100, seed=0).fingerprint == pca.fingerprint
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from torchloom.errors import ConfigError, DecodeError, TransformError
from torchloom.io.array_size import check_in_memory
from torchloom.io.cube import CubeSource
from torchloom.io.files import open_file
from torchloom.io.npy_header import read_member

#: Version of the saved file's layout; a file of another version is refused.
PCA_FORMAT = 1
DEFAULT_PIXELS = 10_000
#: The arrays a saved PCA holds, and the dtype kinds each may have (the settings are JSON text).
_SAVED = {"format": "iu", "mean": "fiu", "components": "fiu", "variance": "fiu", "settings": "U"}
#: A saved PCA larger than this (its arrays, inflated) is refused unread: 2,000 bands take 32 MB.
MAX_PCA_BYTES = 1 << 30
#: How far from the identity a saved PCA's components times their transpose may be (fitted: 1e-12).
ORTHONORMAL_TOLERANCE = 1e-6
_REFIT = "the file was altered or damaged: delete it and fit again"


@runtime_checkable
class PixelSource(Protocol):
    """Cubes plus the pixels a fit may draw from (a dataset's sample centres), or ``None`` for all.

    A :class:`~torchloom.datasets.HyperspectralDataset` is one: :meth:`PCA.fit` on it draws only
    the labelled pixels its samples are centred on.

    Example:
        >>> import numpy as np
        >>> from torchloom.datasets import HyperspectralDataset
        >>> from torchloom.io import ArrayCube
        >>> from torchloom.transforms import PCA, PixelSource
        >>> cube = ArrayCube(np.random.default_rng(0).normal(size=(6, 6, 4)), path="scene")
        >>> mask = np.zeros((6, 6), np.int64)
        >>> mask[1:5, 1:5] = 1
        >>> patches: PixelSource = HyperspectralDataset(cube, masks=mask, patch_size=3)
        >>> len(patches.cubes), PCA.fit(patches, 2, pixels=16, seed=0).components.shape
        (1, (2, 4))
    """

    @property
    def cubes(self) -> Sequence[CubeSource]: ...

    def pixel_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None: ...


Source = PixelSource | Sequence[CubeSource]


class PCA:
    """Project each pixel's spectrum onto ``k`` principal components (a float32 HWC result).

    Build it with :meth:`fit`, :meth:`load` or :meth:`fit_or_load`.

    Example:
        >>> import numpy as np
        >>> from torchloom.io import ArrayCube
        >>> pca = PCA.fit([ArrayCube(np.random.default_rng(1).random((8, 8, 4)))], 2, pixels=64)
        >>> pca.components.shape, pca.settings["k"]
        ((2, 4), 2)
    """

    def __init__(
        self, mean: np.ndarray, components: np.ndarray, variance: np.ndarray, settings: dict[str, Any]
    ) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.components = np.asarray(components, dtype=np.float64)
        #: Variance of the data along each component, largest first.
        self.variance = np.asarray(variance, dtype=np.float64)
        self.settings = settings
        self._mean32 = self.mean.astype(np.float32)
        self._projection = np.ascontiguousarray(self.components.T, dtype=np.float32)

    @property
    def fingerprint(self) -> str:
        """A hash of the settings the components were fitted with."""
        return fingerprint_of(self.settings)

    @classmethod
    def fit(cls, source: Source, k: int, *, pixels: int = DEFAULT_PIXELS, seed: int = 0) -> PCA:
        """Fit ``k`` components on ``pixels`` spectra drawn (seeded) from ``source``.

        ``source`` is a sequence of cubes or a dataset with ``cubes`` and ``pixel_index()`` (a
        :class:`torchloom.datasets.HyperspectralDataset`: its sample centres are the candidates).
        """
        settings = settings_for(source, k, pixels=pixels, seed=seed)
        spectra = sample_spectra(source, pixels, seed)
        if len(spectra) <= k:
            raise ConfigError(f"PCA.fit drew {len(spectra)} pixels, too few for k={k}; use more pixels")
        mean = spectra.mean(axis=0)
        centred = spectra - mean
        covariance = centred.T @ centred / (len(spectra) - 1)
        values, vectors = np.linalg.eigh(covariance)
        top = np.argsort(values)[::-1][:k]
        components = vectors[:, top].T
        # Fix each component's sign (the largest entry positive): the same data gives the same result.
        signs = np.sign(components[np.arange(k), np.abs(components).argmax(axis=1)])
        return cls(mean, components * signs[:, None], np.maximum(values[top], 0.0), settings)

    @classmethod
    def fit_or_load(
        cls,
        path: str | os.PathLike[str],
        source: Source,
        k: int,
        *,
        pixels: int = DEFAULT_PIXELS,
        seed: int = 0,
    ) -> PCA:
        """Load ``path`` if it was fitted with these settings, else fit and save it there."""
        expected = settings_for(source, k, pixels=pixels, seed=seed)
        if os.path.exists(path):
            saved = cls.load(path)
            if saved.fingerprint == fingerprint_of(expected):
                return saved
        pca = cls.fit(source, k, pixels=pixels, seed=seed)
        pca.save(path)
        return pca

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write an ``.npz`` (no pickle), atomically: a reader never sees half a file."""
        path = os.fspath(path)
        partial = f"{path}.{os.getpid()}.partial"
        with open(partial, "wb") as handle:
            np.savez(
                handle,
                format=np.array(PCA_FORMAT),
                mean=self.mean,
                components=self.components,
                variance=self.variance,
                settings=np.array(json.dumps(self.settings, sort_keys=True)),
            )
        os.replace(partial, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        source: Source | None = None,
        k: int | None = None,
        pixels: int = DEFAULT_PIXELS,
        seed: int = 0,
    ) -> PCA:
        """Read a saved PCA. Given ``source`` and ``k``, refuse it unless it was fitted with the
        same settings (a :class:`ConfigError` naming what differs). A file whose arrays disagree
        with its settings, or hold NaNs, is a :class:`DecodeError` naming it, whatever is given.

        Example:
            >>> import numpy as np, os, tempfile
            >>> path = os.path.join(tempfile.mkdtemp(), "pca.npz")
            >>> np.savez(path, format=1, mean=np.zeros(4), components=np.eye(4)[:3] * np.nan,
            ...          variance=np.ones(3), settings='{"k": 3}')
            >>> PCA.load(path)
            Traceback (most recent call last):
            ...
            torchloom.errors.DecodeError: cannot decode '...pca.npz': the PCA holds values that are not \
finite real numbers (NaN, inf, text); the file was altered or damaged: delete it and fit again
        """
        path = os.fspath(path)
        pca = cls(*checked_arrays(path, read_saved(path)))
        if source is not None or k is not None:
            if source is None or k is None:
                raise ConfigError("PCA.load checks settings only when given both source= and k=")
            expected = settings_for(source, k, pixels=pixels, seed=seed)
            changed = sorted(key for key in expected if expected[key] != pca.settings.get(key))
            if changed:
                raise ConfigError(
                    f"PCA file {path!r} was fitted with other settings ({', '.join(changed)} differ); "
                    "refit it (PCA.fit_or_load refits and saves when they differ)"
                )
        return pca

    def __call__(self, image: Any, rng: np.random.Generator) -> np.ndarray:
        if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != len(self.mean):
            shape = image.shape if isinstance(image, np.ndarray) else type(image).__name__
            raise TransformError(f"{self!r} needs an HWC array of {len(self.mean)} bands, got {shape}")
        height, width, bands = image.shape
        flat = image.reshape(-1, bands).astype(np.float32) - self._mean32
        return np.ascontiguousarray((flat @ self._projection).reshape(height, width, -1))

    def __repr__(self) -> str:
        return f"PCA(k={len(self.components)}, bands={len(self.mean)}, fingerprint={self.fingerprint[:12]})"


def read_saved(path: str) -> dict[str, np.ndarray]:
    """The arrays of a saved PCA, unchecked against each other, but none allocated past what the
    file holds: the members' sizes together at most :data:`MAX_PCA_BYTES`, then each member's npy
    header held to its kind and to the bytes the member inflates to (a 200-byte member may declare
    a terabyte). A file that is not such an npz is a :class:`DecodeError` naming it."""
    with open_file(path) as handle:
        try:
            with zipfile.ZipFile(handle) as archive:
                declared = sum(int(info.file_size) for info in archive.infolist())
                check_in_memory(path, declared, MAX_PCA_BYTES, what="the PCA file", fix=_REFIT)
                return {
                    name: read_member(path, archive, archive.getinfo(f"{name}.npy"), kinds=kinds)
                    for name, kinds in _SAVED.items()
                }
        except DecodeError as exc:
            if exc.reason.endswith(_REFIT):
                raise
            raise DecodeError(path, f"{exc.reason}; {_REFIT}") from exc
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise DecodeError(path, f"not a PCA saved by torchloom ({type(exc).__name__}: {exc})") from exc


def checked_arrays(
    path: str, arrays: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """The mean, components, variance and settings of a saved PCA, checked against each other: the
    settings' ``k`` components of one length per band, orthonormal, finite variances >= 0.
    Anything else (a tampered or damaged file) is a :class:`DecodeError` naming ``path``."""
    version = arrays["format"]
    if version.shape != () or version.dtype.kind not in "iu" or int(version) != PCA_FORMAT:
        raise DecodeError(
            path, f"PCA file format {version!r:.40}; this torchloom reads {PCA_FORMAT}, so {_REFIT}"
        )
    try:
        settings = json.loads(str(arrays["settings"])) if arrays["settings"].shape == () else None
    except (ValueError, RecursionError) as exc:
        raise DecodeError(path, f"the PCA settings are not JSON ({type(exc).__name__}); {_REFIT}") from exc
    if not isinstance(settings, dict):
        raise DecodeError(path, f"the PCA settings are not a JSON object; {_REFIT}")
    k = settings.get("k")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DecodeError(path, f"the PCA settings hold no k >= 1 (the number of components); {_REFIT}")
    values = {name: arrays[name] for name in ("mean", "components", "variance")}
    if any(value.dtype.kind not in "fiu" or not np.isfinite(value).all() for value in values.values()):
        raise DecodeError(
            path, f"the PCA holds values that are not finite real numbers (NaN, inf, text); {_REFIT}"
        )
    mean, components, variance = (value.astype(np.float64) for value in values.values())
    bands = len(mean) if mean.ndim == 1 else 0
    if bands < k or components.shape != (k, bands) or variance.shape != (k,):
        raise DecodeError(
            path,
            f"the PCA holds a mean of shape {mean.shape}, components {components.shape} and variance "
            f"{variance.shape}, not the ({k}, bands) its settings (k={k}) declare; {_REFIT}",
        )
    gram = components @ components.T
    if (variance < 0).any() or not np.allclose(gram, np.eye(k), atol=ORTHONORMAL_TOLERANCE):
        raise DecodeError(
            path, f"the PCA components are not orthonormal, or a variance is < 0; {_REFIT}"
        )
    return mean, components, variance, settings


def cubes_of(source: Source) -> list[CubeSource]:
    """The cubes of a source, which must agree on their band count and hold real numbers."""
    cubes = list(source.cubes if isinstance(source, PixelSource) else source)
    if not cubes:
        raise ConfigError("PCA needs at least one cube")
    counts = {cube.shape[2] for cube in cubes}
    if len(counts) != 1:
        raise ConfigError(f"PCA needs cubes with the same number of bands, got {sorted(counts)}")
    complex_cube = next((cube for cube in cubes if np.issubdtype(cube.dtype, np.complexfloating)), None)
    if complex_cube is not None:
        raise ConfigError(
            f"PCA of complex values is not supported ({complex_cube.path!r} is {complex_cube.dtype})"
        )
    return cubes


def candidates_of(source: Source) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The ``(cube, row, col)`` pixels a fit may draw from, or ``None`` for every pixel."""
    return source.pixel_index() if isinstance(source, PixelSource) else None


def sample_spectra(source: Source, pixels: int, seed: int) -> np.ndarray:
    """``pixels`` spectra (float64, one row each) drawn without replacement, seeded by ``seed``."""
    cubes = cubes_of(source)
    rng = np.random.default_rng(seed)
    candidates = candidates_of(source)
    if candidates is None:
        sizes = np.array([cube.shape[0] * cube.shape[1] for cube in cubes], dtype=np.int64)
        flat = rng.choice(int(sizes.sum()), size=min(pixels, int(sizes.sum())), replace=False)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        cube_ids = np.searchsorted(starts, flat, side="right") - 1
        within = flat - starts[cube_ids]
        widths = np.array([cube.shape[1] for cube in cubes], dtype=np.int64)[cube_ids]
        rows, cols = within // widths, within % widths
    else:
        all_cubes, all_rows, all_cols = candidates
        chosen = rng.choice(len(all_cubes), size=min(pixels, len(all_cubes)), replace=False)
        cube_ids, rows, cols = all_cubes[chosen], all_rows[chosen], all_cols[chosen]
    order = np.lexsort((cols, rows, cube_ids))  # read in file order
    spectra = np.empty((len(order), cubes[0].shape[2]), dtype=np.float64)
    for out, i in enumerate(order):
        row, col = int(rows[i]), int(cols[i])
        spectra[out] = cubes[int(cube_ids[i])].read(slice(row, row + 1), slice(col, col + 1))[0, 0]
    return spectra


def settings_for(source: Source, k: int, *, pixels: int, seed: int) -> dict[str, Any]:
    """What a fit depends on, as plain JSON-able values."""
    if not isinstance(k, int) or k < 1 or not isinstance(pixels, int) or pixels < 1 or seed < 0:
        raise ConfigError(f"PCA needs k >= 1, pixels >= 1 and seed >= 0, got {k=}, {pixels=}, {seed=}")
    cubes = cubes_of(source)
    if k > cubes[0].shape[2]:
        raise ConfigError(f"PCA k={k} is more than the cubes' {cubes[0].shape[2]} bands")
    candidates = candidates_of(source)
    digest = None
    if candidates is not None:
        hasher = hashlib.sha256()
        for column in candidates:
            hasher.update(np.ascontiguousarray(column, dtype=np.int64).tobytes())
        digest = hasher.hexdigest()
    return {
        "version": PCA_FORMAT,
        "k": k,
        "pixels": pixels,
        "seed": seed,
        "cubes": [_describe(cube) for cube in cubes],
        "candidates": digest,
    }


def fingerprint_of(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()


def _describe(cube: CubeSource) -> str:
    """A cube's repr plus its file's size and modification time (when it is a file)."""
    try:
        status = os.stat(cube.path)
        stamp = f" size={status.st_size} mtime_ns={status.st_mtime_ns}"
    except OSError:
        stamp = ""
    return f"{cube!r}{stamp}"
