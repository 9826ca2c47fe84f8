"""The JPEG training pipeline: torchloom against a naive reference and against its bare limit.

Pipeline: decode -> RandomResizedCrop 224 -> horizontal flip -> CHW batches of 64.

- naive: what a typical user writes (PIL open + convert, PIL crop + resize, flip, float
  normalisation in ``__getitem__``, default collate);
- torchloom: FolderDataset + Compose([RandomResizedCrop(224), HorizontalFlip()]) + collate,
  uint8 batches (normalisation belongs on the batch, on the training device);
- bare limit: the very same read/decode/transform calls in a tight loop over the same files,
  in the same number of processes, without a DataLoader.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from benchmarks.common import Measurement, chunks, interleave, loader_rate
from torchloom import FolderDataset, collate
from torchloom.io.files import read_bytes
from torchloom.io.image import decode_image, probe_image
from torchloom.seeding import sample_rng
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop, plan_transform, to_chw_tensor

CROP = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


class NaiveDataset(Dataset[tuple[torch.Tensor, int]]):
    """The reference a typical user writes: PIL everything, float32 normalised in the worker."""

    def __init__(self, paths: list[str], labels: list[int]) -> None:
        self.paths, self.labels = paths, labels
        self.crop = RandomResizedCrop(CROP)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng()
        image = Image.open(self.paths[index]).convert("RGB")
        box = self.crop.draw_box(image.height, image.width, rng)
        image = image.crop((box.left, box.top, box.left + box.width, box.top + box.height))
        image = image.resize((CROP, CROP), Image.Resampling.BILINEAR)
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        array = (np.asarray(image, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(array.transpose(2, 0, 1).copy()), self.labels[index]


def bare_work(paths: list[str]) -> int:
    """The torchloom sample path without a Dataset or DataLoader: read, plan, decode, finish.

    Like a DataLoader worker, a pool process uses one torch thread (torch's OpenMP pool is not
    fork-safe once the parent has used it).
    """
    if multiprocessing.parent_process() is not None:
        torch.set_num_threads(1)
    transform = Compose([RandomResizedCrop(CROP), HorizontalFlip()])
    for index, path in enumerate(paths):
        data = read_bytes(path)
        header = probe_image(data, path)
        plan = plan_transform(transform, header.height, header.width, sample_rng(0, 0, index))
        to_chw_tensor(plan.finish(decode_image(data, path, min_size=plan.min_size)))
    return len(paths)


def bare_rate(paths: list[str], processes: int, epochs: int = 2) -> list[float]:
    """Images/s of the bare loop in ``processes`` processes (1: in this process)."""
    if processes <= 1:
        bare_work(paths[:64])
        rates = []
        for _ in range(epochs):
            start = time.perf_counter()
            bare_work(paths)
            rates.append(len(paths) / (time.perf_counter() - start))
        return rates
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        pool.map(bare_work, list(chunks(paths[:128], processes)))
        rates = []
        for _ in range(epochs):
            start = time.perf_counter()
            done = sum(pool.map(bare_work, list(chunks(paths, processes))))
            rates.append(done / (time.perf_counter() - start))
    return rates


@dataclass
class PipelineResult:
    source: str
    num_workers: int
    naive: Measurement
    torchloom: Measurement
    bare: Measurement

    @property
    def speedup(self) -> float:
        """Median over rounds of torchloom / naive, each pair measured back to back."""
        return paired_ratio(self.torchloom, self.naive)

    @property
    def of_bare(self) -> float:
        """Median over rounds of torchloom / bare limit, each pair measured back to back."""
        return paired_ratio(self.torchloom, self.bare)


def paired_ratios(numerator: Measurement, denominator: Measurement) -> list[float]:
    return [a / b for a, b in zip(numerator.rates, denominator.rates, strict=True)]


def paired_ratio(numerator: Measurement, denominator: Measurement) -> float:
    return float(np.median(paired_ratios(numerator, denominator)))


def ratio_range(numerator: Measurement, denominator: Measurement) -> str:
    ratios = paired_ratios(numerator, denominator)
    return f"{min(ratios):.2f}–{max(ratios):.2f}"


def run_pipeline(root: str, source: str, num_workers: int, rounds: int = 5) -> PipelineResult:
    """Measure the three pipelines over the class folders in ``root``."""
    dataset = FolderDataset(
        root, transform=Compose([RandomResizedCrop(CROP), HorizontalFlip()]), progress=False
    )
    paths = dataset.index.paths.to_list()
    naive = NaiveDataset(paths, dataset.targets.tolist())
    results = interleave(
        rounds,
        {
            "naive": lambda: loader_rate(naive, num_workers=num_workers, collate_fn=None, epochs=1),
            "torchloom": lambda: loader_rate(dataset, num_workers=num_workers, collate_fn=collate, epochs=1),
            "bare": lambda: bare_rate(paths, max(1, num_workers), epochs=1),
        },
    )
    return PipelineResult(source, num_workers, results["naive"], results["torchloom"], results["bare"])


def describe_threads() -> str:
    return f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}"


def as_rows(results: list[PipelineResult]) -> list[dict[str, Any]]:
    return [
        {
            "sources": r.source,
            "workers": r.num_workers,
            "naive img/s": f"{r.naive.best:,.0f}",
            "torchloom img/s": f"{r.torchloom.best:,.0f}",
            "bare limit img/s": f"{r.bare.best:,.0f}",
            "vs naive": f"{r.speedup:.2f}× ({ratio_range(r.torchloom, r.naive)})",
            "vs bare limit": f"{r.of_bare:.2f}× ({ratio_range(r.torchloom, r.bare)})",
        }
        for r in results
    ]
