"""The shared machinery of torchloom's samplers: one global order per epoch, split across ranks.

Every sampler draws one global order from ``(seed, epoch)``, in units (single indices, or whole
batches for :class:`MixtureSampler` with ``batch_size``). Ranks take every ``world_size``-th unit,
so they are disjoint and together complete; to give every rank the same length, the order is
padded by repeating its first units (``drop_last=False``) or trimmed (``drop_last=True``), and
:attr:`KeySampler.padded` / :attr:`KeySampler.dropped` say by how many indices.

Rank and world size resolve when iteration starts (from ``torch.distributed``) unless given, so
a sampler built before the process group exists still splits. Samplers are
``torch.utils.data.DistributedSampler`` instances, so PyTorch Lightning does not wrap them in a
second split; under Hugging Face Accelerate's ``prepare`` (which splits batches itself) they
yield the global order.

Resume state (:mod:`torchloom.resume.state`): ``epoch``; ``start``, the global unit where this split of
the epoch began (0, or where an elastic resume re-split the rest); ``yielded``, the indices this
rank has yielded since ``start``; ``world_size``; and the ``seed`` and ``config`` the order
depends on. A checkpoint at the end of an epoch resumes into the whole next epoch. A checkpoint
written by W ranks resumes on W' ranks: the global units consumed (``start + yielded_units × W``;
ranks advance in lockstep under DDP) are skipped and the rest is split over W' ranks, each unit
exactly once. torchdata's ``StatefulDataLoader`` saves and restores this for you; with a plain
DataLoader, save ``sampler.state_dict()`` with ``yielded`` set to ``batches_done * batch_size``.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import DistributedSampler

from torchloom._compat import user_stacklevel
from torchloom.errors import ConfigError, StateMismatchError
from torchloom.resume.distributed import outer_batch_splitter, resolve_rank_world
from torchloom.resume.epochs import Epochs, HasEpoch
from torchloom.resume.state import Resumable, check_epoch, check_field
from torchloom.samplers.contract import UnitSampler
from torchloom.seeding import SampleKey, key_class

# Keys made at once while iterating: bounds memory for epochs of many millions of indices. The
# first chunk is small and each next one twice as large: a key costs ~5 us to make (the garbage
# collector tracks it), so a first chunk of a million would hold back the first batch for seconds.
KEY_CHUNK = 1 << 20
FIRST_KEY_CHUNK = 1 << 12
STATE_EPOCH = "epoch"
STATE_YIELDED = "yielded"
STATE_START = "start"
STATE_SEED = "seed"
STATE_WORLD = "world_size"
STATE_RANK = "rank"
STATE_CONFIG = "config"


def epoch_rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    """The generator of one epoch's global order (the same on every rank)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, stream, 0x5A])))


def split_units(units: np.ndarray, rank: int, world_size: int, drop_last: bool) -> np.ndarray:
    """This rank's units of ``units`` (2-D: one row per unit), padded or trimmed to equal lengths."""
    count = len(units)
    per_rank = count // world_size if drop_last else (math.ceil(count / world_size) if count else 0)
    total = per_rank * world_size
    repeats = math.ceil(total / count) if total > count else 1
    return np.concatenate([units] * repeats)[:total][rank::world_size]


class KeySampler(DistributedSampler[SampleKey], Resumable, UnitSampler, HasEpoch):
    """Base of the samplers: subclasses give ``_global_order(epoch)`` and ``_config()``.

    The epoch follows :class:`torchloom.resume.epochs.Epochs` (``set_epoch`` and ``load_state_dict`` in
    either order, a finished epoch resumes into the next); the position is ``start`` and the keys
    yielded since, read from the key iterator when a state is taken.

    Args:
        seed: seeds the order (with the epoch); every rank must use the same seed.
        rank, world_size: resolved from torch.distributed when iteration starts, unless given.
        drop_last: trim the order to a multiple of ``world_size`` units instead of padding it.
        unit: indices per unit of distribution (a batch size for batch-composed orders).

    Example:
        >>> import numpy as np
        >>> from torchloom.samplers import KeySampler
        >>> class Reversed(KeySampler):  # every epoch the same order, last index first
        ...     def __init__(self, size, **kwargs):
        ...         self.size = size
        ...         super().__init__(**kwargs)
        ...     def _global_order(self, epoch):
        ...         return np.arange(self.size)[::-1]
        ...     def _config(self):
        ...         return {"size": self.size}
        >>> sampler = Reversed(4, seed=0, world_size=2, rank=1)  # rank 1 takes every second index
        >>> [int(key) for key in sampler], len(sampler)
        ([2, 0], 2)
    """

    STATE_VERSION = 2

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
            raise ConfigError(f"seed must be >= 0, got {seed=}")
        if unit < 1:
            raise ConfigError(f"unit must be >= 1, got {unit=}")
        if (rank is None) != (world_size is None):
            raise ConfigError(
                f"pass both rank and world_size or neither, got {rank=}, {world_size=} "
                "(neither: taken from torch.distributed when iteration starts)"
            )
        if rank is not None:
            resolve_rank_world(rank, world_size)  # validate now
        self.seed = seed
        self._rank_arg, self._world_arg = rank, world_size
        self.drop_last = drop_last
        self.unit = unit
        self._epochs = Epochs(type(self).__name__)
        self._start = 0  # global unit where this epoch's split begins
        self._split: tuple[int, int] | None = None  # (rank, world) fixed by a loaded state or iteration
        self._yielded = 0
        self._resume_from = 0
        self._warned_repeat = False
        self._cache: tuple[int, np.ndarray] | None = None
        self._live: tuple[Iterator[SampleKey], int, int] | None = None

    # --- configuration --------------------------------------------------------------------------

    def _global_order(self, epoch: int) -> np.ndarray:
        """All indices of one epoch, in order, as int64 (a multiple of ``unit`` long)."""
        raise NotImplementedError

    def _config(self) -> dict[str, Any]:
        """What the order depends on besides the seed (checked when a state is loaded)."""
        return {}

    def config(self) -> dict[str, Any]:
        """The settings a checkpoint must match: the subclass's plus ``drop_last`` and ``unit``.

        Computed once (fingerprints of large arrays are not free; loaders snapshot state per batch).
        """
        cached = self.__dict__.get("_config_cache")
        if cached is None or cached[0] != (self.drop_last, self.unit):
            cached = (
                (self.drop_last, self.unit),
                {**self._config(), "drop_last": self.drop_last, "unit": self.unit},
            )
            self.__dict__["_config_cache"] = cached
        return dict(cached[1])

    @property
    def rank(self) -> int:
        """This process's rank, as given or torch.distributed's now."""
        if self._split is not None:
            return self._split[0]
        return resolve_rank_world(self._rank_arg, self._world_arg)[0]

    @rank.setter
    def rank(self, value: int) -> None:
        if self._world_arg is None:
            self._world_arg = max(value + 1, resolve_rank_world(None, None)[1])
        self._rank_arg = value
        self._split = None

    @property
    def world_size(self) -> int:
        """The number of ranks, as given or torch.distributed's now."""
        if self._split is not None:
            return self._split[1]
        return resolve_rank_world(self._rank_arg, self._world_arg)[1]

    @world_size.setter
    def world_size(self, value: int) -> None:
        self._world_arg = value
        if self._rank_arg is None:
            self._rank_arg = 0
        self._split = None

    @property
    def epoch(self) -> int:
        """The epoch the position is in (the next iteration's, or the current one's)."""
        return self._epochs.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._epochs.epoch = value

    @property
    def num_replicas(self) -> int:  # type: ignore[override]
        """``world_size``, under DistributedSampler's name (Lightning reads it)."""
        return self.world_size

    # --- orders ---------------------------------------------------------------------------------

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

    def _units(self, epoch: int) -> np.ndarray:
        return self.global_order(epoch).reshape(-1, self.unit)

    def rank_indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's indices for ``epoch`` (default: the current one), padding or trimming applied.

        For the current epoch after an elastic resume, the split of what was left.
        """
        current = epoch is None or epoch == self.epoch
        units = self._units(self.epoch if epoch is None else epoch)
        if current:
            units = units[min(self._start, len(units)) :]
        return split_units(units, self.rank, self.world_size, self.drop_last).reshape(-1)

    def _rest_units(self) -> int:
        return max(0, len(self.global_order(self.epoch)) // self.unit - self._start)

    @property
    def padded(self) -> int:
        """Indices repeated this epoch so that every rank has the same length (all ranks together)."""
        count = self._rest_units()
        if self.drop_last or not count:
            return 0
        return (math.ceil(count / self.world_size) * self.world_size - count) * self.unit

    @property
    def dropped(self) -> int:
        """Indices left out this epoch by ``drop_last`` (all ranks together)."""
        return (self._rest_units() % self.world_size) * self.unit if self.drop_last else 0

    def __len__(self) -> int:
        return len(self.rank_indices())

    # --- epochs ---------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``: a new order (call it before each epoch, as with DistributedSampler).

        The position is the start of ``epoch``, also of the current one once an iteration of it has
        begun (after a ``break`` or its end, it is read again whole). Only a loaded position is kept
        by ``set_epoch`` of its own epoch (a resumed epoch continues); between a ``load_state_dict``
        and the next iteration, the later of the two epochs wins (the earlier one warns).
        """
        epoch = check_epoch(epoch)
        if self._epochs.set_epoch(epoch) and not self._epochs.resuming:
            self._start_epoch(epoch)

    def _start_epoch(self, epoch: int) -> None:
        """The position is the start of ``epoch``."""
        self.epoch = epoch
        self._start = self._resume_from = self._yielded = 0
        self._split = None
        self._live = None

    def __iter__(self) -> Iterator[SampleKey]:
        """This rank's keys from the position: the start of the epoch, or the rest of a loaded one.

        The position is where the new pass starts as soon as it is asked for (a state taken before
        its first key says so, not where an abandoned pass stopped); the epoch rules settle at its
        first key, so a ``set_epoch`` or load between ``iter`` and ``next`` still counts."""
        self._live = None
        self._yielded = self._resume_from
        return self._keys()

    def _keys(self) -> Iterator[SampleKey]:
        if self._epochs.repeats() and not self._warned_repeat:
            warnings.warn(
                f"{type(self).__name__} is iterated again for epoch {self.epoch} without set_epoch(); "
                "it repeats the same order. Call sampler.set_epoch(epoch) before each epoch.",
                stacklevel=user_stacklevel(),
            )
            self._warned_repeat = True
        self._epochs.begin()
        splitter = outer_batch_splitter()
        if splitter is not None:
            # The wrapper (Accelerate) splits batches across its processes: give it the global order.
            if self._split is None or self._split[1] != 1:
                self._split, self._start, self._resume_from = (0, 1), 0, 0
        elif self._split is None:
            self._split = resolve_rank_world(self._rank_arg, self._world_arg)
        indices = self.rank_indices()
        start, self._resume_from = self._resume_from, 0
        epoch = self.epoch
        # Keys are made in C (int.__new__ over a list), a chunk at a time to bound memory, and
        # iterated in C: a checkpoint reads the position from the chunk iterator's remaining length.
        make = functools.partial(int.__new__, key_class(epoch))
        self._yielded = start
        chunk_start, size = start, FIRST_KEY_CHUNK
        while chunk_start < len(indices):
            keys = list(map(make, indices[chunk_start : chunk_start + size].tolist()))
            iterator = iter(keys)
            self._live = (iterator, chunk_start, len(keys))
            yield from iterator
            chunk_start += len(keys)
            size = min(2 * size, KEY_CHUNK)
        self._live = None
        self._yielded = len(indices)
        self._epochs.finish(epoch)

    # --- state ----------------------------------------------------------------------------------

    def _position(self) -> int:
        if self._live is not None:
            iterator, start, count = self._live
            self._yielded = start + count - operator.length_hint(iterator)
        return self._yielded

    def _get_state(self) -> dict[str, Any]:
        return {
            STATE_EPOCH: self.epoch,
            STATE_START: self._start,
            STATE_YIELDED: self._position(),
            STATE_SEED: self.seed,
            STATE_RANK: self.rank,
            STATE_WORLD: self.world_size,
            STATE_CONFIG: self.config(),
        }

    def _upgrade(self, state: dict[str, Any], version: int) -> dict[str, Any]:
        state.setdefault(STATE_START, 0)
        return state

    def _set_state(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields what was not yet yielded of the saved epoch.

        A position at the very end of an epoch resumes into the whole next epoch; a state from
        another world size re-splits the rest of the global order (elastic resume).
        """
        check_field(self, state, STATE_SEED, self.seed)
        saved_config = state.get(STATE_CONFIG, {})
        for key, value in self.config().items():
            if key in saved_config and saved_config[key] != value:
                raise StateMismatchError(
                    f"checkpoint field 'config.{key}' is {saved_config[key]!r} but this "
                    f"{type(self).__name__} has {key}={value!r}; build the sampler as it was when the "
                    "checkpoint was written"
                )
        epoch, start, yielded = int(state[STATE_EPOCH]), int(state[STATE_START]), int(state[STATE_YIELDED])
        if epoch < 0 or start < 0 or yielded < 0:
            raise StateMismatchError(f"checkpoint position is negative: {epoch=}, {start=}, {yielded=}")
        split = resolve_rank_world(self._rank_arg, self._world_arg)  # this process's, not a past pass's
        saved_world = int(state.get(STATE_WORLD, split[1]))
        total_units = len(self.global_order(epoch)) // self.unit
        if saved_world != split[1]:
            if yielded % self.unit:
                raise StateMismatchError(
                    f"checkpoint position yielded={yielded} is inside a unit of {self.unit} indices; an "
                    f"elastic resume (world_size {saved_world} -> {split[1]}) needs whole units"
                )
            start = start + yielded // self.unit * saved_world
            yielded = 0
        start = min(start, total_units)
        length = len(split_units(self._units(epoch)[start:], *split, self.drop_last)) * self.unit
        # A rank with nothing to read at all is at the start of its epoch as much as at its end: the
        # start. One whose share was all consumed before this split (an elastic resume) is finished.
        finished = yielded >= length and (yielded > 0 or start > 0)
        left = finished or yielded < length  # the whole next epoch, or the rest of this one
        where = f"{yielded} of {length} yielded"
        resumed = self._epochs.load(epoch, finished=finished, left=left, position=where)
        if resumed is None:
            return  # set_epoch asked for a later epoch before this load: the later epoch wins
        self._start_epoch(resumed)
        if not finished:  # else the whole next epoch
            self._start, self._split = start, split
            self._resume_from = self._yielded = yielded
