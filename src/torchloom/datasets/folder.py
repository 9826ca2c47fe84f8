"""FolderDataset: images in one folder per class, the ImageFolder layout, done carefully."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from typing_extensions import Unpack

from torchloom.datasets.base import IndexedDataset, Slot
from torchloom.datasets.discovery import IMAGE_EXTENSIONS, find_samples
from torchloom.datasets.index import DatasetReport, SampleIndex, check_image_file, keep_valid, validate_files
from torchloom.datasets.listing import walked_root
from torchloom.datasets.options import IndexingOptions, IndexingSettings, indexing_settings
from torchloom.datasets.shared_index import built_once, shares_index
from torchloom.datasets.walk import require_folder
from torchloom.errors import EmptyDatasetError, ValidationFailedError
from torchloom.io.files import Inside
from torchloom.io.image import DEFAULT_MAX_PIXELS
from torchloom.io.objects import ObjectStore


class FolderDataset(IndexedDataset):
    """Images under ``root/<class>/...`` (any depth), labelled by their class folder.

    Classes are the sorted names of ``root``'s sub-folders; which files are images is decided by
    :mod:`torchloom.datasets.discovery` (extensions in any case, hidden entries left out, symlinks
    followed inside ``root``, the same rules as ``torchloom doctor`` and ``prepare``). The index is
    built and validated once: invalid files are excluded and listed in :attr:`report`
    (``strict=True`` raises one error listing them all), as are symlinks leading outside ``root``
    and folders that cannot be listed; files that are not samples are ignored and counted there,
    and class folders with no images stay in :attr:`classes` (so label numbers are stable) with a
    warning.

    A split root (``root/train/<class>/...``, ``root/val/...``) is read one split at a time:
    ``split="train"`` reads ``root/train`` with the classes of every split, so that the label
    numbers of the train and val datasets agree. Without ``split``, a split root is a
    :class:`torchloom.errors.ConfigError` naming its splits (never classes named train and val).

    Samples are ``{"image": uint8 CHW tensor, "label": int, "index": int, "path": str}``.

    Args:
        root: the folder holding one sub-folder per class (or one per split: see ``split``).
        split: the split folder of a split root to read (``"train"``, ``"val"``, ...).
        extensions: file extensions that are images.
        max_pixels: larger images are refused (decompression-bomb guard).
        exif_orientation: turn photos upright as their EXIF tag says (default), as viewers do;
            ``False`` keeps the stored pixel order.
        options: the options every dataset of files takes, :class:`~torchloom.datasets.IndexingOptions`:
            ``transform`` (on the HWC ``uint8`` array; its result becomes a CHW tensor),
            ``on_error``, ``seed``, ``debug``, ``validate``, ``strict``, ``allow_outside_root``
            (follow symlinks that lead outside ``root``), ``num_threads``, ``progress``.

    Example:
        >>> import numpy as np, os, simplejpeg, tempfile
        >>> root = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(root, "cat"))
        >>> _ = open(os.path.join(root, "cat", "1.jpg"), "wb").write(
        ...     simplejpeg.encode_jpeg(np.zeros((8, 8, 3), np.uint8)))
        >>> dataset = FolderDataset(root, progress=False)
        >>> dataset.classes, dataset[0]["image"].shape, dataset[0]["label"]
        (['cat'], torch.Size([3, 8, 8]), 0)
    """

    root: str

    _reads_whole_files = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        split: str | None = None,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
        **options: Unpack[IndexingOptions],
    ) -> None:
        sample, indexing = indexing_settings(options, what=type(self))
        root_text = os.fspath(root)
        built = built_once(
            lambda: _index_folder(root_text, sample.store, indexing, split, extensions, max_pixels),
            share=shares_index(indexing.share_index, root_text),
            what=f"FolderDataset {root_text!r} (split={split!r}, extensions={list(extensions)})",
            store=sample.store,
        )
        self.root = built.root
        #: The split folder read (``split=``), or None.
        self.split = built.split
        self.classes = built.classes
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.report = built.report
        super().__init__(built.index, sample, max_pixels=max_pixels, exif_orientation=exif_orientation)
        self.read_root = built.read_root
        self.report.empty_classes = [name for name, count in self.class_counts.items() if count == 0]
        if self.report.empty_classes:
            warnings.warn(
                f"FolderDataset {self.root!r}: class folder(s) {self.report.empty_classes} hold no "
                "usable images; they keep their label numbers but will never be sampled",
                stacklevel=2,
            )

    @property
    def targets(self) -> np.ndarray:
        """The label of every sample, as an ``int64`` array."""
        return self.index.labels

    @property
    def class_counts(self) -> dict[str, int]:
        """Number of samples per class name, empty classes included."""
        counts = np.bincount(self.targets, minlength=len(self.classes))
        return {name: int(count) for name, count in zip(self.classes, counts, strict=False)}

    def _load(self, index: int, key: int, slot: Slot | None) -> dict[str, Any]:
        path = self.index.paths[index]
        return {
            "image": self.load_image(path, self.rng(key, slot), slot),
            "label": int(self.index.labels[index]),
            "index": key,
            "path": path,
        }

    def __repr__(self) -> str:
        return f"FolderDataset({self.root!r}, {len(self)} samples, {len(self.classes)} classes)"


@dataclass(frozen=True)
class _FolderIndex:
    """What a FolderDataset's construction finds: the same on every rank (rank 0 may find it for all)."""

    root: str
    split: str | None
    classes: list[str]
    report: DatasetReport
    index: SampleIndex
    #: Where reads stay, with the sizes and ETags a listing and validation saw.
    read_root: Inside


def _index_folder(
    root: str,
    store: ObjectStore,
    indexing: IndexingSettings,
    split: str | None,
    extensions: Sequence[str],
    max_pixels: int,
) -> _FolderIndex:
    """List ``root`` (a folder or a prefix URL), keep the images that validate, and report the rest."""
    read_root = indexing.read_root(root, store)
    root, lister = walked_root(root, read_root, progress=indexing.progress)
    if lister is None:
        require_folder(root, "FolderDataset root ")
    found = find_samples(
        root,
        extensions=extensions,
        split=split,
        allow_outside_root=indexing.allow_outside_root,
        what="FolderDataset",
        lister=lister,
    )
    if not found.classes:
        loose = f" ({len(found.paths)} file(s) lie directly in it)" if len(found.paths) else ""
        raise EmptyDatasetError(
            f"FolderDataset root {root!r} has no class folders{loose}; expected root/<class>/<image>"
        )
    if indexing.strict and found.refused:
        raise ValidationFailedError(
            f"FolderDataset {root!r}", [(item.path, item.text) for item in found.refused]
        )
    report = DatasetReport()
    found.add_to(report)
    # A listing saw every object: "exists" needs no request more.
    mode = "none" if lister is not None and indexing.validate == "exists" else indexing.validate
    reasons = validate_files(
        found.paths,
        lambda path: check_image_file(path, mode, max_pixels, inside=read_root),
        num_threads=indexing.threads_for(read_root),
        progress=indexing.progress and mode != "none",
        description=f"validating {os.path.basename(root) or root}",
    )
    keep = keep_valid(
        reasons, found.paths.__getitem__, report, strict=indexing.strict, what=f"FolderDataset {root!r}"
    )
    if len(keep) == 0:
        raise EmptyDatasetError(
            f"FolderDataset {root!r} has no usable images "
            f"(extensions {[e.lower() for e in extensions]}):\n{report}"
        )
    split_read = found.split_names[0] if found.layout == "splits" else None
    index = SampleIndex(found.paths, found.labels).take(keep)
    return _FolderIndex(root, split_read, found.classes, report, index, read_root)
