"""Each rank's loader latencies, gathered across a ``torch.distributed`` process group.

A training job is as fast as its slowest rank: one rank whose loader stalls holds every other rank
at the next collective. So the profiler's report carries, under DDP, one row per rank: the time to
its first batch, its resume latency and its p50/p99 wait, exchanged as one small float tensor per
rank (no pickling), on the GPU when the backend is NCCL, which only moves CUDA tensors.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class RankTimes:
    """One rank's loader latencies: ``startup_s`` is the time to its first batch, ``resume_s`` the time
    from ``load_state_dict`` to the first batch after it (None when it did not resume), the waits are
    the training loop's per-batch waits (milliseconds).

    Example:
        >>> from torchloom.loader import RankTimes
        >>> times = RankTimes(rank=1, batches=100, startup_s=0.8, resume_s=None, wait_share=0.02,
        ...                   wait_p50_ms=0.3, wait_p99_ms=4.0)
        >>> str(times)
        'rank 1: first batch 0.80 s, wait p50 0.3 ms, p99 4.0 ms (2% of step time, 100 batches)'
    """

    rank: int
    batches: int
    startup_s: float
    resume_s: float | None
    wait_share: float
    wait_p50_ms: float
    wait_p99_ms: float

    def __str__(self) -> str:
        resume = "" if self.resume_s is None else f", resume {self.resume_s:.2f} s"
        return (
            f"rank {self.rank}: first batch {self.startup_s:.2f} s{resume}, "
            f"wait p50 {self.wait_p50_ms:.1f} ms, p99 {self.wait_p99_ms:.1f} ms "
            f"({self.wait_share:.0%} of step time, {self.batches:,} batches)"
        )


def _as_row(times: RankTimes) -> list[float]:
    return [math.nan if value is None else float(value) for value in astuple(times)]


def _from_row(row: np.ndarray) -> RankTimes:
    rank, batches, startup, resume, share, p50, p99 = (float(value) for value in row)
    return RankTimes(
        rank=int(rank),
        batches=int(batches),
        startup_s=startup,
        resume_s=None if math.isnan(resume) else resume,
        wait_share=share,
        wait_p50_ms=p50,
        wait_p99_ms=p99,
    )


def distributed() -> bool:
    """Whether a ``torch.distributed`` process group is initialised in this process.

    Example:
        >>> distributed()
        False
    """
    return dist.is_available() and dist.is_initialized()


def gather_rank_times(own: RankTimes) -> tuple[RankTimes, ...]:
    """Every rank's latencies, ordered by rank, on every rank: a collective, so every rank of the
    process group must call it; without a process group, just ``own``.

    Example:
        >>> own = RankTimes(rank=0, batches=8, startup_s=0.5, resume_s=0.2, wait_share=0.0,
        ...                 wait_p50_ms=1.0, wait_p99_ms=2.0)
        >>> gather_rank_times(own) == (own,)
        True
    """
    if not distributed():
        return (own,)
    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    row = torch.tensor(_as_row(own), dtype=torch.float64, device=device)
    rows = [torch.empty_like(row) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, row)
    return tuple(sorted((_from_row(gathered.cpu().numpy()) for gathered in rows), key=lambda t: t.rank))
