"""Timing helpers shared by the benchmarks: steady-state loader throughput and repeated runs."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, Dataset


@dataclass
class Measurement:
    """Items per second over repeated runs; ``best`` is what the tables report."""

    name: str
    rates: list[float]

    @property
    def best(self) -> float:
        return max(self.rates)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def count_items(batch: Any) -> int:
    """Samples in a batch: a dict's ``label`` / ``image``, or the first element of a tuple."""
    if isinstance(batch, dict):
        return len(batch["label"])
    return len(batch[0])


def shuffled_loader(
    dataset: Dataset[Any],
    *,
    num_workers: int,
    collate_fn: Callable[[list[Any]], Any] | None,
    batch_size: int = 64,
) -> DataLoader[Any]:
    """The benchmarks' DataLoader: shuffled; with workers, persistent and prefetching 4 batches each."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        collate_fn=collate_fn,
        persistent_workers=num_workers > 0,
        prefetch_factor=4 if num_workers > 0 else None,
    )


def loader_rate(
    dataset: Dataset[Any],
    *,
    num_workers: int,
    collate_fn: Callable[[list[Any]], Any] | None,
    batch_size: int = 64,
    epochs: int = 2,
) -> list[float]:
    """Images/s of full epochs; with workers, after a warm-up epoch (start-up excluded)."""
    loader = shuffled_loader(dataset, num_workers=num_workers, collate_fn=collate_fn, batch_size=batch_size)
    rates = []
    warm_up = 1 if num_workers > 0 else 0
    for epoch in range(epochs + warm_up):
        start = time.perf_counter()
        seen = sum(count_items(batch) for batch in loader)
        if epoch >= warm_up:
            rates.append(seen / (time.perf_counter() - start))
    return rates


def epoch_rate(loader: Iterable[Any]) -> list[float]:
    """Items/s of one pass over ``loader``, as a one-element list (an :func:`interleave` run)."""
    started = time.perf_counter()
    items = sum(count_items(batch) for batch in loader)
    return [items / (time.perf_counter() - started)]


def interleave(rounds: int, runs: dict[str, Callable[[], list[float]]]) -> dict[str, Measurement]:
    """Run each measurement ``rounds`` times, interleaved, so machine noise hits all alike."""
    results = {name: Measurement(name, []) for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            results[name].rates.extend(run())
    return results


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def chunks(items: list[Any], parts: int) -> Iterable[list[Any]]:
    return (items[i::parts] for i in range(parts))


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of ``rows`` (dicts with the same keys, in column order); "" for none."""
    if not rows:
        return ""
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[key]) for key in header) + " |" for row in rows]
    return "\n".join(lines)
