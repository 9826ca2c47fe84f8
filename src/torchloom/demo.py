"""The end-to-end demo: generated imbalanced JPEG classes with planted faults, one training epoch.

Run it with ``torchloom demo`` (or ``make demo``). It writes a few thousand synthetic JPEGs into
a temporary folder, plants broken files among them, loads them with :class:`FolderDataset` and
``DataLoader(num_workers=2)``, trains a tiny CNN for one epoch on the CPU and prints throughput
and what was not trained on.

Example:
    >>> result = run_demo(counts=(30, 10), image_size=64, crop_size=48, batch_size=16,
    ...                   num_workers=0, quiet=True)
    >>> result.samples_trained, len(result.skipped) + len(result.excluded)
    (40, 4)
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from rich.console import Console
from rich.table import Table
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from torchloom.collate import collate
from torchloom.datasets import FolderDataset
from torchloom.faults import FaultReport, Skipped
from torchloom.synthetic import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, Normalize, RandomResizedCrop

DEMO_CLASSES = ("scratch", "dent", "stain", "crack")
DEMO_COUNTS = (1500, 700, 300, 100)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class DemoResult:
    """What the demo measured."""

    samples_trained: int
    seconds: float
    images_per_second: float
    seconds_waiting_for_data: float
    final_loss: float
    skipped: list[Skipped] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)


def tiny_cnn(num_classes: int) -> nn.Module:
    """Three strided convolutions, global pooling and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def run_demo(
    *,
    counts: Sequence[int] = DEMO_COUNTS,
    image_size: int = 128,
    crop_size: int = 96,
    batch_size: int = 64,
    num_workers: int = 2,
    seed: int = 0,
    quiet: bool = False,
) -> DemoResult:
    """Generate the data, train one epoch and report; see the module docstring."""
    console = Console(quiet=quiet)
    names = [
        DEMO_CLASSES[i % len(DEMO_CLASSES)] + ("" if i < len(DEMO_CLASSES) else f"_{i}")
        for i in range(len(counts))
    ]
    with tempfile.TemporaryDirectory(prefix="torchloom-demo-") as root:
        console.rule("[bold]torchloom demo")
        console.print(
            f"Writing {sum(counts)} synthetic JPEGs ({image_size} px) to {root}, planting 4 broken files"
        )
        faults = write_class_folders(
            root,
            counts,
            size=(image_size, image_size),
            seed=seed,
            class_names=names,
            truncated=2,
            empty=1,
            not_an_image=1,
            progress=not quiet,
        )
        transform = Compose([RandomResizedCrop(crop_size), HorizontalFlip()])
        dataset = FolderDataset(root, transform=transform, on_error="skip", seed=seed, progress=not quiet)
        _print_dataset(console, dataset)
        result = _train_one_epoch(dataset, batch_size, num_workers, seed, quiet)
        result.excluded = list(dataset.report.invalid)
        _print_result(console, result, len(faults.all))
    return result


def _train_one_epoch(
    dataset: FolderDataset, batch_size: int, num_workers: int, seed: int, quiet: bool
) -> DemoResult:
    torch.manual_seed(seed)
    model = tiny_cnn(len(dataset.classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    normalize = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers, collate_fn=collate
    )
    report = FaultReport()
    trained, waiting, loss_value = 0, 0.0, float("nan")
    start = time.perf_counter()
    ready = start
    with tqdm(total=len(dataset), desc="training 1 epoch", unit="img", disable=quiet) as bar:
        for batch in report.watch(loader):
            waiting += time.perf_counter() - ready
            logits = model(normalize(batch["image"]))
            loss = nn.functional.cross_entropy(logits, batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_value = float(loss.item())
            trained += len(batch["label"])
            bar.update(len(batch["label"]) + len(batch.get("skipped", [])))
            bar.set_postfix(loss=f"{loss_value:.3f}")
            ready = time.perf_counter()
    seconds = time.perf_counter() - start
    return DemoResult(trained, seconds, trained / seconds, waiting, loss_value, report.skipped)


def _print_dataset(console: Console, dataset: FolderDataset) -> None:
    table = Table(title=f"FolderDataset: {len(dataset)} samples")
    table.add_column("class")
    table.add_column("samples", justify="right")
    for name, count in dataset.class_counts.items():
        table.add_row(name, str(count))
    console.print(table)


def _print_result(console: Console, result: DemoResult, planted: int) -> None:
    console.print(
        f"Trained on {result.samples_trained} images in {result.seconds:.1f} s: "
        f"[bold]{result.images_per_second:,.0f} img/s[/bold], "
        f"{result.seconds_waiting_for_data:.1f} s of it waiting for data; final loss {result.final_loss:.3f}"
    )
    table = Table(title=f"Not trained on ({len(result.excluded) + len(result.skipped)} of {planted} planted)")
    table.add_column("when")
    table.add_column("file")
    table.add_column("reason")
    for path, reason in result.excluded:
        table.add_row("validation", path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1], reason)
    for skipped in result.skipped:
        path = skipped.path or f"#{skipped.index}"
        table.add_row(
            "loading (skip)", path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1], skipped.reason
        )
    console.print(table)
