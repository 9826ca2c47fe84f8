"""LoaderProfiler's SLOs on a fake clock: time to the first batch, resume latency (from
``load_state_dict`` to the first batch after it) and each rank's p50/p99 wait, gathered to rank 0
under DDP (2 gloo ranks)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from distributed import run_ranks
from torchloom import Loader, LoaderProfiler, collate
from torchloom.errors import UsageError
from torchloom.loader import RankTimes
from torchloom.loader import profiler as profiling

BATCH, BATCHES, LOAD_S, STEP_S = 4, 10, 0.001, 0.01
SLOW_BATCH, SLOW_FACTOR = 6, 20  # one batch of the epoch loads 20 times slower: the p99 sees it


class Clock:
    """The profiler's clock, moved only by the test (as in test_profiler.py)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def use_fake_clock(monkeypatch: Any) -> Clock:
    clock = Clock()
    monkeypatch.setattr(profiling, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    return clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return use_fake_clock(monkeypatch)


class Paced(Dataset[dict[str, Any]]):
    """Each sample moves the fake clock by ``load_s``; the samples of batch ``SLOW_BATCH`` by more."""

    def __init__(self, clock: Clock, load_s: float = LOAD_S) -> None:
        self.clock, self.load_s = clock, load_s

    def __len__(self) -> int:
        return BATCHES * BATCH

    def __getitem__(self, index: int) -> dict[str, Any]:
        slow = index // BATCH == SLOW_BATCH
        self.clock.now += self.load_s * (SLOW_FACTOR if slow else 1)
        return {"x": torch.zeros(2), "index": index}


def expected_waits_ms(load_s: float) -> np.ndarray:
    """The loop's waits for batches 1.. (batch 0 is the time to the first batch), in ms."""
    batch_s = [load_s * BATCH * (SLOW_FACTOR if batch == SLOW_BATCH else 1) for batch in range(1, BATCHES)]
    return np.asarray(batch_s) * 1e3


def profile_an_epoch(clock: Clock, load_s: float = LOAD_S) -> LoaderProfiler:
    profiler = LoaderProfiler(StatefulDataLoader(Paced(clock, load_s), batch_size=BATCH, collate_fn=collate))
    for _ in profiler:
        clock.now += STEP_S
    return profiler


def test_first_batch_and_wait_percentiles_are_exact(clock: Clock) -> None:
    report = profile_an_epoch(clock).report()
    waits = expected_waits_ms(LOAD_S)
    assert report.startup_s == pytest.approx(LOAD_S * BATCH)
    assert report.wait_p50_ms == pytest.approx(np.percentile(waits, 50))
    assert report.wait_p99_ms == pytest.approx(np.percentile(waits, 99))
    assert report.wait_p99_ms > 10 * report.wait_p50_ms  # the slow batch shows in the tail only
    assert report.resume_s is None and "resuming" not in str(report)
    (own,) = report.ranks  # no process group: this process alone, as rank 0
    assert own == RankTimes(
        rank=0,
        batches=BATCHES,
        startup_s=report.startup_s,
        resume_s=None,
        wait_share=report.wait_share,
        wait_p50_ms=report.wait_p50_ms,
        wait_p99_ms=report.wait_p99_ms,
    )


def test_resume_latency_runs_from_load_state_dict_to_the_first_batch_after_it(clock: Clock) -> None:
    first = LoaderProfiler(StatefulDataLoader(Paced(clock), batch_size=BATCH, collate_fn=collate))
    for step, _ in enumerate(first):
        clock.now += STEP_S
        if step == 3:
            break
    state = first.state_dict()
    resumed = LoaderProfiler(StatefulDataLoader(Paced(clock), batch_size=BATCH, collate_fn=collate))
    resumed.load_state_dict(state)
    clock.now += 0.5  # the model and optimizer load between the two: part of the resume
    indices = [int(i) for batch in resumed for i in batch["index"]]
    assert indices == list(range(4 * BATCH, BATCHES * BATCH))  # the state reached the loader
    report = resumed.report()
    assert report.resume_s == pytest.approx(0.5 + LOAD_S * BATCH)
    assert report.ranks[0].resume_s == report.resume_s
    assert "first batch 0.50 s after resuming" in str(report)


def test_a_resume_inside_a_profiled_run_is_timed_too(clock: Clock) -> None:
    profiler = profile_an_epoch(clock)
    profiler.load_state_dict(profiler.state_dict())  # a finished epoch resumes into the next one
    clock.now += 0.25
    for _ in profiler:
        clock.now += STEP_S
    report = profiler.report()
    assert report.batches == 2 * BATCHES and report.startup_s == pytest.approx(LOAD_S * BATCH)
    assert report.resume_s == pytest.approx(0.25 + LOAD_S * BATCH)


def test_the_thread_loader_resume_is_timed() -> None:
    loader = Loader(Paced(Clock()), batch_size=BATCH, num_threads=2)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    profiler = LoaderProfiler(Loader(Paced(Clock()), batch_size=BATCH, num_threads=2))
    profiler.load_state_dict(state)
    assert len(list(profiler)) == BATCHES - 1
    resume_s = profiler.report().resume_s
    assert resume_s is not None and resume_s > 0


def test_resuming_through_a_loader_without_state_is_a_usage_error() -> None:
    profiler = LoaderProfiler(DataLoader(Paced(Clock()), batch_size=BATCH))
    with pytest.raises(UsageError, match=r"DataLoader has no load_state_dict.*StatefulDataLoader"):
        profiler.load_state_dict({})
    with pytest.raises(UsageError, match=r"without a loader.*LoaderProfiler\(loader\)"):
        LoaderProfiler().state_dict()


def _profile_on_rank(rank: int, world_size: int) -> tuple[tuple[RankTimes, ...], tuple[RankTimes, ...]]:
    """Rank r loads (r + 1) times slower and resumes after (r + 1) × 0.1 s of model loading."""
    clock = use_fake_clock(pytest.MonkeyPatch())
    load_s = LOAD_S * (rank + 1)
    state = profile_an_epoch(clock, load_s).state_dict()
    resumed = LoaderProfiler(StatefulDataLoader(Paced(clock, load_s), batch_size=BATCH, collate_fn=collate))
    resumed.load_state_dict(state)
    clock.now += 0.1 * (rank + 1)
    for _ in resumed:
        clock.now += STEP_S
    return resumed.report().ranks, resumed.report(gather=False).ranks


def test_each_ranks_latencies_are_gathered_under_ddp() -> None:
    results = run_ranks(_profile_on_rank, 2)
    gathered, alone = results[0]
    assert [times.rank for times in gathered] == [0, 1] and results[1][0] == gathered  # every rank has it
    assert alone == gathered[:1] and results[1][1] == gathered[1:]
    for rank, times in enumerate(gathered):
        load_s = LOAD_S * (rank + 1)
        waits = expected_waits_ms(load_s)
        assert times.batches == BATCHES
        assert times.startup_s == pytest.approx(load_s * BATCH)
        assert times.resume_s == pytest.approx(0.1 * (rank + 1) + load_s * BATCH)
        assert times.wait_p50_ms == pytest.approx(np.percentile(waits, 50))
        assert times.wait_p99_ms == pytest.approx(np.percentile(waits, 99))
