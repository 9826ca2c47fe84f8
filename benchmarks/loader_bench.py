"""The thread Loader on the JPEG training pipeline, against its bare limit on as many threads and
against DataLoader worker processes.

- Loader: ``Loader(FolderDataset(..., transform), batch_size=64, num_threads=T)``, shuffled;
- bare limit (threads): the same read/decode/transform calls as the dataset (benchmarks.pipeline's
  ``bare_work``) in a tight loop on T threads of this process, no Dataset, no collate;
- DataLoader: the same dataset through ``DataLoader(num_workers=T, persistent_workers=True)``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Dataset

from benchmarks.common import Measurement, chunks, count_items, interleave, loader_rate
from benchmarks.pipeline import CROP, bare_work, paired_ratio
from torchloom import FolderDataset, Loader, collate
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop


def bare_thread_rate(paths: list[str], threads: int) -> list[float]:
    """Images/s of the bare loop split over ``threads`` threads of this process."""
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(bare_work, list(chunks(paths[:128], threads))))
        start = time.perf_counter()
        done = sum(pool.map(bare_work, list(chunks(paths, threads))))
    return [done / (time.perf_counter() - start)]


def thread_loader_rate(dataset: Dataset[Any], threads: int, epochs: int = 1) -> list[float]:
    loader = Loader(dataset, batch_size=64, shuffle=True, num_threads=threads, prefetch=2)
    sum(count_items(batch) for _, batch in zip(range(2), loader, strict=False))  # warm the buffer pool
    rates = []
    for epoch in range(epochs):
        loader.set_epoch(epoch + 1)
        start = time.perf_counter()
        seen = sum(count_items(batch) for batch in loader)
        rates.append(seen / (time.perf_counter() - start))
    return rates


@dataclass
class LoaderResult:
    threads: int
    loader: Measurement
    bare: Measurement
    dataloader: Measurement

    def ratio(self, other: Measurement) -> float:
        return paired_ratio(self.loader, other)


def run_loader(root: str, threads: int, rounds: int = 5) -> LoaderResult:
    transform = Compose([RandomResizedCrop(CROP), HorizontalFlip()])
    dataset = FolderDataset(root, transform=transform, progress=False)
    paths = dataset.index.paths.to_list()
    results = interleave(
        rounds,
        {
            "loader": lambda: thread_loader_rate(dataset, threads),
            "bare": lambda: bare_thread_rate(paths, threads),
            "dataloader": lambda: loader_rate(dataset, num_workers=threads, collate_fn=collate, epochs=1),
        },
    )
    return LoaderResult(threads, results["loader"], results["bare"], results["dataloader"])
