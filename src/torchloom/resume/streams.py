"""ConsumerStream: the base of iterable datasets whose items (shards, recordings) are split across consumers.

A consumer is one (rank, DataLoader worker) pair. Each reads the items :func:`assignment` gives it,
so every record is read exactly once per epoch. This base owns what is the same for every such
dataset: resolving the consumer when iteration starts, the epoch (in shared memory, so
``set_epoch`` reaches persistent workers), and the resume state, per consumer:

- ``epoch``; ``consumed``, the records this consumer has yielded this epoch; ``entry`` and
  ``offset``, the item of its plan it is in and the records taken from it; ``exhausted``;
- ``consumer`` and ``consumers``, which consumer wrote it: a partly read epoch resumes only on the
  same consumer of the same count (a stream's position cannot be re-split; the error says what
  changed and how to go on);
- the subclass's settings (item list fingerprint, reader, shuffle), checked on load.

``set_epoch`` and ``load_state_dict`` may come in either order before an iteration: the later
epoch wins. A consumer whose state says it is exhausted yields nothing more of that epoch. These are
the rules of :class:`~torchloom.resume.epochs.Epochs`, applied as an iteration begins, in the process
that reads: ``set_epoch`` is called in the main process and reaches workers (their own copies of the
dataset) only through shared memory, and a loaded position names the consumer that may resume it,
known only then. A worker cannot tell a ``set_epoch`` made before its last iteration from a new one
(a fresh worker has no memory of the last iteration, and the workers of one pass would not agree on
which of them saw it first), so the last one keeps competing with a load: a load of an earlier epoch
loses also after an iteration (a rollback), where a sampler forgets the ``set_epoch`` once an
iteration has begun. A load that loses warns, in the reading process, unless its consumer had read
its epoch to the end (nothing is lost): to roll back, call ``set_epoch`` with the checkpoint's epoch.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any, ClassVar, TypeVar

import torch.distributed as dist
from torch.utils.data import IterableDataset

from torchloom.errors import ConfigError, DistributedSetupError, StateMismatchError
from torchloom.resume.distributed import (
    Consumer,
    assignment,
    current_consumer,
    environment_rank_world,
    in_worker,
    resolve_rank_world,
)
from torchloom.resume.epochs import Epochs, loaded_epoch_wins
from torchloom.resume.state import Resumable, SharedInts, check_epoch, check_field

Record = TypeVar("Record")

KEY_EPOCH = "epoch"
KEY_CONSUMED = "consumed"
KEY_ENTRY = "entry"
KEY_OFFSET = "offset"
KEY_EXHAUSTED = "exhausted"
KEY_CONSUMER = "consumer"
KEY_CONSUMERS = "consumers"

# Slots of the shared integers: the requested epoch, and the rank and world size last seen by the
# main process (world 0: not seen yet).
_EPOCH, _RANK, _WORLD = 0, 1, 2


class ConsumerStream(IterableDataset[Record], Resumable):
    """Base class: subclasses give ``_read_item`` and ``_settings`` (and may reorder with ``_reorder``).

    Args:
        items: how many items (shards, recordings) there are.
        rank, world_size: resolved from torch.distributed when iteration starts, unless given.
    """

    ITEM_NAME: ClassVar[str] = "item"

    def __init__(self, items: int, *, rank: int | None, world_size: int | None) -> None:
        if (rank is None) != (world_size is None):
            raise ConfigError(
                f"pass both rank and world_size or neither, got {rank=}, {world_size=} "
                "(neither: taken from torch.distributed when iteration starts)"
            )
        if rank is not None:
            resolve_rank_world(rank, world_size)
        self._items = items
        self._rank_arg, self._world_arg = rank, world_size
        self._shared = SharedInts([0, 0, 0])
        self._note_split()
        # The epoch of the position; a finished consumer stays in it (it cannot know the others are done).
        self._epochs = Epochs(type(self).__name__, finished_moves_on=False)
        self._pending: dict[str, Any] | None = None  # a loaded position, applied when iteration begins
        self._consumer: Consumer | None = None
        self._consumed = self._entry = self._offset = 0
        self._exhausted = False

    # --- subclass API ---------------------------------------------------------------------------

    def _read_item(self, item: int, group: int, position: int) -> Iterator[Record]:
        """This consumer's records of ``item``: every ``group``-th record from ``position``."""
        raise NotImplementedError

    def _settings(self) -> dict[str, Any]:
        """What a checkpoint must match (fingerprints, reader, shuffle settings)."""
        return {}

    def _replays(self) -> bool:
        """True when the delivered order is not the read order (a shuffle buffer): a resume then
        replays the consumer's stream from its start and skips what was delivered."""
        return False

    def _reorder(self, records: Iterator[Record], consumer: Consumer, epoch: int) -> Iterator[Record]:
        """The delivered order of a consumer's records (the read order unless overridden)."""
        return records

    # --- who and when ---------------------------------------------------------------------------

    def _note_split(self) -> None:
        """In the main process, record the rank and world size for the workers (which have no
        process group to ask), when torch.distributed or the environment knows them. Called on
        construction, ``set_epoch``, state calls and iteration in the main process."""
        if in_worker():
            return
        initialised = dist.is_available() and dist.is_initialized()
        if initialised or environment_rank_world() is not None:
            rank, world = resolve_rank_world(self._rank_arg, self._world_arg)
            self._shared[_RANK], self._shared[_WORLD] = rank, world

    def _split(self) -> tuple[int, int]:
        """(rank, world size) of this consumer, resolved now."""
        if self._rank_arg is not None and self._world_arg is not None:
            return self._rank_arg, self._world_arg
        if not in_worker():
            self._note_split()
            return resolve_rank_world(None, None)
        if self._shared[_WORLD] > 0:
            return self._shared[_RANK], self._shared[_WORLD]
        found = environment_rank_world()
        if found is not None:
            return found
        world = os.environ.get("WORLD_SIZE", "1")
        if world.isdigit() and int(world) > 1:
            raise DistributedSetupError(
                f"{type(self).__name__} cannot tell its rank inside a DataLoader worker: WORLD_SIZE={world}, "
                "but the main process never saw torch.distributed initialised (the dataset was built "
                "before it, and set_epoch was not called since). Build the dataset after "
                "init_process_group (Lightning: in setup()), call dataset.set_epoch(epoch) before each "
                "epoch, or pass rank= and world_size="
            )
        return 0, 1

    @property
    def rank(self) -> int:
        return self._split()[0]

    @property
    def world_size(self) -> int:
        return self._split()[1]

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration reads."""
        return self._shared[_EPOCH]

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next; reaches DataLoader workers, persistent ones included."""
        self._shared[_EPOCH] = check_epoch(epoch)
        self._note_split()

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Record]:
        consumer = current_consumer(*self._split())
        if self._items < consumer.count and consumer.index == 0:
            warnings.warn(
                f"{type(self).__name__}: {self._items} {self.ITEM_NAME}(s) for {consumer.count} consumers "
                f"(ranks × workers); records within {self.ITEM_NAME}s are split between consumers, so "
                f"every consumer reads whole {self.ITEM_NAME}s",
                stacklevel=2,
            )
        self._resolve(consumer)
        return self._run(assignment(self._items, consumer.count, consumer.index), consumer)

    def _resolve(self, consumer: Consumer) -> None:
        """Apply a loaded position, unless ``set_epoch`` asked for a later epoch (then it warns)."""
        requested = self._shared[_EPOCH]
        pending, self._pending = self._pending, None
        self._consumer = consumer
        epochs = self._epochs
        epochs.begin()
        epochs.follow(requested)  # the main process's set_epoch, which this process sees only now
        if pending is not None and epochs.admits(pending[KEY_EPOCH]):
            self._check_consumer(pending, consumer)
        epoch = None
        if pending is not None:
            position = f"{pending[KEY_CONSUMED]} records in"
            exhausted = pending[KEY_EXHAUSTED]
            epoch = epochs.load(pending[KEY_EPOCH], finished=exhausted, left=not exhausted, position=position)
        if pending is None or epoch is None:
            self._consumed = self._entry = self._offset = 0
            self._exhausted = False
            return
        if epoch > requested:
            self._shared[_EPOCH] = epoch  # later iterations continue from the loaded epoch
        self._consumed, self._entry, self._offset = (
            pending[KEY_CONSUMED],
            pending[KEY_ENTRY],
            pending[KEY_OFFSET],
        )
        self._exhausted = bool(pending[KEY_EXHAUSTED])

    def _check_consumer(self, pending: dict[str, Any], consumer: Consumer) -> None:
        """A position part way through an epoch resumes only on the consumer that wrote it."""
        started = pending[KEY_CONSUMED] > 0 or pending[KEY_EXHAUSTED]
        saved = (pending[KEY_CONSUMER], pending[KEY_CONSUMERS])
        if started and saved[1] >= 0 and saved != (consumer.index, consumer.count):
            raise StateMismatchError(
                f"{type(self).__name__}: the checkpoint was written by consumer {saved[0]} of {saved[1]} "
                f"(ranks × DataLoader workers) part way through epoch {pending[KEY_EPOCH]}; this is "
                f"{consumer.describe()}. A stream's position cannot be re-split: resume with the same "
                "world size and num_workers, or call set_epoch(next epoch) to start a fresh one"
            )

    def _run(self, plan: list[tuple[int, int, int]], consumer: Consumer) -> Iterator[Record]:
        if self._exhausted:
            return
        skip = 0
        if self._replays():
            skip, self._entry, self._offset = self._consumed, 0, 0
            self._consumed = 0
        records = self._reorder(self._planned(plan, self._entry, self._offset), consumer, self._epochs.epoch)
        for record in records:
            if skip:
                skip -= 1
                self._consumed += 1
                continue
            self._consumed += 1
            yield record
        self._exhausted = True

    def _planned(self, plan: list[tuple[int, int, int]], entry: int, offset: int) -> Iterator[Record]:
        """The consumer's records in read order from (``entry``, ``offset``), tracking the position."""
        for number in range(entry, len(plan)):
            item, group, position = plan[number]
            start = offset if number == entry else 0
            taken = 0
            for record in self._read_item(item, group, position):
                taken += 1
                if taken <= start:
                    continue  # delivered before the checkpoint
                self._entry, self._offset = number, taken
                yield record
            self._entry, self._offset = number + 1, 0

    # --- state ----------------------------------------------------------------------------------

    def _position(self) -> dict[str, Any]:
        requested = self._shared[_EPOCH]
        if self._pending is not None:
            if loaded_epoch_wins(self._pending[KEY_EPOCH], requested):
                return dict(self._pending)
            return self._start_of(requested)
        if requested != self._epochs.epoch:  # set_epoch since this position's iteration began
            return self._start_of(requested)
        consumer = self._consumer
        return {
            KEY_EPOCH: self._epochs.epoch,
            KEY_CONSUMED: self._consumed,
            KEY_ENTRY: self._entry,
            KEY_OFFSET: self._offset,
            KEY_EXHAUSTED: self._exhausted,
            KEY_CONSUMER: consumer.index if consumer else 0,
            KEY_CONSUMERS: consumer.count if consumer else 0,
        }

    @staticmethod
    def _start_of(epoch: int) -> dict[str, Any]:
        return {
            KEY_EPOCH: epoch,
            KEY_CONSUMED: 0,
            KEY_ENTRY: 0,
            KEY_OFFSET: 0,
            KEY_EXHAUSTED: False,
            KEY_CONSUMER: 0,
            KEY_CONSUMERS: 0,
        }

    def _get_state(self) -> dict[str, Any]:
        self._note_split()
        return {**self._position(), **self._settings()}

    def _upgrade(self, state: dict[str, Any], version: int) -> dict[str, Any]:
        if version == 0:  # torchloom 0.1: {"epoch", "consumed", "shard", "offset"}
            state.setdefault(KEY_ENTRY, state.pop("shard", 0))
            state.setdefault(KEY_EXHAUSTED, False)
            state.setdefault(KEY_CONSUMER, -1)
            state.setdefault(KEY_CONSUMERS, -1)
        return state

    def _set_state(self, state: dict[str, Any]) -> None:
        self._note_split()
        for key, value in self._settings().items():
            check_field(self, state, key, value)
        position = self._start_of(0)
        for key in position:
            if key not in state:
                raise StateMismatchError(
                    f"{type(self).__name__} checkpoint lacks {key!r}; pass the dict state_dict() returned"
                )
            position[key] = bool(state[key]) if key == KEY_EXHAUSTED else int(state[key])
        if min(position[KEY_EPOCH], position[KEY_CONSUMED], position[KEY_ENTRY], position[KEY_OFFSET]) < 0:
            raise StateMismatchError(f"{type(self).__name__} checkpoint has a negative position: {position}")
        self._pending = position
