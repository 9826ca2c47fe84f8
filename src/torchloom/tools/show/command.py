"""``torchloom show``: a grid of samples as the model gets them, or one collated batch with its masks.

::

    torchloom show DATA [--split NAME] [--n 16] [--out grid.png] [--transform SPEC] [--batch]
                        [--multiple-of 1] [--seed 0]

DATA is a class folder (read with :class:`torchloom.FolderDataset`; a split root needs
``--split``) or a manifest (read with :class:`torchloom.ManifestDataset`, default fields ``image``
and ``label``), local or in an object store (``s3://...`` with ``--storage-option``: see
:mod:`torchloom.tools.storage`). ``--n`` samples are drawn with ``--seed`` and transformed with their own
``(seed, epoch 0, index)`` generator, so the same command draws the same grid. ``--transform`` is parsed by
:func:`torchloom.tools.show.transform_spec.parse_transform_spec` (no ``eval``). With ``--batch``
the samples are collated by ``Collate({"image": PadImages(multiple_of=...)})`` and each padded
image is drawn with its padding (``image_mask`` False) hatched red.

What the dataset left out is printed on stderr, a line per reason with its first files (files
that are not images are ignored without changing the exit status). Exit status: 0 when the grid
was written; 1 when the data could not be read (one line says why), a file failed validation or a
sample failed to load (the others are drawn) or matplotlib is missing; 2 for a usage error (bad
``--transform``, a DATA that does not exist, ``--n`` below 1).

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> args = add_parser(parser.add_subparsers()).parse_args(["data", "--batch"])
    >>> args.n, args.out, args.batch
    (16, 'grid.png', True)
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any

import numpy as np
import torch

from torchloom.collation import AsList, Collate, PadImages
from torchloom.datasets import FolderDataset, ManifestDataset
from torchloom.datasets.base import IndexedDataset
from torchloom.datasets.index import DatasetReport
from torchloom.datasets.manifest import MissingFilesWarning
from torchloom.datasets.opening import open_image_dataset
from torchloom.errors import ConfigError, TorchloomError
from torchloom.faults import Skipped
from torchloom.io.files import is_url
from torchloom.seeding import SampleKey
from torchloom.tools.show.grid import Tile, draw_grid
from torchloom.tools.show.transform_spec import ALLOWED_TRANSFORMS, parse_transform_spec
from torchloom.tools.storage import refuse_url_output, storage_options_of
from torchloom.tools.terminal import (
    EXIT_CLEAN,
    EXIT_PROBLEMS,
    add_data_arguments,
    fail,
    print_left_out,
    printable,
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``show`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "show",
        help="draw a grid of transformed samples (or one collated batch with its padding masks)",
        description="Draw --n samples of DATA as the model gets them, titled with class, label and index.",
    )
    add_data_arguments(parser)
    parser.add_argument("--n", type=int, default=16, help="number of samples (default 16)")
    parser.add_argument("--out", default="grid.png", help="the PNG to write (default grid.png)")
    parser.add_argument(
        "--transform",
        default="",
        help=f"e.g. 'RandomResizedCrop(224),HorizontalFlip()'; allowed: {', '.join(ALLOWED_TRANSFORMS)}",
    )
    parser.add_argument("--batch", action="store_true", help="collate the samples into one padded batch")
    parser.add_argument(
        "--multiple-of", type=int, default=1, help="--batch: pad sizes up to a multiple of this"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample choice and augmentation")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the command from parsed arguments; returns the exit status."""
    try:
        transform = parse_transform_spec(args.transform)
        if args.n < 1 or args.seed < 0 or args.multiple_of < 1:
            raise ConfigError(
                f"--n and --multiple-of must be >= 1 and --seed >= 0 (got {args.n}, "
                f"{args.multiple_of}, {args.seed})"
            )
        if not is_url(args.data) and not os.path.exists(args.data):
            raise ConfigError(f"DATA {args.data!r} does not exist; pass a class folder or a manifest file")
        refuse_url_output("--out", args.out)
        storage_options = storage_options_of(args)
        folder = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(folder) or os.path.isdir(args.out):
            raise ConfigError(
                f"--out {args.out!r} must be a file path in an existing folder; create {folder!r} first"
            )
    except ConfigError as exc:
        return fail("show", exc)
    try:
        dataset = open_dataset(
            args.data,
            transform=transform,
            seed=args.seed,
            split=args.split,
            allow_outside_root=args.allow_outside_root,
            storage_options=storage_options,
        )
        report = dataset.report if isinstance(dataset, (FolderDataset, ManifestDataset)) else DatasetReport()
        print_left_out("show", report.summary(root=getattr(dataset, "root", None)))
        invalid = report.invalid
        indices = choose_indices(len(dataset), args.n, seed=args.seed)
        samples = [dataset[SampleKey(int(index), 0)] for index in indices]
        failed = [sample for sample in samples if isinstance(sample, Skipped)]
        for skipped in failed:
            print(
                f"torchloom show: sample {skipped.index} ({skipped.path}) failed: {skipped.reason}",
                file=sys.stderr,
            )
        good = [sample for sample in samples if not isinstance(sample, Skipped)]
        if not good:
            print("torchloom show: no sample could be loaded; nothing drawn", file=sys.stderr)
            return EXIT_PROBLEMS
        classes = list(getattr(dataset, "classes", None) or [])
        tiles = batch_tiles(good, classes, args.multiple_of) if args.batch else sample_tiles(good, classes)
        what = _batch_summary(tiles) if args.batch else f"{len(good)} samples"
        title = f"{args.data}: {what}\ntransform: {args.transform.strip() or 'none'}   seed {args.seed}"
    except (TorchloomError, OSError) as exc:  # the data could not be read, or its layout needs --split
        return fail("show", exc)
    try:
        rows, columns = draw_grid(tiles, args.out, title=title)
    except TorchloomError as exc:  # matplotlib is missing
        return fail("show", exc)
    except OSError as exc:  # the grid could not be written (permissions, disk full)
        print(f"torchloom show: cannot write --out {args.out!r}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(printable(f"wrote {args.out}: {len(tiles)} tile(s) in {rows} row(s) × {columns} column(s)"))
    return EXIT_PROBLEMS if failed or invalid else EXIT_CLEAN


def open_dataset(
    data: str,
    *,
    transform: Any,
    seed: int,
    split: str | None = None,
    allow_outside_root: bool = False,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> IndexedDataset:
    """A class folder (or a ``split`` of a split root) as :class:`FolderDataset`, anything else as a
    :class:`ManifestDataset` (a URL read with ``storage_options``); broken samples are skipped (and
    reported by the command, which prints what was left out: the manifest's warning about missing
    files would say it twice), transform bugs raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingFilesWarning)
        return open_image_dataset(
            data,
            split=split,
            transform=transform,
            seed=seed,
            on_error="skip",
            progress=progress,
            allow_outside_root=allow_outside_root,
            storage_options=storage_options,
        )


def choose_indices(size: int, count: int, *, seed: int) -> np.ndarray:
    """``count`` distinct sample indices drawn with ``seed`` (all of them when there are fewer), sorted.

    Example:
        >>> choose_indices(5, 10, seed=0).tolist()
        [0, 1, 2, 3, 4]
        >>> len(choose_indices(100, 3, seed=0))
        3
    """
    if size <= count:
        return np.arange(size)
    return np.sort(np.random.default_rng(seed).choice(size, count, replace=False))


def sample_tiles(samples: list[dict[str, Any]], classes: list[Any]) -> list[Tile]:
    """One tile per sample, titled with class name, label, index and size."""
    return [Tile(_hwc(sample["image"]), _title(sample, classes)) for sample in samples]


def batch_tiles(samples: list[dict[str, Any]], classes: list[Any], multiple_of: int) -> list[Tile]:
    """Collate the samples as a training batch would be (``PadImages``) and tile each padded image
    with its padding mask."""
    rules: dict[str, Any] = {"image": PadImages(multiple_of=multiple_of)}
    rules.update({key: AsList() for key in samples[0] if key not in ("image", "label", "index")})
    batch = Collate(rules)([{**s, "label": s.get("label", -1)} for s in samples])
    tiles = []
    for position, sample in enumerate(samples):
        height, width = batch["image_size"][position].tolist()
        padded = batch["image"][position]
        real = f"real {height}×{width} of {padded.shape[1]}×{padded.shape[2]}"
        title = f"{_title(sample, classes, size=False)}\n{real}"
        tiles.append(Tile(_hwc(padded), title, padding=~batch["image_mask"][position].numpy()))
    return tiles


def _batch_summary(tiles: list[Tile]) -> str:
    height, width = tiles[0].image.shape[:2]
    padded = float(np.mean([tile.padding.mean() for tile in tiles if tile.padding is not None]))
    return f"one collated batch: image {len(tiles)}×3×{height}×{width}, {padded:.0%} of it padding (red)"


def _title(sample: dict[str, Any], classes: list[Any], *, size: bool = True) -> str:
    label = int(sample.get("label", -1))
    name = str(classes[label]) if 0 <= label < len(classes) else "unlabelled"
    image = sample["image"]
    shape = f"  {image.shape[1]}×{image.shape[2]}" if size else ""
    return f"{name[:24]} (label {label})\nindex {int(sample['index'])}{shape}"


def _hwc(image: torch.Tensor) -> np.ndarray:
    array = image.detach().cpu()
    if array.dtype != torch.uint8:  # a float image (e.g. a user's tensor transform): show its range
        array = array.float()
        low, high = float(array.min()), float(array.max())
        array = ((array - low) / max(high - low, 1e-8) * 255).round().to(torch.uint8)
    hwc = array.permute(1, 2, 0).numpy()
    return np.repeat(hwc, 3, axis=2) if hwc.shape[2] == 1 else hwc
