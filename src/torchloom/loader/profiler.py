"""LoaderProfiler: is the training loop waiting for data, and what would help?

Wrap the loader in a real training loop; the profiler times each ``next()`` (the loop waiting
for data) apart from the rest of each step (the model), the first batch (start-up: workers
spawning, caches opening) apart from the steady state, and, for torchloom datasets, where sample
time goes in the loader (read, decode, transform, collate, hand-off to the training process),
gathered from every worker through shared memory. It ends with a verdict and the one change most
likely to help, with the measured reason.

With CUDA, a step's kernels run asynchronously: time in ``next()`` while the GPU is still busy is
overlap, not starvation. The profiler records a CUDA event at the end of each step and counts a
wait only when that event has completed by the time the batch arrives (no synchronisation, so it
does not change what it measures; the wait counted is then an upper bound).

Resume latency is timed from :meth:`LoaderProfiler.load_state_dict` (which loads the state into
the loader) to the first batch after it: for a StatefulDataLoader that includes starting workers and
fast-forwarding the sampler, which a loader applying its state lazily does only then. Under
``torch.distributed``, :meth:`LoaderProfiler.report` gathers every rank's latencies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from torchloom.errors import UsageError
from torchloom.loader.ranks import RankTimes, distributed, gather_rank_times
from torchloom.loader.report import ProfileReport, advise
from torchloom.timing import COLLATED_AT_KEY, StageClock, timed_collate


@dataclass
class _Timeline:
    startup_s: float = 0.0
    waits: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    handoffs: list[float] = field(default_factory=list)
    samples: int = 0
    batches: int = 0
    wall_s: float = 0.0
    #: While a pass runs: when it began, and when the step now running was handed its batch (a
    #: report taken inside the loop, or after a ``break`` whose iterator is still held, counts both).
    running_since: float | None = None
    step_since: float | None = None
    #: When a state was loaded that no batch has followed yet, and each measured resume latency.
    resumed_at: float | None = None
    resumes: list[float] = field(default_factory=list)

    def close_step(self, now: float) -> None:
        if self.step_since is not None:
            self.steps.append(now - self.step_since)
            self.step_since = None


class LoaderProfiler:
    """Time a loader inside a real training loop: each ``next()`` (the loop waiting for data) apart
    from the rest of the step, the first batch apart from the steady state, and, for torchloom
    datasets, the read, decode, transform, collate and hand-off times of every worker; its report
    ends with a verdict and the change most likely to help.

    Use ``for batch in LoaderProfiler(loader): ...``, or ``profiler(loader)`` to profile another
    loader with the same profiler, then :meth:`report`. Attach it before the loader's workers
    start (persistent workers already running keep their unprofiled dataset copies). Resume through
    the profiler (``profiler.load_state_dict(state)``) to have the resume latency timed. Under
    ``torch.distributed``, :meth:`report` is a collective: call it on every rank.

    Args:
        loader: a DataLoader, StatefulDataLoader or :class:`torchloom.Loader` (anything iterable).
        stages: time read/decode/transform/collate inside torchloom datasets (default True).

    Example:
        >>> import pyarrow as pa
        >>> from torch.utils.data import DataLoader
        >>> from torchloom import LoaderProfiler
        >>> from torchloom.datasets import TableDataset
        >>> loader = DataLoader(TableDataset(pa.table({"x": list(range(64))})), batch_size=8)
        >>> profiler = LoaderProfiler(loader)
        >>> for batch in profiler:
        ...     pass  # the training step
        >>> report = profiler.report()
        >>> report.batches, report.samples
        (8, 64)
    """

    def __init__(self, loader: Any = None, *, stages: bool = True) -> None:
        self.loader = loader
        self.stages = stages
        self.clock = StageClock()
        self._timeline = _Timeline()
        self._cuda = torch.cuda.is_available() and torch.cuda.is_initialized()

    def __iter__(self) -> Iterator[Any]:
        if self.loader is None:
            raise UsageError("LoaderProfiler() was built without a loader; iterate profiler(loader) instead")
        return self(self.loader)

    def __call__(self, loader: Any) -> Iterator[Any]:
        """Iterate ``loader`` while timing it; batches are yielded unchanged."""
        restore = self._attach(loader) if self.stages else None
        try:
            yield from self._timed(loader)
        finally:
            if restore is not None:
                restore()

    def state_dict(self) -> dict[str, Any]:
        """The loader's ``state_dict()``, for a checkpoint written beside the model's."""
        return dict(self._stateful("state_dict").state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load ``state`` into the loader and time from now to the first batch after it (the resume
        latency of the report)."""
        loader = self._stateful("load_state_dict")
        called = time.perf_counter()
        loader.load_state_dict(state)
        self._timeline.resumed_at = called

    def _stateful(self, method: str) -> Any:
        if self.loader is None:
            raise UsageError(
                f"LoaderProfiler() was built without a loader, so it has no {method}(); build it as "
                "LoaderProfiler(loader) to resume through it"
            )
        if not callable(getattr(self.loader, method, None)):
            raise UsageError(
                f"{type(self.loader).__name__} has no {method}(), so it cannot resume; use "
                "torchdata's StatefulDataLoader or torchloom.Loader"
            )
        return self.loader

    def _attach(self, loader: Any) -> Any:
        """Point the dataset's stage clock at ours and time collate; return how to undo it."""
        dataset = getattr(loader, "dataset", None)
        undo = []
        if dataset is not None and hasattr(dataset, "stage_clock"):
            previous_clock = dataset.stage_clock
            dataset.stage_clock = self.clock
            undo.append(lambda: setattr(dataset, "stage_clock", previous_clock))
        collate_fn = getattr(loader, "collate_fn", None)
        if callable(collate_fn):
            loader.collate_fn = timed_collate(collate_fn, self.clock)
            undo.append(lambda: setattr(loader, "collate_fn", collate_fn))

        def restore() -> None:
            for step in reversed(undo):
                step()

        return restore

    def _timed(self, loader: Any) -> Iterator[Any]:
        timeline = self._timeline
        timeline.close_step(time.perf_counter())  # a step of a pass left suspended ends here
        began = timeline.running_since = time.perf_counter()
        try:
            yield from self._steps(loader, timeline, began)
        finally:
            # Also when the loop leaves early (``break`` closes this generator, an error in the step):
            # the step it left ran, and the wall time is the loop's.
            now = time.perf_counter()
            timeline.close_step(now)
            timeline.wall_s += now - began
            if timeline.running_since == began:
                timeline.running_since = None

    def _steps(self, loader: Any, timeline: _Timeline, began: float) -> Iterator[Any]:
        iterator = iter(loader)
        event: Any = None
        while True:
            asked = time.perf_counter()
            if self._cuda:
                event = torch.cuda.Event()
                event.record()  # the end of the step's queued GPU work
            try:
                batch = next(iterator)
            except StopIteration:
                break
            arrived = time.perf_counter()
            if timeline.resumed_at is not None:
                timeline.resumes.append(arrived - timeline.resumed_at)
                timeline.resumed_at = None
            if timeline.batches == 0:
                timeline.startup_s += arrived - began
            else:
                busy_gpu = event is not None and not event.query()
                timeline.waits.append(0.0 if busy_gpu else arrived - asked)
            if isinstance(batch, dict) and COLLATED_AT_KEY in batch:
                # The hand-off the loop waited through: a batch that sat ready in the prefetch queue
                # while the model ran cost the loop nothing.
                in_transit = arrived - batch.pop(COLLATED_AT_KEY)
                timeline.handoffs.append(max(0.0, min(in_transit, arrived - asked)))
            timeline.batches += 1
            timeline.samples += count_samples(batch)
            timeline.step_since = time.perf_counter()
            yield batch  # the training step runs while we are suspended here
            timeline.close_step(time.perf_counter())

    def report(self, *, gather: bool = True) -> ProfileReport:
        """What was measured, the verdict and the advice.

        Under ``torch.distributed`` this is a collective that gathers every rank's latencies into
        ``ranks``: call it on every rank (then print it on rank 0), or pass ``gather=False`` for this
        rank's figures alone.
        """
        timeline, now = self._timeline, time.perf_counter()
        # A pass still running (a report inside the loop) counts so far.
        running = [now - since for since in (timeline.step_since,) if since is not None]
        live = [now - since for since in (timeline.running_since,) if since is not None]
        wall_s = timeline.wall_s + sum(live)
        waits = np.asarray(timeline.waits or [0.0])
        wait, step = float(np.sum(timeline.waits)), float(np.sum(timeline.steps + running))
        steady = wait + step
        report = ProfileReport(
            batches=timeline.batches,
            samples=timeline.samples,
            wall_s=wall_s,
            startup_s=timeline.startup_s,
            wait_s=wait,
            step_s=step,
            wait_share=wait / steady if steady > 0 else 0.0,
            samples_per_s=timeline.samples / wall_s if wall_s > 0 else 0.0,
            wait_p50_ms=float(np.percentile(waits, 50) * 1e3),
            wait_p90_ms=float(np.percentile(waits, 90) * 1e3),
            wait_p99_ms=float(np.percentile(waits, 99) * 1e3),
            stages=self.clock.totals() if self.stages else {},
            handoff_s=float(np.sum(timeline.handoffs)),
            resume_s=max(timeline.resumes) if timeline.resumes else None,
        )
        own = RankTimes(
            rank=dist.get_rank() if distributed() else 0,
            batches=report.batches,
            startup_s=report.startup_s,
            resume_s=report.resume_s,
            wait_share=report.wait_share,
            wait_p50_ms=report.wait_p50_ms,
            wait_p99_ms=report.wait_p99_ms,
        )
        report.ranks = gather_rank_times(own) if gather else (own,)
        report.verdict, report.advice = advise(report, self.loader)
        return report

    def __enter__(self) -> LoaderProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def count_samples(batch: Any) -> int:
    """Samples in a batch: the length of its first tensor (or list), else 1."""
    if isinstance(batch, dict):
        values = [value for key, value in batch.items() if key != "skipped"]
    elif isinstance(batch, (list, tuple)):
        values = list(batch)
    else:
        values = [batch]
    for value in values:
        if isinstance(value, torch.Tensor) and value.ndim:
            return int(value.shape[0])
        if isinstance(value, (list, tuple)):
            return len(value)
    return 1
