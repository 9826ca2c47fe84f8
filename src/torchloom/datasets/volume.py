"""VolumeDataset: 3D volumes (CT, MRI, microscopy stacks) from ``.npy`` and ``.npz`` files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from typing_extensions import Unpack

from torchloom.datasets.base import Slot
from torchloom.datasets.options import IndexingOptions
from torchloom.datasets.sources import ProbedFileDataset, Source
from torchloom.errors import DataError, TransformError
from torchloom.io.files import Inside
from torchloom.io.volume import (
    DEFAULT_MAX_VOLUME_BYTES,
    VolumeHeader,
    probe_volume,
    read_volume,
    verify_volume,
)

#: File extensions that are volumes: NumPy arrays, one per file (matched in any case).
VOLUME_EXTENSIONS = (".npy", ".npz")
#: A volume is (D, H, W) or (C, D, H, W).
VOLUME_NDIMS = (3, 4)


class VolumeDataset(ProbedFileDataset[VolumeHeader]):
    """Volumes from ``.npy`` files or ``.npz`` members, labelled by class folder or manifest column.

    Sources are those of :class:`torchloom.datasets.VideoClipDataset`: a folder (class folders,
    one split of a split root chosen with ``split``, or files directly in it, unlabelled), a
    manifest file or :class:`~torchloom.datasets.Manifest`, or a list of paths. Every
    header is probed at construction, in threads, without reading data: a file that is not a
    ``(D, H, W)`` or ``(C, D, H, W)`` numeric array, or is truncated, is left out and listed in
    :attr:`report` (``strict=True`` raises). Shapes go into :attr:`shapes`, an ``int64``
    ``(N, 4)`` array of ``(C, D, H, W)`` with ``C = 0`` for volumes without a channel axis.

    ``.npy`` files and stored npz members are memory-mapped (see :mod:`torchloom.io.volume`):
    the transform receives the read-only memmap, so a crop reads only its region; compressed
    members are read whole. Samples are ``{"volume": tensor (C?, D, H, W) in the file's dtype,
    "label": int (when labels are known), "index", "path"}``. Batch volumes of different sizes
    with :class:`torchloom.collation.CropOrPadVolumes`.

    Args:
        source: a folder, a manifest file, a :class:`~torchloom.datasets.Manifest` or a list of
            ``.npy`` / ``.npz`` paths.
        array: the npz member to read (None: the only member).
        max_bytes: largest compressed member read into memory.
        extensions: file extensions that are volumes, in a folder source.
        split: the split folder of a split-root folder source, as in
            :class:`torchloom.datasets.VideoClipDataset`.
        options: :class:`~torchloom.datasets.IndexingOptions`. ``transform(volume, rng)`` gets the
            array and returns an array or a tensor. ``validate`` is ``"header"`` (default) or
            ``"full"`` (read every volume once at construction: a compressed member that does not
            inflate is left out then, not met in training).

    Example:
        >>> import numpy as np, os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> np.save(os.path.join(root, "a.npy"), np.zeros((4, 8, 8), np.int16))
        >>> np.savez(os.path.join(root, "b.npz"), ct=np.ones((6, 8, 8), np.int16))
        >>> volumes = VolumeDataset(root, array="ct", progress=False)
        >>> [tuple(volumes[i]["volume"].shape) for i in range(2)], volumes[1]["volume"].dtype
        ([(4, 8, 8), (6, 8, 8)], torch.int16)
    """

    def __init__(
        self,
        source: Source,
        *,
        array: str | None = None,
        max_bytes: int = DEFAULT_MAX_VOLUME_BYTES,
        extensions: Sequence[str] = VOLUME_EXTENSIONS,
        split: str | None = None,
        **options: Unpack[IndexingOptions],
    ) -> None:
        self.array = array
        self.max_bytes = max_bytes
        super().__init__(source, extensions=extensions, split=split, **options)

    def probe(self, path: str, inside: Inside) -> VolumeHeader:
        if self.validate == "full":
            header = verify_volume(path, array=self.array, inside=inside, max_bytes=self.max_bytes)
        else:
            header = probe_volume(path, array=self.array, inside=inside)
        if len(header.shape) not in VOLUME_NDIMS:
            raise DataError(f"shape {header.shape} is not a (D, H, W) or (C, D, H, W) volume")
        return header

    def header_columns(self, headers: list[VolumeHeader]) -> dict[str, np.ndarray]:
        shapes = [(0, *h.shape) if len(h.shape) == 3 else h.shape for h in headers]
        return {"shape": np.array(shapes, dtype=np.int64).reshape(-1, 4)}

    @property
    def shapes(self) -> np.ndarray:
        """``(C, D, H, W)`` of every volume, ``C = 0`` where the file has no channel axis."""
        return cast(np.ndarray, self.index.columns["shape"])

    def _load(self, index: int, key: int, slot: Slot | None) -> dict[str, Any]:
        path = self.index.paths[index]
        volume = read_volume(path, array=self.array, inside=self.read_root, max_bytes=self.max_bytes)
        if self.transform is not None:
            volume = self.transform(volume, self.rng(key, slot))
        return self.labelled({"volume": volume_tensor(volume)}, index, key)

    def __repr__(self) -> str:
        return f"VolumeDataset({self.source_name!r}, {len(self)} volumes, array={self.array!r})"


def volume_tensor(volume: Any) -> torch.Tensor:
    """A volume (array or memmap, any byte order) as a contiguous tensor of its own dtype, copied
    out of the file; tensors pass through.

    Example:
        >>> volume_tensor(np.zeros((2, 3, 4), ">f4")).dtype
        torch.float32
    """
    if isinstance(volume, torch.Tensor):
        return volume
    if not isinstance(volume, np.ndarray):
        raise TransformError(
            f"the transform returned a {type(volume).__name__}, but a volume must be a numpy array or a "
            "tensor; make the transform return one (a bug in the pipeline, so no fault policy skips it)"
        )
    return torch.from_numpy(np.array(volume, dtype=volume.dtype.newbyteorder("="), order="C", copy=True))
