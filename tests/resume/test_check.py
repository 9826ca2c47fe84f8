"""check_resume certifies every torchloom sampler, StreamDataset and the Loader, and names the sample a
planted sampler loses or repeats on resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from subjects import SAMPLERS, KeyEcho, write_shards
from torchloom import IndexSampler, Loader, ResumeReport, StreamDataset, check_resume
from torchloom.errors import ConfigError, UsageError
from torchloom.samplers import BatchKeySampler

BATCH = 4


def by_kind(kind: str, make_sampler: Callable[[], Any], batch_size: int = BATCH) -> Callable[..., Any]:
    """make_loader(rank, world_size, num_workers) reading KeyEcho through ``kind`` of loader."""

    def make_loader(rank: int, world_size: int, num_workers: int) -> Any:
        sampler = make_sampler()
        sampler.rank, sampler.world_size = rank, world_size
        dataset = KeyEcho(1000)
        if kind == "loader":
            return Loader(dataset, batch_size=batch_size, sampler=sampler, num_threads=num_workers + 1)
        if kind == "batch_sampler":
            return DataLoader(
                dataset, batch_sampler=BatchKeySampler(sampler, batch_size), num_workers=num_workers
            )
        loader = StatefulDataLoader if kind == "stateful" else DataLoader
        return loader(dataset, sampler=sampler, batch_size=batch_size, num_workers=num_workers)

    return make_loader


def assert_exact(report: ResumeReport) -> None:
    assert report.ok, report.summary()


@pytest.mark.parametrize("kind", ["dataloader", "stateful", "loader"])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_is_certified_through_each_loader_and_another_world_size(name: str, kind: str) -> None:
    batch_size = 5 if name == "mixture_batches" else BATCH  # whole batches of its composition
    report = check_resume(by_kind(kind, SAMPLERS[name], batch_size), world_sizes=(1, 2))
    assert_exact(report)
    stops = [case.stop for case in report.cases]
    for seam in ("before the first batch", "after the first batch", "mid-epoch", "before the last batch"):
        assert any(seam in stop for stop in stops), seam
    assert any("at its end" in stop for stop in stops) and any("resume of a resume" in stop for stop in stops)
    assert any("right after the load" in stop for stop in stops)
    assert {case.world_size for case in report.cases} == {1, 2}


@pytest.mark.parametrize(
    ("kind", "workers"), [("dataloader", (0, 2)), ("batch_sampler", (2, 0)), ("stateful", (2,))]
)
def test_samplers_are_certified_with_workers(kind: str, workers: tuple[int, ...]) -> None:
    report = check_resume(by_kind(kind, SAMPLERS["window"]), num_workers=workers, random_stops=0)
    assert_exact(report)
    assert {case.num_workers for case in report.cases} == set(workers)


# Resumed after an epoch's last batch, a consumer of a stream warns that its checkpoint loses to the
# next epoch's set_epoch (it cannot know the other consumers are done): as it should.
STREAM_WARNING = "ignore:StreamDataset. a checkpoint of epoch .* is not resumed:UserWarning"


@pytest.mark.filterwarnings(STREAM_WARNING)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("shuffle_buffer", [0, 6])
def test_stream_dataset_is_certified(tmp_path: Path, workers: int, shuffle_buffer: int) -> None:
    shards = write_shards(tmp_path, [16, 0, 24, 8, 16])

    def make_loader(rank: int, world_size: int, num_workers: int) -> StatefulDataLoader:
        stream = StreamDataset(
            shards, shuffle_buffer=shuffle_buffer, seed=2, rank=rank, world_size=world_size
        )
        return StatefulDataLoader(stream, batch_size=8, num_workers=num_workers)

    # Workers deliver a stream round-robin; resumed after an epoch's last batch, the next epoch may
    # start at another worker: every record exactly once, in another order.
    report = check_resume(
        make_loader, num_workers=(workers,), sample_id=lambda batch: batch["id"], ordered=workers == 0
    )
    assert_exact(report)


@pytest.mark.filterwarnings(STREAM_WARNING)
def test_stream_dataset_is_certified_on_two_ranks(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, [8, 16, 16, 8])  # ranks of equal length, as DDP needs

    def make_loader(rank: int, world_size: int, num_workers: int) -> StatefulDataLoader:
        stream = StreamDataset(shards, seed=2, rank=rank, world_size=world_size)
        return StatefulDataLoader(stream, batch_size=8, num_workers=num_workers)

    report = check_resume(make_loader, world_sizes=(2,), sample_id=lambda batch: batch["id"])
    assert_exact(report)
    assert report.samples_per_epoch == (48, 48) and report.world_size == 2


@pytest.mark.parametrize("world_sizes", [(1, 3), (2, 1)])
def test_the_loader_is_certified_with_its_own_sampler_threads_and_world_sizes(
    world_sizes: tuple[int, ...],
) -> None:
    def make_loader(rank: int, world_size: int, num_workers: int) -> Loader:
        sampler = IndexSampler(150, seed=4, rank=rank, world_size=world_size)
        return Loader(KeyEcho(150), batch_size=6, sampler=sampler, num_threads=num_workers + 1)

    report = check_resume(make_loader, world_sizes=world_sizes, num_workers=(0, 2), stops=[3, 20])
    assert_exact(report)
    assert any("(chosen)" in case.stop for case in report.cases)


def test_the_loader_with_its_default_sampler_is_certified() -> None:
    def make_loader(rank: int, world_size: int, num_workers: int) -> Loader:
        return Loader(KeyEcho(90), batch_size=8, shuffle=True, seed=3, num_threads=num_workers + 1)

    assert_exact(check_resume(make_loader, epochs=3))


class LosesOneOnResume(IndexSampler):
    """Planted bug: a resumed epoch skips the next index."""

    def _set_state(self, state: dict[str, Any]) -> None:
        super()._set_state(state)
        if self._resume_from:
            self._resume_from += 1


class RepeatsOneOnResume(IndexSampler):
    """Planted bug: a resumed epoch yields the last delivered index again."""

    def _set_state(self, state: dict[str, Any]) -> None:
        super()._set_state(state)
        if self._resume_from:
            self._resume_from -= 1


@pytest.mark.parametrize("kind", ["dataloader", "loader"])
@pytest.mark.parametrize(
    ("planted", "expected", "position"), [(LosesOneOnResume, "lost", 4), (RepeatsOneOnResume, "repeated", 3)]
)
def test_a_planted_sampler_fails_naming_the_sample_the_stop_and_the_setting(
    kind: str, planted: type[IndexSampler], expected: str, position: int
) -> None:
    report = check_resume(by_kind(kind, lambda: planted(60, seed=5)))
    assert not report.ok
    failure = report.first_failure
    assert failure is not None and failure.mismatch is not None
    order = IndexSampler(60, seed=5).global_order(0).tolist()
    assert failure.mismatch.kind == expected
    assert failure.mismatch.sample == order[position]  # the first batch is 4 samples: 0..3 delivered
    assert (failure.mismatch.epoch, failure.mismatch.rank) == (0, 0)
    assert failure.stop == "epoch 0 after batch 1 of 15 (after the first batch)"
    assert (failure.world_size, failure.num_workers) == (1, 0)
    assert f"sample {order[position]} {expected} in epoch 0 on rank 0" in report.summary()
    assert report.cases[0].ok, "the uninterrupted run with checkpoints is exact"
    assert [case.ok for case in report.cases[1:3]] == [True, False], "a stop before any batch resumes exactly"


def test_a_planted_sampler_fails_over_all_ranks_after_another_world_size() -> None:
    report = check_resume(by_kind("loader", lambda: LosesOneOnResume(60, seed=5)), world_sizes=(2, 3))
    failing = [case for case in report.failures if case.world_size == 3]
    assert failing and all(case.mismatch is not None for case in failing)
    mismatch = failing[0].mismatch
    assert mismatch is not None and mismatch.kind == "lost" and mismatch.rank is None


def test_a_loader_that_cannot_be_checkpointed_or_batches_without_ids_are_usage_errors() -> None:
    with pytest.raises(UsageError, match=r"cannot checkpoint a DataLoader.*StatefulDataLoader"):
        check_resume(lambda rank, world, workers: DataLoader(KeyEcho(10), batch_size=2))
    with pytest.raises(UsageError, match=r"'index' field.*sample_id="):
        check_resume(lambda rank, world, workers: StatefulDataLoader(list(range(10)), batch_size=2))


def test_sample_ids_may_be_any_hashable_values() -> None:
    names = [f"s{i}" for i in range(12)]
    report = check_resume(
        lambda rank, world, workers: StatefulDataLoader(
            names, sampler=IndexSampler(12, seed=1), batch_size=4
        ),
        sample_id=lambda batch: batch,
    )
    assert_exact(report)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"world_sizes": ()}, "world_sizes needs at least one value"),
        ({"num_workers": (-1,)}, "num_workers must be integers >= 0"),
        ({"epochs": 0}, "epochs must be an integer >= 1"),
        ({"stops": [10_000]}, "step 10000 is past the run's 60 steps"),
    ],
)
def test_settings_are_validated(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_resume(by_kind("loader", lambda: IndexSampler(60, seed=5), batch_size=2), **settings)
