"""StreamDataset: records from many shards, each read exactly once per epoch across ranks and workers."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from torchloom.errors import ConfigError
from torchloom.resume.distributed import Consumer
from torchloom.resume.state import fingerprint
from torchloom.resume.streams import ConsumerStream
from torchloom.streaming.readers import Reader, reader_for

__all__ = ["StreamDataset"]


class StreamDataset(ConsumerStream[Any]):
    """Records of ``shards`` streamed through ``reader``, split across ``rank × worker``.

    Shards are local paths or fsspec URLs (``s3://``, ``gs://``, ``https://``, ``memory://``),
    read without a local copy; ``storage_options``, fsspec's options (credentials, an endpoint
    for MinIO or SeaweedFS), reach them with the built-in readers (a ``reader`` of your own opens
    shards itself). Every record is yielded exactly once per epoch over all ranks and DataLoader
    workers; with fewer shards than consumers, records within shards are split (a
    warning says so). ``shuffle_buffer > 0`` shuffles through a bounded buffer seeded by
    ``(seed, epoch, rank, worker)``; call :meth:`set_epoch` before each epoch (it reaches
    persistent workers too).

    Resume (``state_dict`` / ``load_state_dict``, per consumer; see :mod:`torchloom.resume.streams`):
    without a shuffle buffer the resumed stream starts at the saved shard (earlier shards are not
    read) and skips the records of that shard already yielded; with one, the stream is replayed
    (same shards, same seed) past the records already yielded, so the buffer is rebuilt exactly.
    The state also holds a fingerprint of the shard list, the reader and the shuffle settings: a
    checkpoint of other shards is refused naming the field.

    Example:
        >>> import tempfile, os
        >>> folder = tempfile.mkdtemp()
        >>> for part in range(2):
        ...     _ = open(os.path.join(folder, f"{part}.jsonl"), "w").write(f'{{"part": {part}}}\\n')
        >>> shards = [os.path.join(folder, f"{part}.jsonl") for part in range(2)]
        >>> sorted(record["part"] for record in StreamDataset(shards))
        [0, 1]
    """

    ITEM_NAME = "shard"

    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]],
        reader: Reader | None = None,
        *,
        shuffle_buffer: int = 0,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if shuffle_buffer < 0:
            raise ConfigError(f"shuffle_buffer must be >= 0, got {shuffle_buffer}")
        self.shards = [os.fspath(shard) for shard in shards]
        if not self.shards:
            raise ConfigError("StreamDataset needs at least one shard")
        super().__init__(len(self.shards), rank=rank, world_size=world_size)
        if storage_options is not None and not isinstance(storage_options, Mapping):
            given = type(storage_options).__name__
            raise ConfigError(f"storage_options is a dict of fsspec options, got {given}")
        #: Fsspec options for URL shards read by the built-in readers, or None for the environment's.
        self.storage_options = None if storage_options is None else dict(storage_options)
        self.reader = reader
        if reader is None:
            for shard in self.shards:
                reader_for(shard)  # an unknown extension fails here, not in a worker
        self.shuffle_buffer, self.seed = shuffle_buffer, seed
        self._fingerprint = fingerprint(self.shards)

    def _settings(self) -> dict[str, Any]:
        reader = "auto"
        if self.reader is not None:
            reader = getattr(self.reader, "__qualname__", type(self.reader).__name__)
        return {
            "shards": len(self.shards),
            "shards_fingerprint": self._fingerprint,
            "reader": reader,
            "shuffle_buffer": self.shuffle_buffer,
            "seed": self.seed,
        }

    def _replays(self) -> bool:
        return self.shuffle_buffer > 0

    def _read_item(self, item: int, group: int, position: int) -> Iterator[Any]:
        shard = self.shards[item]
        records = (
            self.reader(shard)
            if self.reader is not None
            else reader_for(shard)(shard, storage_options=self.storage_options)
        )
        for number, record in enumerate(records):
            if number % group == position:
                yield record

    def _reorder(self, records: Iterator[Any], consumer: Consumer, epoch: int) -> Iterator[Any]:
        if not self.shuffle_buffer:
            return records
        rng = np.random.default_rng([self.seed, epoch, consumer.rank, consumer.worker])
        return _shuffled(records, self.shuffle_buffer, rng)


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
