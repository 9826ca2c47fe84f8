"""StreamDataset: records from many shards, each read exactly once per epoch across ranks and workers."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from torchloom.samplers.base import default_rank_and_world
from torchloom.streaming.readers import Reader, reader_for


def assignment(shards: int, consumers: int, consumer: int) -> list[tuple[int, int, int]]:
    """The (shard, group size, position in group) a consumer reads.

    With at least as many shards as consumers, consumer ``c`` reads shards ``c, c + n, ...``
    whole. With fewer, every shard is read by a group of consumers, each taking every
    ``group size``-th record from its position, so no record is read twice.

    Example:
        >>> assignment(5, 2, 1), assignment(2, 5, 3)
        ([(1, 1, 0), (3, 1, 0)], [(1, 2, 1)])
    """
    if shards >= consumers:
        return [(shard, 1, 0) for shard in range(consumer, shards, consumers)]
    shard = consumer % shards
    group = len(range(shard, consumers, shards))
    return [(shard, group, consumer // shards)]


class StreamDataset(IterableDataset[Any]):
    """Records of ``shards`` streamed through ``reader``, split across ``rank × worker``.

    Shards are local paths or fsspec URLs (``s3://``, ``gs://``, ``https://``, ``memory://``),
    read without a local copy. Every record is yielded exactly once per epoch over all ranks and
    DataLoader workers; with fewer shards than consumers, records within shards are split (a
    warning says so). ``shuffle_buffer > 0`` shuffles through a bounded buffer seeded by
    ``(seed, epoch, rank, worker)``; call :meth:`set_epoch` before each epoch.

    Example:
        >>> import tempfile, os
        >>> folder = tempfile.mkdtemp()
        >>> for part in range(2):
        ...     _ = open(os.path.join(folder, f"{part}.jsonl"), "w").write(f'{{"part": {part}}}\\n')
        >>> shards = [os.path.join(folder, f"{part}.jsonl") for part in range(2)]
        >>> sorted(record["part"] for record in StreamDataset(shards))
        [0, 1]
    """

    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]],
        reader: Reader | None = None,
        *,
        shuffle_buffer: int = 0,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer must be >= 0, got {shuffle_buffer}")
        self.shards = [os.fspath(shard) for shard in shards]
        if not self.shards:
            raise ValueError("StreamDataset needs at least one shard")
        self.reader = reader
        if reader is None:
            for shard in self.shards:
                reader_for(shard)  # an unknown extension fails here, not in a worker
        self.shuffle_buffer, self.seed, self.epoch = shuffle_buffer, seed, 0
        self.rank, self.world_size = default_rank_and_world(rank, world_size)
        self._consumed = 0
        self._skip = 0
        self._position = (0, 0)  # (entry of this consumer's shard plan, records yielded from it)
        self._resume_at: tuple[int, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        consumers = self.world_size * workers
        consumer = self.rank * workers + worker
        if len(self.shards) < consumers:
            warnings.warn(
                f"StreamDataset: {len(self.shards)} shard(s) for {consumers} consumers (ranks × workers); "
                "records within shards are split between consumers, so every consumer reads whole shards",
                stacklevel=2,
            )
        plan = assignment(len(self.shards), consumers, consumer)
        start = (0, 0)
        if self._resume_at is not None and not self.shuffle_buffer:
            start, self._skip = self._resume_at, 0  # jump to the shard; earlier shards are not read
        self._resume_at = None
        records = self._records(plan, start)
        if self.shuffle_buffer:
            rng = np.random.default_rng([self.seed, self.epoch, self.rank, worker])
            records = _shuffled(records, self.shuffle_buffer, rng)
        return self._counted(records)

    def _counted(self, records: Iterator[Any]) -> Iterator[Any]:
        skip, self._skip = self._skip, 0
        self._consumed = skip
        for number, record in enumerate(records):
            if number < skip:
                continue  # resuming: this consumer yielded it before the checkpoint
            self._consumed = number + 1
            yield record

    def state_dict(self) -> dict[str, int]:
        """This consumer's position: the epoch, the records it has yielded, and its shard and offset.

        ``StatefulDataLoader`` saves it per worker and restores it into each worker. Without a
        shuffle buffer, the resumed stream starts at the saved shard (earlier shards are not read)
        and skips the records of that shard already yielded; with one, the stream is replayed
        (same shards, same seed) past the records already yielded, so the buffer is rebuilt exactly.
        """
        entry, offset = self._position
        return {"epoch": self.epoch, "consumed": self._consumed, "shard": entry, "offset": offset}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self._skip = int(state["consumed"])
        if "shard" in state:
            self._resume_at = (int(state["shard"]), int(state["offset"]))

    def _records(self, plan: list[tuple[int, int, int]], start: tuple[int, int]) -> Iterator[Any]:
        for entry in range(start[0], len(plan)):
            shard_index, group, position = plan[entry]
            shard = self.shards[shard_index]
            read = self.reader or reader_for(shard)
            offset = start[1] if entry == start[0] else 0
            taken = 0
            for number, record in enumerate(read(shard)):
                if number % group != position:
                    continue
                taken += 1
                if taken <= offset:
                    continue  # yielded before the checkpoint
                self._position = (entry, taken)
                yield record


def _shuffled(records: Iterator[Any], size: int, rng: np.random.Generator) -> Iterator[Any]:
    buffer: list[Any] = []
    for record in records:
        if len(buffer) < size:
            buffer.append(record)
            continue
        slot = int(rng.integers(size))
        yield buffer[slot]
        buffer[slot] = record
    order = rng.permutation(len(buffer))
    for slot in order:
        yield buffer[slot]
