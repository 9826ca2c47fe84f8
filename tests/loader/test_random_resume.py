"""A Loader over a random sampler (torch's, torchdata's) resumes exactly from its generator's state,
or refuses naming the sampler and the fix when the generator is out of reach."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import RandomSampler, Sampler, SubsetRandomSampler, WeightedRandomSampler
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler

from subjects import KeyEcho
from torchloom import Loader
from torchloom.errors import StateMismatchError

SIZE = 20
BATCH = 3


def seeded() -> torch.Generator:
    return torch.Generator().manual_seed(7)


RANDOM_SAMPLERS: dict[str, Callable[[], Sampler[Any]]] = {
    "RandomSampler": lambda: RandomSampler(range(SIZE), generator=seeded()),
    "RandomSampler(replacement, more samples)": lambda: RandomSampler(
        range(SIZE), replacement=True, num_samples=45, generator=seeded()
    ),
    "RandomSampler(more samples than items)": lambda: RandomSampler(
        range(SIZE), num_samples=50, generator=seeded()
    ),
    "WeightedRandomSampler": lambda: WeightedRandomSampler(
        torch.linspace(0.1, 1, SIZE).tolist(), num_samples=SIZE, replacement=False, generator=seeded()
    ),
    "SubsetRandomSampler": lambda: SubsetRandomSampler(list(range(0, SIZE, 2)), generator=seeded()),
    "torchdata RandomSampler": lambda: StatefulRandomSampler(range(SIZE), generator=seeded()),
}


def loader_of(kind: str) -> Loader:
    return Loader(KeyEcho(SIZE), batch_size=BATCH, sampler=RANDOM_SAMPLERS[kind](), num_threads=2)


def indices(batches: Any) -> list[int]:
    return [i for batch in batches for i in batch["index"].tolist()]


@pytest.mark.parametrize("kind", sorted(RANDOM_SAMPLERS))
def test_a_random_sampler_with_a_generator_resumes_exactly_at_every_seam(kind: str) -> None:
    reference = loader_of(kind)
    epochs = [indices(reference), indices(reference)]
    assert epochs[0] != epochs[1]  # each pass draws a new order: a resume must not replay epoch 0
    length = len(reference)
    for stop in sorted({0, 1, 3, length - 1, length}):
        interrupted = loader_of(kind)
        consumed = indices(itertools.islice(interrupted, stop))
        state = json.loads(json.dumps(interrupted.state_dict()))  # a plain, JSON-safe checkpoint
        resumed = loader_of(kind)
        resumed.load_state_dict(state)
        rest = indices(resumed)
        if stop == length:  # the end of epoch 0 resumes into the whole of epoch 1
            assert consumed == epochs[0] and rest == epochs[1], stop
            continue
        assert consumed + rest == epochs[0], stop
        assert indices(resumed) == epochs[1], stop  # and the generator goes on as it would have


def test_torchdatas_random_sampler_without_a_generator_resumes_from_the_one_it_made() -> None:
    interrupted = Loader(KeyEcho(SIZE), batch_size=BATCH, sampler=StatefulRandomSampler(range(SIZE)))
    iterator = iter(interrupted)
    consumed = indices(itertools.islice(iterator, 2))
    state = interrupted.state_dict()
    rest = indices(iterator)
    resumed = Loader(KeyEcho(SIZE), batch_size=BATCH, sampler=StatefulRandomSampler(range(SIZE)))
    resumed.load_state_dict(state)
    assert consumed + indices(resumed) == consumed + rest
    assert sorted(consumed + rest) == list(range(SIZE))


def test_a_random_sampler_without_a_generator_is_refused_naming_the_sampler_and_the_fix() -> None:
    def loader() -> Loader:
        return Loader(KeyEcho(SIZE), batch_size=BATCH, sampler=RandomSampler(range(SIZE)), num_threads=1)

    interrupted = loader()
    indices(itertools.islice(interrupted, 2))
    with pytest.warns(UserWarning, match=r"RandomSampler draws a new order.*generator=torch.Generator"):
        state = interrupted.state_dict()
    with pytest.raises(StateMismatchError, match=r"RandomSampler .*no generator state.*generator=torch"):
        loader().load_state_dict(state)


def test_a_checkpoint_without_the_generator_state_is_refused_inside_an_epoch() -> None:
    without = Loader(KeyEcho(SIZE), batch_size=BATCH, sampler=RandomSampler(range(SIZE)), num_threads=1)
    indices(itertools.islice(without, 2))
    with pytest.warns(UserWarning):
        state = without.state_dict()
    with pytest.raises(StateMismatchError, match="no generator state"):
        loader_of("RandomSampler").load_state_dict(state)
    tampered = loader_of("RandomSampler")
    indices(itertools.islice(tampered, 2))
    state = tampered.state_dict()
    state["sampler"]["generator"] = "AAAA"
    with pytest.raises(StateMismatchError, match=r"not the state of a cpu torch.Generator \(3 bytes"):
        loader_of("RandomSampler").load_state_dict(state)
