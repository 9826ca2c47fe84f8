"""The epoch rules (torchloom.resume.epochs): each rule on its own, each order of set_epoch and
load_state_dict, and the same outcome from every owner (sampler, Loader, stream)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DistributedSampler

from subjects import KeyEcho, write_shards
from torchloom import Loader, StreamDataset
from torchloom.resume.epochs import Epochs, loaded_epoch_wins
from torchloom.samplers import IndexSampler

# --- each rule ------------------------------------------------------------------------------------


def test_set_epoch_starts_an_epoch_and_the_current_one_again_is_taken_too() -> None:
    epochs = Epochs("Owner")
    assert (epochs.set_epoch(3), epochs.epoch, epochs.requested) == (True, 3, 3)
    assert (epochs.set_epoch(3), epochs.epoch) == (True, 3)  # the owner keeps its position
    assert (epochs.set_epoch(1), epochs.epoch) == (True, 1)  # nothing loaded: any epoch


def test_a_load_is_the_position_right_after_it() -> None:
    epochs = Epochs("Owner")
    assert epochs.admits(4) and epochs.load(4, finished=False) == 4
    assert (epochs.epoch, epochs.loaded) == (4, 4)


@pytest.mark.parametrize(("requested", "applies"), [(0, True), (1, True), (2, False)])
def test_set_epoch_then_load_the_later_epoch_wins(requested: int, applies: bool) -> None:
    epochs = Epochs("Owner")
    epochs.set_epoch(requested)
    assert epochs.admits(1) is applies  # a checkpoint of epoch 1: the same epoch keeps the loaded position


@pytest.mark.parametrize(("requested", "taken"), [(0, False), (1, True), (2, True)])
def test_load_then_set_epoch_the_later_epoch_wins(requested: int, taken: bool) -> None:
    epochs = Epochs("Owner")
    epochs.load(1, finished=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert epochs.set_epoch(requested) is taken
    assert epochs.epoch == max(requested, 1)
    if requested == 1:
        assert not caught
    elif taken:  # the loaded position loses to a later epoch, and says so
        assert len(caught) == 1
        assert "a checkpoint of epoch 1 was loaded but is not resumed: set_epoch(2)" in str(caught[0].message)
    else:
        assert len(caught) == 1
        assert "Owner.set_epoch(0) after loading a checkpoint of epoch 1: the later epoch wins" in str(
            caught[0].message
        )


def test_a_finished_epoch_resumes_into_the_next_unless_a_consumer_cannot_know() -> None:
    assert Epochs("Sampler").load(2, finished=True) == 3
    stream = Epochs("Stream", finished_moves_on=False)
    assert stream.load(2, finished=True) == 2 and stream.epoch == 2


def test_an_iteration_settles_what_came_before_it() -> None:
    epochs = Epochs("Owner")
    epochs.set_epoch(5)
    epochs.begin()
    assert epochs.requested is None and epochs.admits(2), "a load after an iteration applies"
    epochs.load(2, finished=False)
    epochs.begin()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert epochs.set_epoch(0), "after an iteration, set_epoch moves to any epoch"


def test_a_finished_epoch_repeats_until_set_epoch_or_a_load() -> None:
    epochs = Epochs("Owner")
    epochs.set_epoch(2)
    epochs.finish(2)
    assert epochs.repeats() and epochs.repeats(2) and not epochs.repeats(3)
    epochs.set_epoch(2)
    assert not epochs.repeats()
    epochs.finish(2)
    epochs.load(2, finished=False)
    assert not epochs.repeats()
    epochs.finish(2)
    epochs.follow(2)
    assert not epochs.repeats()


def test_an_epoch_set_from_outside_is_a_request_nothing_refuses() -> None:
    epochs = Epochs("Loader")
    epochs.load(3, finished=False)
    epochs.follow(1)  # e.g. the sampler's own set_epoch: it has happened
    assert (epochs.epoch, epochs.requested) == (1, 1)
    assert not epochs.admits(0) and epochs.admits(1)


def test_the_rule_between_a_load_and_a_request() -> None:
    assert loaded_epoch_wins(2, None) and loaded_epoch_wins(2, 2) and loaded_epoch_wins(3, 2)
    assert not loaded_epoch_wins(1, 2)


def test_the_current_epoch_again_starts_over_once_an_iteration_began_and_a_loaded_one_is_kept() -> None:
    epochs = Epochs("Owner")
    epochs.set_epoch(2)
    epochs.begin()
    assert epochs.set_epoch(2) and not epochs.resuming, "after a break or its end: from its start"
    epochs.load(2, finished=False)
    assert epochs.set_epoch(2) and epochs.resuming, "a resumed epoch continues"
    epochs.begin()
    assert not epochs.resuming


@pytest.mark.parametrize("order", ["set_epoch, load", "load, set_epoch"])
def test_a_load_that_loses_to_a_later_epoch_warns_in_either_order(order: str) -> None:
    epochs = Epochs("Owner")
    with pytest.warns(UserWarning, match=r"epoch 1 \(4 in\) was loaded but is not resumed: set_epoch\(2\)"):
        if order == "set_epoch, load":
            epochs.set_epoch(2)
            assert epochs.load(1, finished=False, position="4 in") is None
        else:
            epochs.load(1, finished=False, position="4 in")
            epochs.set_epoch(2)
    assert (epochs.epoch, epochs.resuming) == (2, False)


def test_a_position_with_nothing_left_to_read_loses_to_a_later_epoch_quietly() -> None:
    stream = Epochs("Stream", finished_moves_on=False)
    stream.set_epoch(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing of epoch 2 was left for this consumer to read
        assert stream.load(2, finished=True, left=False) is None
        stream.begin()
        stream.load(2, finished=True, left=False)
        stream.set_epoch(3)
    reading = Epochs("Stream", finished_moves_on=False)
    reading.set_epoch(3)
    with pytest.warns(UserWarning, match="is not resumed"):  # records of epoch 2 were left: lost
        reading.load(2, finished=False)


def test_a_load_without_an_epoch_belongs_to_the_epoch_set_around_it() -> None:
    after = Epochs("Owner")
    assert after.load(None, finished=False) == 0
    assert after.set_epoch(3) and after.resuming and after.epoch == 3
    before = Epochs("Owner")
    before.set_epoch(2)
    assert before.load(None, finished=False) == 2 and before.resuming


def test_a_loop_one_behind_a_checkpoint_is_told_what_is_read_and_then_that_it_repeats() -> None:
    epochs = Epochs("Owner")
    epochs.load(0, finished=True)
    with pytest.warns(UserWarning) as lost:
        assert not epochs.set_epoch(0)
    message = str(lost[0].message)
    assert "after loading a checkpoint at the end of epoch 0" in message
    assert "reads epoch 1 whole, not epoch 0" in message and "Start your epoch loop at epoch 1" in message
    assert lost[0].filename == __file__
    epochs.begin()
    epochs.finish(1)
    with pytest.warns(UserWarning, match="epoch 1 was read to its end already") as repeat:
        assert epochs.set_epoch(1) and not epochs.resuming
    assert repeat[0].filename == __file__
    epochs.finish(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        epochs.set_epoch(1)  # a repeat asked for again (a validation loop): quiet
        epochs.set_epoch(2)


def test_a_rank_with_nothing_left_is_at_its_start_unless_its_share_was_consumed_before() -> None:
    from torchloom import MixtureSampler

    empty = IndexSampler(3, seed=1, rank=1, world_size=5, drop_last=True)  # nothing, from the start
    resumed = IndexSampler(3, seed=1, rank=1, world_size=5, drop_last=True)
    resumed.load_state_dict(empty.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # losing a position with nothing to read costs nothing
        assert resumed.epoch == 0
        resumed.set_epoch(1)

    def mixture(rank: int, world: int) -> MixtureSampler:
        return MixtureSampler(
            [20, 14], [1, 1], batch_size=2, seed=5, rank=rank, world_size=world, drop_last=True
        )

    two = mixture(0, 2)
    two.set_epoch(1)
    iterator = iter(two)
    for _ in range(12):
        next(iterator)
    three = mixture(0, 3)  # 12 of 14 units consumed: on 3 ranks, nothing more of epoch 1 for anyone
    three.load_state_dict(two.state_dict())
    assert three.epoch == 2 and len(three) > 0, "a consumed epoch resumes into the whole next one"


# --- every owner resolves the same way -------------------------------------------------------------

SIZE = 12
TAKEN = 5  # samples read of epoch 1 before the checkpoint


def sampler_owner(_: Path) -> tuple[Any, Any]:
    sampler = IndexSampler(SIZE, seed=4)
    return sampler, sampler


def loader_owner(sampler: Callable[[], Any]) -> Callable[[Path], tuple[Any, Any]]:
    def make(_: Path) -> tuple[Any, Any]:
        loader = Loader(KeyEcho(SIZE), batch_size=1, sampler=sampler(), num_threads=1)
        return loader, loader

    return make


def stream_owner(folder: Path) -> tuple[Any, Any]:
    stream = StreamDataset(write_shards(folder, [SIZE]))
    return stream, stream


OWNERS = {
    "IndexSampler": sampler_owner,
    "Loader(IndexSampler)": loader_owner(lambda: IndexSampler(SIZE, seed=4)),
    "Loader(DistributedSampler)": loader_owner(
        lambda: DistributedSampler(range(SIZE), num_replicas=1, rank=0, seed=4)  # type: ignore[arg-type]
    ),
    "StreamDataset": stream_owner,
}


def ids(items: Any) -> list[int]:
    """What an owner yields, as integers (keys, batches of one, stream records)."""
    out = []
    for item in items:
        value = item["index"] if isinstance(item, dict) and "index" in item else item
        value = value["id"] if isinstance(value, dict) else value
        out.append(int(value.item() if hasattr(value, "item") else value))
    return out


def read_epoch(make: Callable[[Path], tuple[Any, Any]], folder: Path, epoch: int) -> list[int]:
    owner, iterable = make(folder)
    owner.set_epoch(epoch)
    return ids(iterable)


@pytest.mark.parametrize("requested", [0, 1, 2])
@pytest.mark.parametrize("order", ["set_epoch, load", "load, set_epoch"])
@pytest.mark.parametrize("name", sorted(OWNERS))
def test_every_owner_lets_the_later_epoch_win_in_either_order(
    tmp_path: Path, name: str, order: str, requested: int
) -> None:
    make = OWNERS[name]
    owner, iterable = make(tmp_path)
    owner.set_epoch(1)
    iterator = iter(iterable)
    seen = ids(next(iterator) for _ in range(TAKEN))
    state = owner.state_dict()
    resumed, resumed_iterable = make(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if order == "set_epoch, load":
            resumed.set_epoch(requested)
            resumed.load_state_dict(state)
        else:
            resumed.load_state_dict(state)
            resumed.set_epoch(requested)
    with warnings.catch_warnings(record=True) as read_warnings:
        warnings.simplefilter("always")
        rest = ids(resumed_iterable)
    if requested <= 1:  # the loaded position wins: the rest of epoch 1
        assert seen + rest == read_epoch(make, tmp_path, 1), (name, order, requested)
    else:  # the later epoch wins: the whole of it
        assert rest == read_epoch(make, tmp_path, requested), (name, order, requested)
    # Whichever loses warns where it is called: a set_epoch of an earlier epoch after the load, or the
    # load against a later set_epoch; a stream's resolves (and warns) in the reading process.
    lost = (order == "load, set_epoch" and requested < 1) or requested > 1
    warned = [w for w in caught if "the later epoch wins" in str(w.message)]
    assert len(warned) == (lost and name != "StreamDataset"), [str(w.message) for w in caught]
    # A stream warns as it reads, and only of a load that loses (an earlier set_epoch it just ignores).
    stream_warned = [w for w in read_warnings if "the later epoch wins" in str(w.message)]
    assert len(stream_warned) == (name == "StreamDataset" and requested > 1), [
        str(w.message) for w in read_warnings
    ]
