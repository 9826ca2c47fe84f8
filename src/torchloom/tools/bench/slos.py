"""The latencies of the setting ``torchloom bench`` chose: time to the first batch from a fresh start,
p50/p99 of the wait per batch, and the resume latency of a resume from the middle of the pass.

The chosen setting is built resumable (a ``StatefulDataLoader`` with the DataLoader keyword
arguments ``tune`` chose, or the thread ``Loader``), profiled for up to :data:`PASS_BATCHES`
batches with no model step (so the wait is the loader's own pace), checkpointed halfway, and a new
loader is resumed from that state through :class:`~torchloom.LoaderProfiler`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Dataset

from torchloom.loader.loader import Loader
from torchloom.loader.profiler import LoaderProfiler

#: The most batches of the fresh pass (its first batch, then the waits); the state is taken halfway.
PASS_BATCHES = 64
#: Batches read after the resume: the first is the latency, the others let a prefetching loader settle.
RESUMED_BATCHES = 4


@dataclass(frozen=True)
class LoaderLatencies:
    """What the chosen setting measured: seconds, and the per-batch wait in milliseconds.

    Example:
        >>> from torchloom.tools.bench.slos import LoaderLatencies
        >>> latencies = LoaderLatencies(startup_s=0.4, resume_s=0.3, wait_p50_ms=1.0, wait_p99_ms=6.0,
        ...                             batches=64)
        >>> latencies.as_json()
        {'first_batch_s': 0.4, 'resume_s': 0.3, 'wait_p50_ms': 1.0, 'wait_p99_ms': 6.0, 'batches': 64}
    """

    startup_s: float
    resume_s: float | None
    wait_p50_ms: float
    wait_p99_ms: float
    batches: int

    def as_json(self) -> dict[str, Any]:
        """The figures, rounded, under the names ``--json`` prints."""
        return {
            "first_batch_s": round(self.startup_s, 3),
            "resume_s": None if self.resume_s is None else round(self.resume_s, 3),
            "wait_p50_ms": round(self.wait_p50_ms, 2),
            "wait_p99_ms": round(self.wait_p99_ms, 2),
            "batches": self.batches,
        }

    def __str__(self) -> str:
        resume = "-" if self.resume_s is None else f"{self.resume_s:.2f} s"
        return (
            f"first batch {self.startup_s:.2f} s, resume {resume} (from load_state_dict to the first "
            f"batch), wait p50 {self.wait_p50_ms:.1f} ms, p99 {self.wait_p99_ms:.1f} ms over "
            f"{self.batches} batches"
        )


def resumable_loader(dataset: Dataset[Any], setting: dict[str, Any], collate_fn: Callable[..., Any]) -> Any:
    """The loader a ``tune`` setting describes, in a form that resumes.

    Example:
        >>> from torchloom.tools.bench.slos import resumable_loader
        >>> loader = resumable_loader(list(range(8)), {"batch_size": 4, "num_workers": 0}, list)
        >>> type(loader).__name__, [len(batch) for batch in loader]
        ('StatefulDataLoader', [4, 4])
    """
    options = dict(setting)
    if options.pop("loader", None) == "threads":
        return Loader(dataset, collate_fn=collate_fn, **options)
    from torchdata.stateful_dataloader import StatefulDataLoader  # torchdata imports slowly

    return StatefulDataLoader(dataset, collate_fn=collate_fn, **options)


def measure_latencies(
    dataset: Dataset[Any], setting: dict[str, Any], *, collate_fn: Callable[..., Any]
) -> LoaderLatencies:
    """Profile a fresh pass of ``setting`` and a resume from its middle.

    Example:
        >>> from torchloom.tools.bench.slos import measure_latencies
        >>> setting = {"batch_size": 4, "num_workers": 0}
        >>> latencies = measure_latencies(list(range(32)), setting, collate_fn=list)
        >>> latencies.batches, latencies.resume_s is not None
        (8, True)
    """
    fresh = resumable_loader(dataset, setting, collate_fn)
    batches = min(len(fresh), PASS_BATCHES)
    profiler, state = LoaderProfiler(fresh, stages=False), None
    for seen, _ in enumerate(profiler, start=1):
        if seen == max(1, batches // 2):
            state = profiler.state_dict()
        if seen == batches:
            break
    report = profiler.report(gather=False)
    del fresh, profiler  # its workers stop before the resumed loader's start
    resume_s = None
    if state is not None and batches > 1:  # a state taken at the end of the only batch resumes nothing
        resumed = LoaderProfiler(resumable_loader(dataset, setting, collate_fn), stages=False)
        resumed.load_state_dict(state)
        for seen, _ in enumerate(resumed, start=1):
            if seen == RESUMED_BATCHES:
                break
        resume_s = resumed.report(gather=False).resume_s
    return LoaderLatencies(
        startup_s=report.startup_s,
        resume_s=resume_s,
        wait_p50_ms=report.wait_p50_ms,
        wait_p99_ms=report.wait_p99_ms,
        batches=report.batches,
    )
