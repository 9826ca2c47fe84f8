"""FolderDataset: images in one folder per class, the ImageFolder layout, done carefully."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from torchloom.datasets.base import IndexedDataset, Slot
from torchloom.datasets.index import (
    VALIDATE_CHOICES,
    DatasetReport,
    SampleIndex,
    StringColumn,
    Validate,
    check_image_file,
    keep_valid,
    validate_files,
)
from torchloom.errors import (
    EmptyDatasetError,
    MissingFileError,
    ValidationFailedError,
    check_choice,
)
from torchloom.faults import FaultPolicy
from torchloom.io.image import DEFAULT_MAX_PIXELS
from torchloom.transforms.base import Transform

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif")


class FolderDataset(IndexedDataset):
    """Images under ``root/<class>/...`` (any depth), labelled by their class folder.

    Classes are the sorted names of ``root``'s sub-folders; files are found recursively, with
    extensions matched case-insensitively. The index is built and validated once: invalid files
    are excluded and listed in :attr:`report` (``strict=True`` raises one error listing them all),
    files with other extensions are ignored and counted there, and class folders with no images
    stay in :attr:`classes` (so label numbers are stable) with a warning.

    Samples are ``{"image": uint8 CHW tensor, "label": int, "index": int, "path": str}``.

    Args:
        root: the folder holding one sub-folder per class.
        transform: ``transform(image, rng)`` on the HWC ``uint8`` array (see
            :mod:`torchloom.transforms`); its result becomes a CHW tensor.
        extensions: file extensions that are images.
        validate: ``"none"``, ``"exists"``, ``"header"`` (default, cheap) or ``"full"`` (decode).
        strict: raise :class:`torchloom.errors.ValidationFailedError` instead of excluding.
        on_error: ``"raise"``, ``"skip"``, ``"retry"`` or a :class:`FaultPolicy`.
        seed: the seed of :func:`torchloom.sample_rng` for :class:`torchloom.SampleKey` keys.
        debug: log the first samples and check all samples share keys, dtypes and dimensions.
        max_pixels: larger images are refused (decompression-bomb guard).
        exif_orientation: turn photos upright as their EXIF tag says (default), as viewers do;
            ``False`` keeps the stored pixel order.
        workers: threads used for validation; ``progress`` shows a bar while it runs.

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

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        transform: Transform | None = None,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        validate: Validate = "header",
        strict: bool = False,
        on_error: str | FaultPolicy = "raise",
        seed: int = 0,
        debug: bool = False,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
        workers: int | None = None,
        progress: bool = True,
    ) -> None:
        check_choice("validate", validate, VALIDATE_CHOICES)
        self.root = os.fspath(root)
        if not os.path.isdir(self.root):
            raise MissingFileError(f"FolderDataset root {self.root!r} is not a folder")
        self.report = DatasetReport()
        self.classes = sorted(
            entry.name for entry in os.scandir(self.root) if entry.is_dir() and not entry.name.startswith(".")
        )
        if not self.classes:
            raise EmptyDatasetError(
                f"FolderDataset root {self.root!r} has no class folders; expected root/<class>/<image>"
            )
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        for entry in os.scandir(self.root):
            if entry.is_file():
                self.report.ignore(entry.path, "file directly in root, not in a class folder")
        lowered = tuple(extension.lower() for extension in extensions)
        paths, labels, unreadable = self._scan(lowered)
        if unreadable and strict:
            raise ValidationFailedError(f"FolderDataset {self.root!r}", unreadable)
        self.report.invalid.extend(unreadable)
        reasons = validate_files(
            paths,
            lambda path: check_image_file(path, validate, max_pixels),
            workers=workers,
            progress=progress and validate != "none",
            description=f"validating {os.path.basename(self.root) or self.root}",
        )
        keep = keep_valid(
            reasons, paths.__getitem__, self.report, strict=strict, what=f"FolderDataset {self.root!r}"
        )
        if len(keep) == 0:
            raise EmptyDatasetError(
                f"FolderDataset {self.root!r} has no usable images "
                f"(extensions {list(lowered)}):\n{self.report}"
            )
        index = SampleIndex(
            StringColumn.from_strings(paths[int(i)] for i in keep),
            np.asarray(labels, dtype=np.int64)[keep],
        )
        super().__init__(
            index,
            transform=transform,
            on_error=on_error,
            seed=seed,
            debug=debug,
            max_pixels=max_pixels,
            exif_orientation=exif_orientation,
        )
        self.report.empty_classes = [name for name, count in self.class_counts.items() if count == 0]
        if self.report.empty_classes:
            warnings.warn(
                f"FolderDataset {self.root!r}: class folder(s) {self.report.empty_classes} hold no "
                "usable images; they keep their label numbers but will never be sampled",
                stacklevel=2,
            )

    def _scan(self, extensions: tuple[str, ...]) -> tuple[list[str], list[int], list[tuple[str, str]]]:
        """Image paths and labels, and the folders that could not be listed (with why)."""
        paths: list[str] = []
        labels: list[int] = []
        unreadable: list[tuple[str, str]] = []

        def note(error: OSError) -> None:
            unreadable.append((str(error.filename), f"cannot list folder: {type(error).__name__}: {error}"))

        for label, name in enumerate(self.classes):
            found: list[str] = []
            for folder, subfolders, files in os.walk(os.path.join(self.root, name), onerror=note):
                subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
                for file_name in files:
                    path = os.path.join(folder, file_name)
                    if os.path.splitext(file_name)[1].lower() in extensions:
                        found.append(path)
                    else:
                        self.report.ignore(path, "extension not in extensions")
            found.sort()
            paths.extend(found)
            labels.extend([label] * len(found))
        return paths, labels, unreadable

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
