"""HyperspectralDataset: whole cubes with a label each, or pixel-centred patches of labelled pixels.

Cubes are ENVI files or HDF5 datasets (or any :class:`torchloom.io.CubeSource`), read
lazily: a patch reads only its window (a memmap slice, or an h5py slice), never the whole cube.
The index is three int32 arrays (cube, row, col) plus the labels, built once at construction.

Example:
    >>> import numpy as np
    >>> from torchloom.datasets import HyperspectralDataset
    >>> from torchloom.io import ArrayCube
    >>> cube = ArrayCube(np.arange(5 * 5 * 3, dtype=np.int16).reshape(5, 5, 3), path="scene")
    >>> mask = np.zeros((5, 5), np.int64)
    >>> mask[0, 0], mask[2, 3] = 4, 7
    >>> patches = HyperspectralDataset(cube, masks=mask, patch_size=3)
    >>> len(patches), patches[1]["image"].shape, patches[1]["label"], patches[1]["position"]
    (2, torch.Size([3, 3, 3]), 7, (2, 3))
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

import numpy as np
from typing_extensions import Unpack

from torchloom.datasets.base import IndexedDataset, Slot
from torchloom.datasets.index import SampleIndex, StringColumn
from torchloom.datasets.options import SampleOptions, sample_settings
from torchloom.datasets.spatial_split import touches_other_split
from torchloom.errors import ConfigError, EmptyDatasetError, SampleIndexError, check_choice
from torchloom.io.array_size import check_in_memory
from torchloom.io.cube import CubeSource
from torchloom.io.envi import open_envi
from torchloom.io.files import is_url
from torchloom.io.hdf5 import Hdf5Cube, Layout, read_hdf5_array
from torchloom.io.objects import ObjectRoot, ObjectStore

#: A whole-cube sample (``labels=``) larger than this is refused at construction.
MAX_WHOLE_CUBE_BYTES = 8 << 30
_USE_PATCHES = "read it as patches (masks= and patch_size=), or as smaller tiles"
#: File extensions read as HDF5; any other path is read as ENVI (header or data file).
HDF5_EXTENSIONS = (".h5", ".hdf5", ".he5")
Padding = Literal["reflect", "constant"]
PADDINGS = ("reflect", "constant")
CubeLike = str | os.PathLike[str] | CubeSource


def open_cube(
    source: CubeLike, *, array: str = "cube", layout: Layout = "HWC", store: ObjectStore | None = None
) -> CubeSource:
    """A cube from a path (``.h5``/``.hdf5``/``.he5``: the HDF5 dataset named ``array``; else ENVI),
    or ``source`` itself when it is already a cube. A URL is read from ``store``, confined to its
    prefix (an ENVI header and its data file both lie there), by byte ranges.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.envi import write_envi
        >>> path = write_envi(os.path.join(tempfile.mkdtemp(), "a.img"), np.zeros((2, 3, 4), np.uint8))
        >>> open_cube(path).shape
        (2, 3, 4)
    """
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        root = ObjectRoot(path.rsplit("/", 1)[0], store or ObjectStore()) if is_url(path) else None
        if path.lower().endswith(HDF5_EXTENSIONS):
            return Hdf5Cube(path, array, layout=layout, inside=root)
        return open_envi(path, inside=root)
    if not isinstance(source, CubeSource):
        raise ConfigError(
            f"a cube is a path or a CubeSource (shape, dtype, read), got {type(source).__name__}"
        )
    return source


class CubePaths(StringColumn):
    """The path of every sample, stored once per cube: sample ``i`` is ``names[cube[i]]``."""

    __slots__ = ("cube", "names")

    def __init__(self, names: StringColumn, cube: np.ndarray) -> None:
        super().__init__(names.data, names.offsets)
        self.names = names
        self.cube = cube

    def __len__(self) -> int:
        return len(self.cube)

    def __getitem__(self, index: int) -> str:
        size = len(self.cube)
        if not -size <= index < size:
            raise SampleIndexError(f"sample {index} out of range for {size} samples")
        return self.names[int(self.cube[index])]

    def take(self, indices: np.ndarray) -> StringColumn:
        return CubePaths(self.names, self.cube[indices])

    def to_list(self) -> list[str]:
        names = self.names.to_list()
        return [names[cube] for cube in self.cube.tolist()]


class HyperspectralDataset(IndexedDataset):
    """Hyperspectral cubes as samples: whole cubes (``labels=``) or pixel-centred patches (``masks=``).

    Samples are ``{"image": CHW tensor (bands first), "label": int, "index": int, "path": str}``,
    plus ``"position": (row, col)`` of the centre for patches. The image keeps the cube's dtype
    unless ``dtype`` is given (converted before the transform); transforms get the HWC array and
    the sample's rng (see :mod:`torchloom.transforms.bands`).

    Args:
        cubes: one cube or several: paths (ENVI header or data file; ``.h5``/``.hdf5``/``.he5``
            for HDF5) or :class:`torchloom.io.cube.CubeSource` objects.
        labels: one label per cube: each sample is a whole cube.
        masks: per-pixel label masks, one ``(lines, samples)`` integer array per cube, or the
            name of a dataset in each HDF5 file: each labelled pixel is a sample, the patch of
            ``patch_size`` × ``patch_size`` around it, its label the mask's value there.
        patch_size: the patch side (odd), needed with ``masks``.
        padding: how patches are completed past the cube's border: ``"reflect"`` (the default:
            numpy's ``reflect``, mirrored without repeating the edge) or ``"constant"``
            (``pad_value``).
        pad_value: the value of ``"constant"`` padding.
        ignore_label: mask value of unlabelled pixels (never samples); ``None`` keeps every pixel.
        splits: per-pixel split ids, one array per cube (see
            :func:`torchloom.datasets.spatial_block_split`); ``-1`` is no split.
        split: keep only centres whose split id is this.
        guard: with ``splits``, also drop centres whose patch would hold pixels of another split
            (those within ``patch_size // 2`` of another split's block), so no pixel of one split
            reaches another's patches. ``False`` keeps them (patch inputs then overlap; labels never do).
        array: the name of the HDF5 dataset holding each cube; ``layout``: its axes, ``"HWC"`` or
            ``"CHW"``.
        dtype: convert images to this numpy dtype (e.g. ``"float32"``); ``None`` keeps the cube's.
        options: :class:`~torchloom.datasets.SampleOptions`: ``transform(image, rng)`` gets the HWC
            array (its result becomes a CHW tensor), ``on_error``, ``seed``, ``debug``,
            ``storage_options`` (how cube URLs, ``s3://bucket/scenes/a.hdr``, are reached).

    A cube that cannot be opened (a malformed header, a data file of the wrong size, a corrupt
    HDF5 file) raises at construction, naming the file, and so does a whole-cube sample larger
    than :data:`MAX_WHOLE_CUBE_BYTES` (a small HDF5 file may declare any size).

    Example:
        >>> import numpy as np
        >>> from torchloom.io import ArrayCube
        >>> cubes = [ArrayCube(np.zeros((4, 4, 2), np.float32), path=f"c{i}") for i in range(3)]
        >>> whole = HyperspectralDataset(cubes, labels=[0, 1, 1])
        >>> len(whole), whole[2]["image"].shape, whole[2]["label"], whole[2]["path"]
        (3, torch.Size([2, 4, 4]), 1, 'c2')
    """

    def __init__(
        self,
        cubes: CubeLike | Sequence[CubeLike],
        *,
        labels: Sequence[int] | np.ndarray | None = None,
        masks: np.ndarray | Sequence[np.ndarray] | str | None = None,
        patch_size: int | None = None,
        padding: Padding = "reflect",
        pad_value: float = 0,
        ignore_label: int | None = 0,
        splits: np.ndarray | Sequence[np.ndarray] | None = None,
        split: int | None = None,
        guard: bool = True,
        array: str = "cube",
        layout: Layout = "HWC",
        dtype: str | np.dtype | None = None,
        **options: Unpack[SampleOptions],
    ) -> None:
        sample = sample_settings(options, what=type(self))
        listed = list(cubes) if isinstance(cubes, Sequence) and not isinstance(cubes, str) else [cubes]
        self.cubes: list[CubeSource] = [
            open_cube(cube, array=array, layout=layout, store=sample.store) for cube in listed
        ]
        if not self.cubes:
            raise EmptyDatasetError("HyperspectralDataset got no cubes")
        self.patch_size = self._check_settings(labels, masks, patch_size, padding, splits, split)
        self.padding, self.pad_value, self.guard = padding, pad_value, guard
        self.ignore_label, self.split = ignore_label, split
        self.dtype = None if dtype is None else np.dtype(dtype)
        if masks is None or self.patch_size is None:
            index = self._cube_index(labels)
        else:
            split_maps = None if splits is None else self._per_cube(splits, "splits")
            index = self._patch_index(self._masks(masks), split_maps, self.patch_size)
        super().__init__(index, sample)
        #: Each sample's cube number, and its centre's row and column (0 for whole cubes).
        self.cube_ids = np.asarray(index.columns["cube"])
        self.rows = np.asarray(index.columns["row"])
        self.cols = np.asarray(index.columns["col"])

    # -- construction ------------------------------------------------------------------------------

    def _check_settings(
        self,
        labels: Any,
        masks: Any,
        patch_size: int | None,
        padding: str,
        splits: Any,
        split: int | None,
    ) -> int | None:
        if labels is not None and masks is not None:
            raise ConfigError(
                "pass labels= (one per cube: whole cubes) or masks= (per pixel: patches), not both"
            )
        check_choice("padding", padding, PADDINGS)
        if (splits is None) != (split is None):
            raise ConfigError("splits= (per-pixel split ids) and split= (the id to keep) go together")
        if masks is None:
            if splits is not None:
                raise ConfigError("splits= selects pixels, so it needs masks= (patch samples)")
            return None
        if not isinstance(patch_size, int) or patch_size < 1 or patch_size % 2 == 0:
            raise ConfigError(
                f"masks= gives patches centred on labelled pixels: pass an odd patch_size >= 1 "
                f"(e.g. 9), got {patch_size!r}"
            )
        return patch_size

    def _per_cube(self, arrays: np.ndarray | Sequence[np.ndarray], name: str) -> list[np.ndarray]:
        """One 2-D integer array per cube, of the cube's ``(lines, samples)``."""
        listed = [arrays] if isinstance(arrays, np.ndarray) else list(arrays)
        if len(listed) != len(self.cubes):
            raise ConfigError(
                f"{name}= has {len(listed)} arrays for {len(self.cubes)} cubes; pass one per cube"
            )
        checked = []
        for cube, array in zip(self.cubes, listed, strict=True):
            array = np.asarray(array)
            check_pixel_map(cube, name, array.shape, array.dtype)
            checked.append(array)
        return checked

    def _masks(self, masks: np.ndarray | Sequence[np.ndarray] | str) -> list[np.ndarray]:
        if isinstance(masks, str):
            # Checked before it is read: a small file may declare a mask of billions of pixels.
            masks = [
                read_hdf5_array(
                    cube.path,
                    masks,
                    check=partial(check_pixel_map, cube, "masks"),
                    inside=cube.inside if isinstance(cube, Hdf5Cube) else None,
                )
                for cube in self.cubes
            ]
        return self._per_cube(masks, "masks")

    def _cube_index(self, labels: Sequence[int] | np.ndarray | None) -> SampleIndex:
        for cube in self.cubes:  # each sample is read whole: refuse one no batch could hold first
            declared = math.prod(cube.shape) * cube.dtype.itemsize
            check_in_memory(cube.path, declared, MAX_WHOLE_CUBE_BYTES, what="the cube", fix=_USE_PATCHES)
        count = len(self.cubes)
        values = np.full(count, -1, np.int64) if labels is None else np.asarray(labels)
        if values.shape != (count,) or not np.issubdtype(values.dtype, np.integer):
            raise ConfigError(f"labels= must hold one int per cube ({count}), got {np.asarray(labels)!r:.80}")
        zeros = np.zeros(count, np.int32)
        return self._index(np.arange(count, dtype=np.int32), zeros, zeros, values.astype(np.int64))

    def _patch_index(
        self, masks: list[np.ndarray], splits: list[np.ndarray] | None, patch_size: int
    ) -> SampleIndex:
        parts: list[tuple[np.ndarray, ...]] = []
        for number, mask in enumerate(masks):
            keep = mask != self.ignore_label if self.ignore_label is not None else np.ones(mask.shape, bool)
            if splits is not None and self.split is not None:
                keep &= splits[number] == self.split
                if self.guard:
                    keep &= ~touches_other_split(splits[number], self.split, patch_size)
            rows, cols = np.nonzero(keep)
            labels = mask[rows, cols].astype(np.int64)
            if len(labels) and int(labels.min()) < 0:
                raise ConfigError(
                    f"masks= for cube {self.cubes[number].path!r} labels pixels with "
                    f"{int(labels.min())}; labels must be >= 0 (a negative label cannot index "
                    f"classes): set ignore_label= to the value of unlabelled pixels "
                    f"(now {self.ignore_label})"
                )
            cube = np.full(len(rows), number, np.int32)
            parts.append((cube, rows.astype(np.int32), cols.astype(np.int32), labels))
        cube, rows, cols, labels = (np.concatenate(column) for column in zip(*parts, strict=True))
        if len(labels) == 0:
            raise EmptyDatasetError(
                f"HyperspectralDataset: no labelled pixel left in {len(self.cubes)} cube(s) "
                f"(ignore_label={self.ignore_label}, split={self.split}, guard={self.guard})"
            )
        return self._index(cube, rows, cols, labels)

    def _index(self, cube: np.ndarray, rows: np.ndarray, cols: np.ndarray, labels: np.ndarray) -> SampleIndex:
        names = StringColumn.from_strings(source.path for source in self.cubes)
        return SampleIndex(CubePaths(names, cube), labels, {"cube": cube, "row": rows, "col": cols})

    # -- metadata ----------------------------------------------------------------------------------

    @property
    def targets(self) -> np.ndarray:
        """Every sample's label (int64)."""
        return self.index.labels

    @property
    def wavelengths(self) -> np.ndarray | None:
        """The first cube's wavelengths (``None`` when it has none)."""
        return self.cubes[0].wavelengths

    def pixel_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The ``(cube, row, col)`` of every patch centre (``None`` for whole cubes): the pixels a
        :class:`torchloom.transforms.pca.PCA` fitted on this dataset draws from."""
        return None if self.patch_size is None else (self.cube_ids, self.rows, self.cols)

    # -- loading -----------------------------------------------------------------------------------

    def _load(self, index: int, key: int, slot: Slot | None) -> dict[str, Any]:
        cube = self.cubes[int(self.cube_ids[index])]
        clock = self.stage_clock
        began = time.perf_counter() if clock is not None else 0.0
        if self.patch_size is None:
            image = cube.read()
        else:
            row, col = int(self.rows[index]), int(self.cols[index])
            image = read_patch(
                cube, row, col, self.patch_size, padding=self.padding, pad_value=self.pad_value
            )
        if self.dtype is not None:
            image = image.astype(self.dtype, copy=False)
        if clock is not None:
            clock.add("read", time.perf_counter() - began)
            began = time.perf_counter()
        if self.transform is not None:
            image = self.transform(image, self.rng(key, slot))
        sample: dict[str, Any] = {
            "image": self._to_tensor(image, slot),
            "label": int(self.index.labels[index]),
            "index": key,
            "path": cube.path,
        }
        if clock is not None:
            clock.add("transform", time.perf_counter() - began)
        if self.patch_size is not None:
            sample["position"] = (row, col)
        return sample

    def __repr__(self) -> str:
        kind = "cubes" if self.patch_size is None else f"{self.patch_size}x{self.patch_size} patches"
        return f"HyperspectralDataset({len(self.cubes)} cube(s), {len(self)} {kind}, split={self.split})"


def check_pixel_map(cube: CubeSource, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse a per-pixel array (``name``: masks or splits) that is not integer and of the cube's
    ``(lines, samples)``."""
    if shape != cube.shape[:2] or not (np.issubdtype(dtype, np.integer) or dtype.kind == "b"):
        raise ConfigError(
            f"{name}= for cube {cube.path!r} must be an integer array of shape {cube.shape[:2]}, "
            f"got {dtype} {shape}"
        )


def read_patch(
    cube: CubeSource, row: int, col: int, size: int, *, padding: Padding = "reflect", pad_value: float = 0
) -> np.ndarray:
    """The ``size`` × ``size`` HWC patch centred on ``(row, col)``, padded past the cube's border.

    Equal to ``np.pad(whole_cube, half, mode=padding)[row:row + size, col:col + size]`` with
    ``half = size // 2``, but reads only the window inside the cube.

    Example:
        >>> import numpy as np
        >>> from torchloom.io import ArrayCube
        >>> read_patch(ArrayCube(np.arange(9).reshape(3, 3, 1)), 0, 0, 3)[:, :, 0].tolist()
        [[4, 3, 4], [1, 0, 1], [4, 3, 4]]
    """
    lines, samples, _ = cube.shape
    half = size // 2
    top, left = row - half, col - half
    rows = slice(max(top, 0), min(top + size, lines))
    cols = slice(max(left, 0), min(left + size, samples))
    window = cube.read(rows, cols)
    pads = (
        (rows.start - top, top + size - rows.stop),
        (cols.start - left, left + size - cols.stop),
        (0, 0),
    )
    if not any(before or after for before, after in pads):
        return window
    if padding == "constant":
        return np.pad(window, pads, mode="constant", constant_values=pad_value)
    return np.pad(window, pads, mode="reflect")
