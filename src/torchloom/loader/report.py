"""What a :class:`~torchloom.LoaderProfiler` measured, and what it advises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchloom.io.threads import usable_cores
from torchloom.loader.ranks import RankTimes

#: Above this share of step time spent waiting, a loop is data-bound.
DATA_BOUND_SHARE = 0.10
#: Start-up above this share of the measured wall time is worth a word.
STARTUP_SHARE = 0.25

ADVICE = {
    "decode": (
        "decode once: wrap the dataset in torchloom.DecodedCache (with max_side= for sources much "
        "larger than the training size); random augmentation still runs per epoch"
    ),
    "read": (
        "reading files is the cost: keep the data on local disk, or build a DecodedCache with "
        "location='memory'"
    ),
    "transform": (
        "the transforms are the cost: crop before resizing, keep uint8 and normalise on the batch on the GPU"
    ),
    "collate": "collate is the cost: use torchloom.collate, which writes images into one batch buffer",
    "handoff": (
        "batches wait to cross from worker processes into the training process: use torchloom.Loader "
        "(threads in the training process, no hand-off)"
    ),
}


@dataclass
class ProfileReport:
    """Times in seconds (``*_ms``: milliseconds); ``stages`` sums every worker's stage times.

    The latencies a team can hold a pipeline to: ``startup_s``, the time to the first batch;
    ``resume_s``, from :meth:`LoaderProfiler.load_state_dict <torchloom.LoaderProfiler.load_state_dict>`
    to the first batch after it (None without a resume; the slowest when it resumed more than once);
    and the percentiles of the per-batch wait. Under ``torch.distributed``, ``ranks`` holds those of
    every rank, ordered by rank (a job is as fast as its slowest rank); otherwise only this process's.
    ``str(report)`` prints the verdict, the times, each stage's share, each rank and the advice.

    Example:
        >>> from torchloom.loader import ProfileReport
        >>> report = ProfileReport(batches=10, samples=640, wall_s=2.0, startup_s=0.1, wait_s=1.2,
        ...                        step_s=0.7, wait_share=0.63, samples_per_s=320.0,
        ...                        wait_p50_ms=120.0, wait_p90_ms=130.0, wait_p99_ms=140.0,
        ...                        stages={"read": 0.1, "decode": 2.1, "transform": 0.6, "collate": 0.2})
        >>> report.data_bound, round(report.stage_shares()["decode"], 2)
        (True, 0.7)
    """

    batches: int
    samples: int
    wall_s: float
    startup_s: float
    wait_s: float
    step_s: float
    wait_share: float
    samples_per_s: float
    wait_p50_ms: float
    wait_p90_ms: float
    wait_p99_ms: float
    stages: dict[str, float] = field(default_factory=dict)
    handoff_s: float = 0.0
    resume_s: float | None = None
    ranks: tuple[RankTimes, ...] = ()
    verdict: str = ""
    advice: str = ""

    @property
    def data_bound(self) -> bool:
        return self.wait_share > DATA_BOUND_SHARE

    def stage_shares(self) -> dict[str, float]:
        """Each stage's share of the loading time measured (hand-off included)."""
        times = {name: seconds for name, seconds in self.stages.items() if seconds > 0}
        if self.handoff_s > 0:
            times["handoff"] = self.handoff_s
        total = sum(times.values())
        return {name: seconds / total for name, seconds in times.items()} if total > 0 else {}

    def __str__(self) -> str:
        lines = [
            self.verdict,
            f"  {self.samples:,} samples in {self.batches:,} batches, {self.samples_per_s:,.0f} samples/s "
            f"over {self.wall_s:.2f} s (first batch after {self.startup_s:.2f} s"
            + ("" if self.resume_s is None else f", first batch {self.resume_s:.2f} s after resuming")
            + ")",
            f"  waiting for data {self.wait_s:.2f} s, model steps {self.step_s:.2f} s; per-batch wait "
            f"p50 {self.wait_p50_ms:.1f} ms, p90 {self.wait_p90_ms:.1f} ms, p99 {self.wait_p99_ms:.1f} ms",
        ]
        shares = self.stage_shares()
        if shares:
            parts = ", ".join(
                f"{name} {share:.0%}" for name, share in sorted(shares.items(), key=lambda s: -s[1])
            )
            lines.append(f"  loading time: {parts}")
        if len(self.ranks) > 1:
            lines += [f"  {times}" for times in self.ranks]
        if self.advice:
            lines.append(f"  advice: {self.advice}")
        return "\n".join(lines)


def advise(report: ProfileReport, loader: Any) -> tuple[str, str]:
    """The one-line verdict and the change most likely to help, with the measured reason.

    Example:
        >>> report = ProfileReport(batches=10, samples=640, wall_s=2.0, startup_s=0.1, wait_s=1.2,
        ...                        step_s=0.7, wait_share=0.63, samples_per_s=320.0,
        ...                        wait_p50_ms=120.0, wait_p90_ms=130.0, wait_p99_ms=140.0,
        ...                        stages={"read": 0.1, "decode": 2.1, "transform": 0.6, "collate": 0.2})
        >>> verdict, advice = advise(report, None)
        >>> verdict
        'data-bound: 63% of step time waiting for data; decode is 70% of loading time'
    """
    shares = report.stage_shares()
    if not any(report.stages.get(stage, 0.0) > 0 for stage in ("read", "decode", "transform")):
        shares = {}  # not a torchloom dataset: its own stages were not timed, so no share is telling
    top = max(shares, key=lambda name: shares[name]) if shares else None
    where = f"; {top} is {shares[top]:.0%} of loading time" if top else ""
    if not report.data_bound:
        verdict = f"not data-bound: {report.wait_share:.0%} of step time waiting for data{where}"
        advice = "the model is the bottleneck; a faster loader would not speed up training"
        if report.startup_s > STARTUP_SHARE * max(report.wall_s, 1e-9):
            advice = (
                f"start-up took {report.startup_s:.2f} s of {report.wall_s:.2f} s: use "
                "persistent_workers=True so workers are not restarted every epoch"
            )
        return verdict, advice
    verdict = f"data-bound: {report.wait_share:.0%} of step time waiting for data{where}"
    workers = getattr(loader, "num_workers", None)
    cores = usable_cores()
    if isinstance(workers, int) and workers < cores - 1 and top != "handoff":
        return verdict, (
            f"use more workers: {workers} of {cores} cores load data while the loop waits "
            f"{report.wait_p50_ms:.0f} ms per batch (p50)"
        )
    return verdict, ADVICE.get(
        top or "", "profile the dataset's __getitem__: the loader waits but no stage was timed"
    )
