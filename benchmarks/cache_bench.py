"""DecodedCache epochs against the naive PIL pipeline, on the same files in the same run.

Both run one shuffled epoch of decode (or cache read) -> RandomResizedCrop 224 -> flip -> batches of
64 through a DataLoader with the same number of workers (persistent, after a warm-up epoch):

- naive: benchmarks.pipeline's NaiveDataset (PIL open + convert, PIL crop + resize, flip, float32
  normalise in ``__getitem__``, default collate);
- cache: ``DecodedCache(FolderDataset(..., transform), path, max_side=...)`` + ``collate``: the
  random crop still runs every epoch, on the decoded (and, for 1080p sources, downscaled) image;
  measured through the DataLoader's worker processes and through the thread ``Loader`` (the same
  number of threads), whose batches skip the hand-off between processes.

The build (decoding every file once) is timed apart: it is paid once, not per epoch.
Also measured: PSS of 2 workers reading a ``location="memory"`` cache, and of 2 local ranks
(processes that each open it, as under torchrun) reading it, to show its bytes are counted once
across the processes, not once per worker or per rank.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader

from benchmarks.common import Measurement, interleave, loader_rate
from benchmarks.loader_bench import thread_loader_rate
from benchmarks.memory import smaps_kib
from benchmarks.pipeline import CROP, NaiveDataset, paired_ratio
from torchloom import DecodedCache, FolderDataset, collate
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop


@dataclass
class CacheResult:
    source: str
    workers: int
    max_side: int | None
    build_s: float
    cache_mib: float
    naive: Measurement
    cached: Measurement
    cached_loader: Measurement

    @property
    def best(self) -> Measurement:
        """The faster way of reading the cache (DataLoader workers or the thread Loader)."""
        return max(self.cached, self.cached_loader, key=lambda m: m.median)

    @property
    def ratio(self) -> float:
        return paired_ratio(self.best, self.naive)


def run_cache(
    root: str, cache_path: str, source: str, workers: int, max_side: int | None, rounds: int
) -> CacheResult:
    transform = Compose([RandomResizedCrop(CROP), HorizontalFlip()])
    dataset = FolderDataset(root, transform=transform, progress=False)
    started = time.perf_counter()
    cache = DecodedCache(dataset, cache_path, max_side=max_side, progress=False)
    build_s = time.perf_counter() - started
    naive = NaiveDataset(dataset.index.paths.to_list(), dataset.targets.tolist())
    results = interleave(
        rounds,
        {
            "naive": lambda: loader_rate(naive, num_workers=workers, collate_fn=None, epochs=1),
            "cached": lambda: loader_rate(cache, num_workers=workers, collate_fn=collate, epochs=1),
            "cached_loader": lambda: thread_loader_rate(cache, workers),
        },
    )
    mib = cache.nbytes / 2**20
    return CacheResult(
        source, workers, max_side, build_s, mib, results["naive"], results["cached"], results["cached_loader"]
    )


def shared_memory_pss(root: str, cache_path: str) -> tuple[float, float]:
    """(cache MiB, PSS growth in MiB summed over 2 workers that each read the whole memory cache)."""
    dataset = FolderDataset(root, progress=False)
    cache = DecodedCache(dataset, cache_path, location="memory", progress=False)
    growth: list[float] = []

    def measure(worker_id: int) -> None:
        before = smaps_kib()[0]
        for index in range(len(cache)):
            cache[index]
        after = smaps_kib()[0]
        path = os.path.join(cache_path + ".pss", f"{worker_id}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(str((after - before) / 1024))

    loader = DataLoader(range(2), batch_size=1, num_workers=2, worker_init_fn=measure)
    list(loader)
    for worker in range(2):
        with open(os.path.join(cache_path + ".pss", f"{worker}")) as handle:
            growth.append(float(handle.read()))
    return cache.nbytes / 2**20, sum(growth)


def _rank_reads(root: str, cache_path: str, barrier: Any, results: Any) -> None:
    dataset = FolderDataset(root, progress=False)
    with DecodedCache(dataset, cache_path, progress=False) as warm:  # code and heap of reading, first
        warm[0]
    barrier.wait()
    before = smaps_kib()[0]
    cache = DecodedCache(dataset, cache_path, location="memory", progress=False)
    for index in range(len(cache)):
        cache[index]
    barrier.wait()  # every rank maps the copy before any measures
    grown = (smaps_kib()[0] - before) * 1024
    barrier.wait()
    results.put((grown, cache.nbytes))


def ranks_pss_ratio(root: str, cache_path: str, ranks: int = 2) -> float:
    """PSS growth summed over ``ranks`` processes that each open the ``location="memory"`` cache and
    read all of it, over the cache's bytes (1.0: one copy on the node; ``ranks``: one per rank)."""
    DecodedCache(FolderDataset(root, progress=False), cache_path, progress=False).close()
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(ranks), context.Queue()
    processes = [
        context.Process(target=_rank_reads, args=(root, cache_path, barrier, results)) for _ in range(ranks)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=300) for _ in processes]
    for process in processes:
        process.join()
    return sum(grown for grown, _ in outcomes) / outcomes[0][1]
