"""Where a sample's time goes inside the loader: read, decode, transform, collate.

(A low module: datasets time their stages into it; the loader tools read it.)

A :class:`StageClock` is a small table in shared memory (one row per DataLoader worker, one for
the main process and its threads) that torchloom's datasets add their stage times to while a
:class:`~torchloom.loader.profiler.LoaderProfiler` is attached; the profiler reads every row in
the main process. Unattached (the default), datasets time nothing.

Example:
    >>> from torchloom.loader import StageClock
    >>> clock = StageClock()
    >>> clock.add("decode", 0.25); clock.add("decode", 0.25); clock.add("read", 0.5)
    >>> clock.totals()["decode"], clock.totals()["read"]
    (0.5, 0.5)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch.utils.data import get_worker_info

STAGES = ("read", "decode", "transform", "collate")
# Rows: workers 0..MAX_WORKERS-1, then the main process (and its threads).
MAX_WORKERS = 128
#: The batch key under which a timed collate records when the batch was made (popped by the profiler).
COLLATED_AT_KEY = "_torchloom_collated_at"

T = TypeVar("T")


class StageClock:
    """Seconds per stage (read, decode, transform, collate), per process, in shared memory: one row
    per DataLoader worker and one for the main process, which torchloom's datasets add to while a
    :class:`~torchloom.LoaderProfiler` is attached, and which the profiler reads.

    Additions collect in plain floats in the process and reach the shared table once per batch
    (:meth:`flush`, called by the timed collate) or when read: a tensor write per sample stage
    would cost more than the stages it times.

    Example:
        >>> from torchloom.loader import StageClock
        >>> clock = StageClock()
        >>> with clock.timing("decode"):
        ...     pass  # the decode being timed
        >>> clock.add("read", 0.5)
        >>> clock.totals()["read"], clock.totals()["decode"] >= 0
        (0.5, True)
    """

    def __init__(self) -> None:
        self._seconds = torch.zeros((MAX_WORKERS + 1, len(STAGES)), dtype=torch.float64).share_memory_()
        self._pending = [0.0] * len(STAGES)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"_seconds": self._seconds}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._seconds = state["_seconds"]
        self._pending = [0.0] * len(STAGES)
        self._lock = threading.Lock()

    def _row(self) -> int:
        info = get_worker_info()
        return min(info.id, MAX_WORKERS - 1) if info is not None else MAX_WORKERS

    def add(self, stage: str, seconds: float) -> None:
        column = STAGES.index(stage)
        with self._lock:  # the thread Loader adds from several threads of one process
            self._pending[column] += seconds

    def flush(self) -> None:
        """Move this process's collected times into the shared table."""
        with self._lock:
            pending, self._pending = self._pending, [0.0] * len(STAGES)
        if any(pending):
            self._seconds[self._row()] += torch.tensor(pending, dtype=torch.float64)

    @contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, time.perf_counter() - start)

    def totals(self) -> dict[str, float]:
        self.flush()
        sums = self._seconds.sum(dim=0).tolist()
        return dict(zip(STAGES, sums, strict=True))

    def reset(self) -> None:
        with self._lock:
            self._pending = [0.0] * len(STAGES)
        self._seconds.zero_()


def timed_collate(collate_fn: Callable[[list[Any]], T], clock: StageClock) -> Callable[[list[Any]], T]:
    """``collate_fn`` that adds its time to ``clock`` and stamps dict batches with when they were made
    (so the profiler can tell the hand-off to the training process from the rest)."""

    def collate(samples: list[Any]) -> T:
        start = time.perf_counter()
        batch = collate_fn(samples)
        finished = time.perf_counter()
        clock.add("collate", finished - start)
        clock.flush()
        if isinstance(batch, dict):
            batch[COLLATED_AT_KEY] = finished
        return batch

    collate.__wrapped__ = collate_fn  # type: ignore[attr-defined]
    return collate
