"""Samplers: exact resume (one shared helper), DDP ranks, statistics, golden orders, properties."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from torch.utils.data import DataLoader, WeightedRandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from distributed import run_ranks
from subjects import LABELS, SAMPLERS, KeyEcho
from torchloom import BalancedSampler, MixedDataset, MixtureSampler, SampleKey, WeightedSampler
from torchloom.datasets import TableDataset, WindowDataset
from torchloom.samplers import BatchKeySampler, KeySampler, WindowSampler, batch_composition


def epoch_indices(sampler: KeySampler, epoch: int) -> list[int]:
    sampler.set_epoch(epoch)
    return [int(key) for key in sampler]


def consume(loader: Any, count: int) -> tuple[list[int], Any]:
    """The first ``count`` indices of an epoch, and the loader's iterator."""
    iterator = iter(loader)
    seen: list[int] = []
    for _ in range(count):
        seen.extend(next(iterator)["index"].tolist())
    return seen, iterator


def resumed_epoch(
    make: Callable[[], KeySampler],
    stops: list[int],
    num_workers: int,
    persistent: bool,
    stateful: bool,
    epoch: int = 1,
) -> list[int]:
    """Run one epoch interrupted after each count in ``stops``, rebuilding sampler and loader each time."""
    seen: list[int] = []
    state: Any = None
    for stop in [*stops, None]:
        sampler = make()
        sampler.set_epoch(epoch)
        loader_type = StatefulDataLoader if stateful else DataLoader
        options: dict[str, Any] = {
            "num_workers": num_workers,
            "persistent_workers": persistent and num_workers > 0,
        }
        loader = loader_type(KeyEcho(10_000), sampler=sampler, batch_size=1, **options)
        if state is not None:
            if stateful:
                loader.load_state_dict(state)
            else:
                sampler.load_state_dict(state)
        if stop is None:
            seen.extend(index for batch in loader for index in batch["index"].tolist())
            break
        already = len(seen)
        part, _ = consume(loader, stop - already)
        seen.extend(part)
        state = loader.state_dict() if stateful else {"epoch": epoch, "yielded": stop, "seed": sampler.seed}
    return seen


@pytest.mark.parametrize("name", sorted(SAMPLERS))
@pytest.mark.parametrize(
    ("num_workers", "persistent", "stateful"),
    [(0, False, False), (2, False, False), (2, True, False), (0, False, True), (2, True, True)],
)
def test_resume_loses_and_repeats_nothing(
    name: str, num_workers: int, persistent: bool, stateful: bool
) -> None:
    make = SAMPLERS[name]
    full = epoch_indices(make(), 1)
    length = len(full)
    for stop in sorted({0, 1, length // 2, length - 1}):  # the end of an epoch: test_resume_seams
        assert resumed_epoch(make, [stop], num_workers, persistent, stateful) == full, (
            f"interrupted at {stop}"
        )
    assert resumed_epoch(make, [length // 3, 2 * length // 3], num_workers, persistent, stateful) == full


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_resume_at_epoch_boundary_starts_a_full_next_epoch(name: str) -> None:
    sampler = SAMPLERS[name]()
    sampler.set_epoch(2)
    length = len(list(sampler))
    restored = SAMPLERS[name]()
    restored.load_state_dict({"epoch": 2, "yielded": length, "seed": 3})  # a torchloom 0.1 state
    assert restored.state_dict()["epoch"] == 3 and restored.state_dict()["yielded"] == 0
    with pytest.warns(UserWarning, match="the later epoch wins"):
        restored.set_epoch(2)  # an earlier epoch than the loaded position: the later one wins
    restored.set_epoch(3)
    keys = list(restored)
    assert len(keys) == len(restored) and {k.epoch for k in keys} == {3}
    assert [int(k) for k in keys] == epoch_indices(SAMPLERS[name](), 3)


def test_second_epoch_without_set_epoch_warns_once() -> None:
    sampler = BalancedSampler(LABELS, seed=0)
    list(sampler)
    with pytest.warns(UserWarning, match="set_epoch"):
        list(sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(sampler)  # once only
        sampler.set_epoch(1)
        list(sampler)


def test_keys_carry_the_epoch_and_orders_differ_between_epochs() -> None:
    sampler = BalancedSampler(LABELS, seed=1)
    sampler.set_epoch(4)
    assert {key.epoch for key in sampler} == {4}
    assert epoch_indices(BalancedSampler(LABELS, seed=1), 0) != epoch_indices(
        BalancedSampler(LABELS, seed=1), 1
    )


GOLDEN = {
    "balanced": [12, 31, 38, 23, 37, 40, 26, 31, 38, 37],
    "weighted": [31, 26, 39, 20, 29, 16, 19, 27, 39, 27],
    "mixture": [9, 11, 35, 12, 20, 23, 13, 18, 30, 21],
    "window": [15, 11, 14, 13, 16, 9, 7, 2, 0, 8],
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_first_indices(name: str) -> None:
    assert epoch_indices(SAMPLERS[name](), 0)[:10] == GOLDEN[name]


# --- statistics ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["inverse", "sqrt", "effective"])
def test_balanced_class_frequencies_chi_square(mode: str) -> None:
    labels = np.repeat([0, 1, 2, 3], [5000, 700, 90, 10])
    sampler = BalancedSampler(labels, mode=mode, num_samples=40_000, seed=11)  # type: ignore[arg-type]
    observed = np.bincount(labels[sampler.global_order(0)], minlength=4)
    assert stats.chisquare(observed, sampler.expected_counts()).pvalue > 0.001
    if mode == "inverse":
        np.testing.assert_allclose(sampler.expected_counts(), [10_000] * 4)


def test_balanced_works_past_torch_limit_of_2_pow_24() -> None:
    labels = np.zeros(2**24 + 10, dtype=np.int64)
    labels[-10:] = 1
    order = BalancedSampler(labels, num_samples=1000, seed=0).global_order(0)
    assert order.max() < len(labels) and np.count_nonzero(order >= 2**24) > 400


def test_weighted_frequencies_chi_square_and_without_replacement() -> None:
    weights = np.array([1.0, 2.0, 3.0, 0.0, 4.0])
    sampler = WeightedSampler(weights, num_samples=50_000, seed=5)
    observed = np.bincount(sampler.global_order(0), minlength=5)
    assert observed[3] == 0
    nonzero = weights > 0
    expected = 50_000 * weights[nonzero] / weights.sum()
    assert stats.chisquare(observed[nonzero], expected).pvalue > 0.001
    unique = WeightedSampler(weights, num_samples=4, replacement=False, seed=5).global_order(0)
    assert sorted(unique.tolist()) == [0, 1, 2, 4]
    firsts = Counter(
        int(WeightedSampler(weights, num_samples=1, replacement=False, seed=s).global_order(0)[0])
        for s in range(4000)
    )
    assert (
        stats.chisquare([firsts[i] for i in (0, 1, 2, 4)], [4000 * w / 10 for w in (1, 2, 3, 4)]).pvalue
        > 0.001
    )


def test_mixture_source_frequencies_and_exact_batch_composition() -> None:
    sizes, weights = [100_000, 100_000, 100_000], [0.7, 0.2, 0.1]
    free = MixtureSampler(sizes, weights, stop=30_000, seed=2)
    sources = np.searchsorted(free.offsets, free.global_order(0), side="right") - 1
    assert stats.chisquare(np.bincount(sources, minlength=3), [21_000, 6_000, 3_000]).pvalue > 0.001
    batched = MixtureSampler([500, 300, 100], weights, batch_size=32, seed=2)
    assert batch_composition(32, weights).tolist() == [22, 7, 3]
    for batch in BatchKeySampler(batched, 32):
        counts = np.bincount(
            np.searchsorted(batched.offsets, [int(k) for k in batch], side="right") - 1, minlength=3
        )
        assert counts.tolist() == [22, 7, 3]


def test_mixture_stop_rules() -> None:
    first = MixtureSampler([10, 50], [1, 1], seed=0).global_order(0)
    assert len(set(first.tolist())) == len(first) and np.count_nonzero(first < 10) == 10
    every = MixtureSampler([10, 50], [1, 1], stop="all_exhausted", seed=0).global_order(0)
    assert set(range(60)) <= set(every.tolist())
    assert len(MixtureSampler([10, 50], [1, 1], stop=17, seed=0)) == 17
    with pytest.raises(ValueError, match="stop"):
        MixtureSampler([10], [1], stop="never")  # type: ignore[arg-type]


def test_mixed_dataset_tags_source_and_passes_keys() -> None:
    import pyarrow as pa

    mixed = MixedDataset([TableDataset(pa.table({"x": [0, 1]})), KeyEcho(3)])
    assert mixed[1] == {"x": 1, "source": 0}
    assert mixed[SampleKey(3, epoch=7)] == {"index": 1, "epoch": 7, "source": 1}


def test_windows_never_cross_sequences() -> None:
    lengths = [5, 2, 7]
    steps = np.concatenate([np.full(n, s) for s, n in enumerate(lengths)])
    dataset = WindowDataset(steps, lengths, window=3, stride=2)
    sampler = WindowSampler(lengths, window=3, stride=2, seed=0)
    assert len(dataset) == len(sampler) == 2 + 0 + 3
    for key in sampler:
        window = dataset[key]
        assert len(set(window["window"].tolist())) == 1 and window["window"][0] == window["sequence"]
    with pytest.raises(ValueError, match="longer than the longest sequence"):
        WindowSampler(lengths, window=8)
    table_steps = TableDataset(__import__("pyarrow").table({"t": list(range(14)), "v": [0.5] * 14}))
    assert WindowDataset(table_steps, lengths, window=3)[0]["t"].tolist() == [0, 1, 2]


def test_bad_sampler_inputs() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        BalancedSampler([])
    with pytest.warns(UserWarning, match=r"classes \[1\]"):
        single = BalancedSampler([0, 0, 2], seed=0)
    assert single.probabilities.tolist() == [0.5, 0.0, 0.5]
    with pytest.warns(UserWarning, match=r"classes \[0, 1, 2, 3\]"):
        only = BalancedSampler([4, 4, 4], num_classes=5, seed=0)
    assert only.probabilities.tolist() == [0, 0, 0, 0, 1.0] and set(only.global_order(0).tolist()) <= {
        0,
        1,
        2,
    }
    with pytest.raises(ValueError, match="sum to 0"):
        WeightedSampler([0.0, 0.0], num_samples=1)
    with pytest.raises(ValueError, match="non-zero"):
        WeightedSampler([1.0, 0.0], num_samples=2, replacement=False)
    with pytest.raises(ValueError, match="rank"):
        BalancedSampler(LABELS, rank=2, world_size=2)


# --- distributed ---------------------------------------------------------------------------------


def _rank_indices(rank: int, world_size: int, drop_last: bool) -> dict[str, Any]:
    sampler = BalancedSampler(np.arange(23) % 3, num_samples=23, seed=9, drop_last=drop_last)
    sampler.set_epoch(1)
    loader = DataLoader(KeyEcho(100), sampler=sampler, batch_size=4, num_workers=0)
    batches = [batch["index"].tolist() for batch in loader]
    positions = WindowSampler([23], window=1, shuffle=False, drop_last=drop_last)
    return {
        "batches": batches,
        "padded": sampler.padded,
        "dropped": sampler.dropped,
        "rank": sampler.rank,
        "world": sampler.world_size,
        "positions": [int(k) for k in positions],
    }


@pytest.mark.parametrize("drop_last", [False, True])
def test_ddp_ranks_disjoint_complete_and_equal(drop_last: bool) -> None:
    results = run_ranks(_rank_indices, 2, drop_last)
    assert [r["rank"] for r in results] == [0, 1] and {r["world"] for r in results} == {2}
    assert len(results[0]["batches"]) == len(results[1]["batches"])
    global_order = BalancedSampler(np.arange(23) % 3, num_samples=23, seed=9).global_order(1).tolist()
    taken = [i for r in results for batch in r["batches"] for i in batch]
    positions = sorted(p for r in results for p in r["positions"])
    if drop_last:
        assert results[0]["dropped"] == 1 and positions == list(range(22))
        assert sorted(taken) == sorted(global_order[:22])
    else:
        assert results[0]["padded"] == 1 and positions == sorted([*range(23), 0])
        assert sorted(taken) == sorted([*global_order, global_order[0]])


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 60),
    world=st.integers(1, 5),
    drop_last=st.booleans(),
    seed=st.integers(0, 99),
    weights=st.lists(st.floats(0.1, 5), min_size=1, max_size=6),
)
def test_ranks_never_lose_or_duplicate_beyond_reported_padding(
    size: int, world: int, drop_last: bool, seed: int, weights: list[float]
) -> None:
    samplers = [
        WeightedSampler(
            np.resize(weights, size),
            num_samples=size,
            replacement=False,
            seed=seed,
            rank=rank,
            world_size=world,
            drop_last=drop_last,
        )
        for rank in range(world)
    ]
    taken = Counter(int(k) for sampler in samplers for k in sampler)
    lengths = {len(sampler) for sampler in samplers}
    assert len(lengths) == 1
    padded, dropped = samplers[0].padded, samplers[0].dropped
    assert sum(taken.values()) == size + padded - dropped
    assert sum(count - 1 for count in taken.values()) == padded
    assert len(taken) == size - dropped


def test_weighted_random_sampler_reference_still_differs_by_design() -> None:
    reference = list(
        WeightedRandomSampler([1.0, 1.0], num_samples=4, generator=torch.Generator().manual_seed(0))
    )
    assert len(reference) == 4


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_sampler_resume_through_stateful_dataloader(num_workers: int) -> None:
    def make() -> BatchKeySampler:
        return BatchKeySampler(SAMPLERS["mixture_batches"](), 5)

    def loader(batches: BatchKeySampler) -> StatefulDataLoader:
        return StatefulDataLoader(KeyEcho(100), batch_sampler=batches, num_workers=num_workers)

    full = [i for batch in loader(make()) for i in batch["index"].tolist()]
    first = loader(make())
    seen, _ = consume(first, 3)
    state = first.state_dict()
    resumed = loader(make())
    resumed.load_state_dict(state)
    seen += [i for batch in resumed for i in batch["index"].tolist()]
    assert seen == full and len(full) == len(make()) * 5


def test_mixture_refuses_batches_it_cannot_fill() -> None:
    with pytest.raises(ValueError, match="fewer samples than their share"):
        MixtureSampler([100, 2], [0.5, 0.5], batch_size=8)


@settings(max_examples=30, deadline=None)
@given(world=st.integers(1, 4), drop_last=st.booleans(), name=st.sampled_from(sorted(SAMPLERS)))
def test_any_sampler_splits_its_global_order_across_ranks(world: int, drop_last: bool, name: str) -> None:
    samplers = []
    for rank in range(world):
        sampler = SAMPLERS[name]()
        sampler.rank, sampler.world_size, sampler.drop_last = rank, world, drop_last
        samplers.append(sampler)
    order = samplers[0].global_order(0).reshape(-1, samplers[0].unit)
    units = len(order)
    per_rank = units // world if drop_last else -(-units // world)
    expected = (
        np.concatenate([order] * 2)[: per_rank * world]
        if per_rank * world > units
        else order[: per_rank * world]
    )
    taken = Counter(int(k) for sampler in samplers for k in sampler)
    assert taken == Counter(expected.reshape(-1).tolist())
    assert len({len(sampler) for sampler in samplers}) == 1
    assert (
        samplers[0].padded == (per_rank * world - units) * samplers[0].unit
        if not drop_last
        else samplers[0].dropped == (units - per_rank * world) * samplers[0].unit
    )


def test_state_across_key_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchloom.samplers.base as base

    monkeypatch.setattr(base, "KEY_CHUNK", 1000)
    sampler = WindowSampler([5000], window=1, shuffle=False)
    iterator = iter(sampler)
    for _ in range(2501):
        next(iterator)
    state = sampler.state_dict()
    assert state["yielded"] == 2501  # in the third chunk
    resumed = WindowSampler([5000], window=1, shuffle=False)
    resumed.load_state_dict(state)
    assert [int(k) for k in resumed] == list(range(2501, 5000))


def test_numpy_numbers_given_to_a_sampler_make_a_plain_checkpoint(tmp_path: Any) -> None:
    import io
    import json

    from torchloom import BalancedSampler
    from torchloom.samplers import WindowSampler

    samplers = [
        BalancedSampler(np.array([0, 1, 1, 2] * 5), seed=np.int64(4), beta=np.float64(0.9), mode="effective"),
        WindowSampler([10, 15], window=np.int64(4), stride=np.int64(2), seed=np.int64(1)),
        MixtureSampler([20, 10], [0.5, 0.5], batch_size=np.int64(4), seed=np.int64(2)),
    ]
    for sampler in samplers:
        iterator = iter(sampler)
        next(iterator)
        state = sampler.state_dict()
        json.dumps(state)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        assert torch.load(buffer, weights_only=True) == state
        sampler.load_state_dict(json.loads(json.dumps(state)))


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_set_epoch_of_an_epoch_read_to_its_end_reads_it_again_and_its_state_agrees(name: str) -> None:
    sampler = SAMPLERS[name]()
    whole = epoch_indices(sampler, 0)
    sampler.set_epoch(0)  # as Lightning's validation loop does before every validation
    state = sampler.state_dict()
    assert (state["epoch"], state["yielded"]) == (0, 0) and [int(k) for k in sampler] == whole
    resumed = SAMPLERS[name]()
    resumed.load_state_dict(state)
    resumed.set_epoch(0)
    assert [int(k) for k in resumed] == whole


def test_a_rank_with_nothing_to_read_resumes_its_start_as_the_start() -> None:
    empty = BalancedSampler([0, 1, 1], seed=0, num_samples=3, rank=3, world_size=4, drop_last=True)
    assert len(empty) == 0
    resumed = BalancedSampler([0, 1, 1], seed=0, num_samples=3, rank=3, world_size=4, drop_last=True)
    resumed.load_state_dict(empty.state_dict())
    assert resumed.epoch == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed.set_epoch(0)  # not a set_epoch that loses to a loaded later epoch
