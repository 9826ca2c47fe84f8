"""Collate speed: ``collate`` and ``Collate()`` against ``default_collate``, and ``PadImages``
against the source document's variable-size collate (interpolate each image up towards the batch
maximum, keeping the aspect ratio, then pad and stack).

In this process on the same prepared samples, rates the best of interleaved rounds; and through 2
DataLoader workers over a dataset of the user's own (``Collate()`` stacks into reused shared
buffers, ``default_collate`` into a fresh one per batch), rates and ratios medians of interleaved
epochs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.nn import functional
from torch.utils.data import Dataset, default_collate

from benchmarks.common import Measurement, epoch_rate, interleave, shuffled_loader
from benchmarks.pipeline import paired_ratio
from torchloom import Collate, PadImages, collate

BATCH = 64
ROUNDS = 7
WORKERS = 2
WORKER_ROUNDS = 5
WORKER_SAMPLES = 2048


def same_shape_samples(seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "image": torch.from_numpy(rng.integers(0, 256, (3, 224, 224), dtype=np.uint8)),
            "label": int(rng.integers(10)),
            "numeric": torch.from_numpy(rng.normal(size=8).astype(np.float32)),
            "index": i,
        }
        for i in range(BATCH)
    ]


def variable_samples(seed: int = 1) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "image": torch.from_numpy(
                rng.integers(
                    0, 256, (3, int(rng.integers(160, 257)), int(rng.integers(160, 257))), dtype=np.uint8
                )
            ),
            "label": int(rng.integers(10)),
        }
        for _ in range(BATCH)
    ]


def document_collate(batch: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The source document's image_collate_fn, as written (float images, interpolate, pad, stack)."""
    images = [sample["image"].float() for sample in batch]
    max_h = max(image.shape[1] for image in images)
    max_w = max(image.shape[2] for image in images)
    resized = []
    for image in images:
        h, w = image.shape[1], image.shape[2]
        scale = min(max_h / h, max_w / w)
        new_h, new_w = int(h * scale), int(w * scale)
        image_resized = functional.interpolate(
            image.unsqueeze(0), size=(new_h, new_w), mode="bilinear", align_corners=False
        ).squeeze(0)
        resized.append(functional.pad(image_resized, (0, max_w - new_w, 0, max_h - new_h), value=0))
    return torch.stack(resized), torch.tensor([sample["label"] for sample in batch])


@dataclass
class CollateResult:
    name: str
    ours: float
    reference: float

    @property
    def ratio(self) -> float:
        return self.ours / self.reference


def batches_per_second(
    function: Callable[[list[Any]], Any], samples: list[Any], seconds: float = 0.5
) -> float:
    function(samples)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        function(samples)
        count += 1
    return count / (time.perf_counter() - start)


def run_collate() -> list[CollateResult]:
    same, variable = same_shape_samples(), variable_samples()
    pad = Collate({"image": PadImages()})
    pooled = Collate()
    rates: dict[str, list[float]] = {"collate": [], "Collate": [], "default": [], "pad": [], "document": []}
    for _ in range(ROUNDS):
        rates["collate"].append(batches_per_second(collate, same))
        rates["Collate"].append(batches_per_second(pooled, same))
        rates["default"].append(batches_per_second(default_collate, same))
        rates["pad"].append(batches_per_second(pad, variable))
        rates["document"].append(batches_per_second(document_collate, variable))
    return [
        CollateResult(
            "same-shape dict batches: collate vs default_collate",
            max(rates["collate"]),
            max(rates["default"]),
        ),
        CollateResult(
            "same-shape dict batches: Collate() vs default_collate",
            max(rates["Collate"]),
            max(rates["default"]),
        ),
        CollateResult(
            "variable-size images: PadImages vs interpolate-then-pad",
            max(rates["pad"]),
            max(rates["document"]),
        ),
    ]


class OwnSamples(Dataset[dict[str, Any]]):
    """A dataset of the user's own, whose samples are cheap: a copy of one of 64 prepared 3×224×224
    uint8 images and a label. What it measures is the hand-off of batches between processes."""

    def __init__(self, size: int = WORKER_SAMPLES) -> None:
        self.size = size
        self.images = [sample["image"] for sample in same_shape_samples()]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.images[index % len(self.images)].clone(), "label": index % 10}


def run_collate_workers(
    rounds: int = WORKER_ROUNDS, samples: int = WORKER_SAMPLES
) -> tuple[float, dict[str, Measurement]]:
    """``Collate()`` against ``default_collate`` through 2 persistent DataLoader workers over
    :class:`OwnSamples`: the median ratio of interleaved epochs, and each one's images/s."""
    dataset = OwnSamples(samples)
    loaders = {
        name: shuffled_loader(dataset, num_workers=WORKERS, collate_fn=collate_fn, batch_size=BATCH)
        for name, collate_fn in (("Collate()", Collate()), ("default_collate", default_collate))
    }
    for loader in loaders.values():
        epoch_rate(loader)  # warm-up: workers started
    rates = interleave(
        rounds, {name: lambda loader=loader: epoch_rate(loader) for name, loader in loaders.items()}
    )
    return paired_ratio(rates["Collate()"], rates["default_collate"]), rates
