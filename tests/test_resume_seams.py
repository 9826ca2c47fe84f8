"""Exactly once at every seam: the shared resume helper over every sampler, StreamDataset and
SyncedRecordings; elastic world sizes; refused mismatches; golden values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resume import Setup, Subject, check_every_seam
from subjects import SAMPLERS, sampler_subject, write_shards
from torchloom import StreamDataset
from torchloom.errors import StateMismatchError
from torchloom.fusion import SyncedRecordings
from torchloom.samplers import KeySampler

SETUPS = {
    "w0": Setup(num_workers=0, persistent=False),
    "w2": Setup(num_workers=2, persistent=False),
    "w2-persistent": Setup(num_workers=2, persistent=True),
}


def stream_subject(folder: Path, shuffle_buffer: int) -> Subject:
    shards = write_shards(folder, [11, 0, 17, 9, 13])
    return Subject(
        f"stream(shuffle_buffer={shuffle_buffer})",
        lambda: StreamDataset(shards, shuffle_buffer=shuffle_buffer, seed=2),
        lambda dataset: (dataset, None),
        lambda batch: batch["id"].tolist(),
        finished_epoch_advances=False,
        main_state_saved=False,
    )


def recording(frames: int) -> Callable[[], dict[str, Any]]:
    def streams() -> dict[str, Any]:
        camera = (np.arange(frames) / 10, np.arange(frames))
        imu = (np.arange(frames * 3) / 30, np.arange(frames * 3, dtype=np.float64))
        return {"cam": camera, "imu": imu}

    return streams


def recordings_subject() -> Subject:
    return Subject(
        "synced_recordings",
        lambda: SyncedRecordings([recording(7), recording(4), recording(9)], reference="cam", tolerance=0.02),
        lambda dataset: (dataset, None),
        lambda batch: list(zip(batch["recording"].tolist(), batch["cam"].tolist(), strict=True)),
        finished_epoch_advances=False,
        main_state_saved=False,
    )


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_at_every_seam_in_process(name: str) -> None:
    check_every_seam(sampler_subject(name), SETUPS["w0"])


@pytest.mark.parametrize("setup", ["w2", "w2-persistent"])
@pytest.mark.parametrize("name", ["balanced", "mixture_batches", "window"])
def test_samplers_at_every_seam_with_workers(name: str, setup: str) -> None:
    check_every_seam(sampler_subject(name), SETUPS[setup])


@pytest.mark.parametrize("setup", sorted(SETUPS))
@pytest.mark.parametrize("shuffle_buffer", [0, 6])
def test_stream_dataset_at_every_seam(tmp_path: Path, setup: str, shuffle_buffer: int) -> None:
    check_every_seam(stream_subject(tmp_path, shuffle_buffer), SETUPS[setup])


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_synced_recordings_at_every_seam(setup: str) -> None:
    check_every_seam(recordings_subject(), SETUPS[setup])


# --- elastic world sizes --------------------------------------------------------------------------


def ranks_of(name: str, world: int, epoch: int = 1) -> list[KeySampler]:
    samplers = []
    for rank in range(world):
        sampler = SAMPLERS[name]()
        sampler.rank, sampler.world_size = rank, world
        sampler.set_epoch(epoch)
        samplers.append(sampler)
    return samplers


@pytest.mark.parametrize(("before", "after"), [(1, 4), (4, 2), (2, 3), (3, 3), (4, 1)])
@pytest.mark.parametrize("name", ["balanced", "weighted_no_replacement", "mixture_batches", "window"])
def test_elastic_resume_covers_the_rest_of_the_global_order_exactly_once(
    name: str, before: int, after: int
) -> None:
    old = ranks_of(name, before)
    unit = old[0].unit
    steps = len(old[0]) // unit // 2  # every rank takes the same number of units (DDP lockstep)
    consumed: list[int] = []
    states = []
    for sampler in old:
        iterator = iter(sampler)
        consumed += [int(next(iterator)) for _ in range(steps * unit)]
        states.append(sampler.state_dict())
    new = ranks_of(name, after)
    rest: list[int] = []
    for rank, sampler in enumerate(new):
        sampler.load_state_dict(states[rank % before])
        rest += [int(key) for key in sampler]
    assert len({len(sampler) for sampler in new}) == 1, "every new rank has the same length"
    order = Counter(old[0].global_order(1).tolist())
    delivered = Counter(consumed + rest)
    assert order - delivered == Counter(), "nothing of the epoch is lost"
    assert sum((delivered - order).values()) == new[0].padded, "repeats are exactly the reported padding"


def test_world_size_one_state_on_four_ranks_yields_the_whole_rest() -> None:
    single = ranks_of("window", 1)[0]
    iterator = iter(single)
    taken = [int(next(iterator)) for _ in range(4)]
    state = single.state_dict()
    four = [_loaded(sampler, state) for sampler in ranks_of("window", 4)]
    rest = [int(key) for sampler in four for key in sampler]
    remaining = single.global_order(1).tolist()[4:]
    assert taken == single.global_order(1).tolist()[:4]
    assert Counter(rest) - Counter(remaining) == Counter(remaining[: four[0].padded])
    assert set(rest) == set(remaining) and four[0].padded < 4


def _loaded(sampler: KeySampler, state: dict[str, Any]) -> KeySampler:
    sampler.load_state_dict(state)
    return sampler


# --- what a state must match --------------------------------------------------------------------


def test_sampler_states_are_checked_against_what_they_are_loaded_into() -> None:
    from torchloom import BalancedSampler, WeightedSampler

    labels = [0, 0, 1, 1, 2]
    state = BalancedSampler(labels, seed=3).state_dict()
    assert state["version"] == 2 and state["kind"] == "BalancedSampler"
    with pytest.raises(StateMismatchError, match="'seed' is 3 but this BalancedSampler has 4"):
        BalancedSampler(labels, seed=4).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"config.num_samples' is 5 .* num_samples=9"):
        BalancedSampler(labels, seed=3, num_samples=9).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"config\.labels"):
        BalancedSampler([0, 1, 1, 1, 2], seed=3).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="written by a BalancedSampler, not a WeightedSampler"):
        WeightedSampler([1.0] * 5, num_samples=5, seed=3).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="version 99"):
        BalancedSampler(labels, seed=3).load_state_dict({**state, "version": 99})
    with pytest.raises(StateMismatchError, match="needs the dict"):
        BalancedSampler(labels, seed=3).load_state_dict([1, 2])  # type: ignore[arg-type]


def test_sampler_state_is_what_was_delivered_at_every_step() -> None:
    sampler = SAMPLERS["window"]()
    assert sampler.state_dict()["yielded"] == 0
    iterator = iter(sampler)
    next(iterator), next(iterator)
    state = sampler.state_dict()
    assert (state["epoch"], state["yielded"]) == (0, 2)
    sampler.set_epoch(1)
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["yielded"]) == (1, 0)
    fresh = SAMPLERS["window"]()
    fresh.load_state_dict(state)
    assert (fresh.state_dict()["epoch"], fresh.state_dict()["yielded"]) == (0, 2)  # right after a load
    fresh.set_epoch(0)  # the same epoch keeps the loaded position
    assert fresh.state_dict()["yielded"] == 2


def test_stream_states_are_checked(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, [5, 6])
    dataset = StreamDataset(shards, shuffle_buffer=4, seed=1)
    iterator = iter(dataset)
    next(iterator)
    state = dataset.state_dict()
    with pytest.raises(StateMismatchError, match="shards_fingerprint"):
        StreamDataset([*shards[::-1]], shuffle_buffer=4, seed=1).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="'shuffle_buffer' is 4 but this StreamDataset has 8"):
        StreamDataset(shards, shuffle_buffer=8, seed=1).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="'reader' is 'auto'"):
        StreamDataset(shards, reader=lambda shard: iter([]), shuffle_buffer=4, seed=1).load_state_dict(state)
    two_ranks = StreamDataset(shards, shuffle_buffer=4, seed=1, rank=0, world_size=2)
    two_ranks.load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"consumer 0 of 1 .* consumer 0 of 2"):
        next(iter(two_ranks))
    two_ranks.load_state_dict(state)
    two_ranks.set_epoch(1)  # a later epoch wins: nothing to re-split
    with pytest.warns(UserWarning, match=r"checkpoint of epoch 0 .* is not resumed: set_epoch\(1\)"):
        assert len(list(two_ranks)) == 5
    with pytest.raises(StateMismatchError, match="'recordings' is 3 but this SyncedRecordings has 2"):
        SyncedRecordings([recording(3)] * 2, reference="cam", tolerance=0.1).load_state_dict(
            SyncedRecordings([recording(3)] * 3, reference="cam", tolerance=0.1).state_dict()
        )


def test_stream_state_right_after_load_and_after_a_shard_jump(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, [3, 3, 3, 3])
    dataset = StreamDataset(shards)
    iterator = iter(dataset)
    first = [next(iterator)["id"] for _ in range(7)]
    state = dataset.state_dict()
    assert (state["consumed"], state["entry"], state["offset"]) == (7, 2, 1)
    resumed = StreamDataset(shards)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state  # right after the load: the loaded position
    iterator = iter(resumed)
    next(iterator)
    assert resumed.state_dict()["consumed"] == 8, "consumed counts from the epoch start, not the jump"
    rest = [record["id"] for record in iterator]
    assert [*first, 7, *rest] == list(range(12))


# --- golden values --------------------------------------------------------------------------------


def test_golden_sample_rng_and_crop_box() -> None:
    from torchloom import sample_rng
    from torchloom.transforms import RandomResizedCrop

    assert sample_rng(7, 3, 11).integers(0, 10**6, 4).tolist() == [415999, 484750, 420248, 778768]
    box = RandomResizedCrop(224).draw_box(480, 640, sample_rng(0, 1, 5))
    assert (box.top, box.left, box.height, box.width) == (12, 156, 407, 326)


def test_golden_mixture_batches_and_stream_shuffle(tmp_path: Path) -> None:
    sampler = SAMPLERS["mixture_batches"]()
    sampler.set_epoch(1)
    assert [int(key) for key in sampler][:10] == [28, 21, 8, 36, 15, 32, 29, 22, 19, 14]
    shards = write_shards(tmp_path, [11, 0, 17, 9, 13])
    assert [r["id"] for r in StreamDataset(shards, shuffle_buffer=6, seed=2)][:10] == GOLDEN_SHUFFLE


GOLDEN_SHUFFLE = [5, 1, 0, 7, 2, 4, 10, 8, 12, 3]
