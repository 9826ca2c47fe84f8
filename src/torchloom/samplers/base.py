"""The shared machinery of torchloom's samplers: one global order per epoch, split across ranks.

Every sampler draws one global order from ``(seed, epoch)``, in units (single indices, or whole
batches for :class:`MixtureSampler` with ``batch_size``). Ranks take every ``world_size``-th unit,
so they are disjoint and together complete; to give every rank the same length, the order is
padded by repeating its first units (``drop_last=False``) or trimmed (``drop_last=True``), and
:attr:`KeySampler.padded` / :attr:`KeySampler.dropped` say by how many indices.

Resume: ``state_dict()`` holds the epoch and how many indices this rank's iterator has yielded;
after ``load_state_dict`` the next iteration yields exactly the rest of that epoch. torchdata's
``StatefulDataLoader`` saves and restores this for you; with a plain DataLoader, store
``{"epoch": e, "yielded": batches_done * batch_size}``.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler

from torchloom.seeding import SampleKey, key_class

# Keys made at once while iterating: bounds memory for epochs of many millions of indices.
KEY_CHUNK = 1 << 20
STATE_EPOCH = "epoch"
STATE_YIELDED = "yielded"
STATE_SEED = "seed"
STATE_WORLD = "world_size"
STATE_RANK = "rank"


def default_rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``rank`` and ``world_size``, defaulting to torch.distributed's when it is initialised."""
    initialised = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    return rank, world_size


def epoch_rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    """The generator of one epoch's global order (the same on every rank)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, stream, 0x5A])))


class KeySampler(Sampler[SampleKey]):
    """Base of the samplers: subclasses give ``_global_order(epoch)``; this class does the rest.

    Args:
        seed: seeds the order (with the epoch); every rank must use the same seed.
        rank, world_size: default to torch.distributed's when initialised, else 0 and 1.
        drop_last: trim the order to a multiple of ``world_size`` units instead of padding it.
        unit: indices per unit of distribution (a batch size for batch-composed orders).
    """

    def __init__(
        self,
        *,
        seed: int,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        unit: int = 1,
    ) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed=}")
        if unit < 1:
            raise ValueError(f"unit must be >= 1, got {unit=}")
        self.seed = seed
        self.rank, self.world_size = default_rank_and_world(rank, world_size)
        self.drop_last = drop_last
        self.unit = unit
        self.epoch = 0
        self._yielded = 0
        self._resume_from = 0
        self._finished_epoch: int | None = None
        self._warned_repeat = False
        self._cache: tuple[int, np.ndarray] | None = None
        self._live: tuple[Iterator[SampleKey], int, int] | None = None

    def _global_order(self, epoch: int) -> np.ndarray:
        """All indices of one epoch, in order, as int64 (a multiple of ``unit`` long)."""
        raise NotImplementedError

    def global_order(self, epoch: int) -> np.ndarray:
        """The epoch's global order (cached for the current epoch)."""
        if self._cache is None or self._cache[0] != epoch:
            order = np.asarray(self._global_order(epoch), dtype=np.int64)
            if len(order) % self.unit:
                raise AssertionError(
                    f"{type(self).__name__} made an order not a multiple of unit={self.unit}"
                )
            self._cache = (epoch, order)
        return self._cache[1]

    def rank_indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's indices for ``epoch`` (default: the current one), padding or trimming applied."""
        order = self.global_order(self.epoch if epoch is None else epoch)
        units = order.reshape(-1, self.unit)
        count = len(units)
        if self.drop_last:
            per_rank = count // self.world_size
        else:
            per_rank = math.ceil(count / self.world_size) if count else 0
        total = per_rank * self.world_size
        if total > count:
            repeats = math.ceil(total / count)
            units = np.concatenate([units] * repeats)[:total]
        else:
            units = units[:total]
        return units[self.rank :: self.world_size].reshape(-1)

    @property
    def padded(self) -> int:
        """Indices repeated this epoch so that every rank has the same length (all ranks together)."""
        count = len(self.global_order(self.epoch)) // self.unit
        if self.drop_last or not count:
            return 0
        return (math.ceil(count / self.world_size) * self.world_size - count) * self.unit

    @property
    def dropped(self) -> int:
        """Indices left out this epoch by ``drop_last`` (all ranks together)."""
        count = len(self.global_order(self.epoch)) // self.unit
        return (count % self.world_size) * self.unit if self.drop_last else 0

    def __len__(self) -> int:
        return len(self.rank_indices())

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``: a new order (call it before each epoch, as with DistributedSampler)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch=}")
        if epoch != self.epoch:
            self._resume_from = 0
        self.epoch = epoch
        self._finished_epoch = None

    def __iter__(self) -> Iterator[SampleKey]:
        if self._finished_epoch == self.epoch and not self._warned_repeat:
            warnings.warn(
                f"{type(self).__name__} is iterated again for epoch {self.epoch} without set_epoch(); "
                "it repeats the same order. Call sampler.set_epoch(epoch) before each epoch.",
                stacklevel=2,
            )
            self._warned_repeat = True
        indices = self.rank_indices()
        start, self._resume_from = self._resume_from, 0
        epoch = self.epoch
        # Keys are made in C (int.__new__ over a list), a chunk at a time to bound memory, and
        # iterated in C: a checkpoint reads the position from the chunk iterator's remaining length.
        make = functools.partial(int.__new__, key_class(epoch))
        for chunk_start in range(start, len(indices), KEY_CHUNK):
            keys = list(map(make, indices[chunk_start : chunk_start + KEY_CHUNK].tolist()))
            iterator = iter(keys)
            self._live = (iterator, chunk_start, len(keys))
            yield from iterator
        self._live = None
        self._yielded = len(indices)
        self._finished_epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """The position in the current epoch (plain ints: safe in any checkpoint)."""
        if self._live is not None:
            iterator, start, count = self._live
            self._yielded = start + count - operator.length_hint(iterator)
        return {
            STATE_EPOCH: self.epoch,
            STATE_YIELDED: self._yielded,
            STATE_SEED: self.seed,
            STATE_RANK: self.rank,
            STATE_WORLD: self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields what was not yet yielded in the saved epoch.

        A position at the very end of an epoch resumes to an empty rest of that epoch; the next
        epoch (after ``set_epoch``) has its full length.
        """
        seed = state.get(STATE_SEED, self.seed)
        if seed != self.seed:
            raise ValueError(f"checkpoint was made with seed={seed}, this sampler has seed={self.seed}")
        epoch, yielded = int(state[STATE_EPOCH]), int(state[STATE_YIELDED])
        self.epoch = epoch
        self._finished_epoch = None
        self._resume_from = min(max(0, yielded), len(self.rank_indices(epoch)))
        self._yielded = self._resume_from
        self._live = None
