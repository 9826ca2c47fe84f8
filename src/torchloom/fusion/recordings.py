"""SyncedRecordings: TimeSync over many recordings as an IterableDataset, sharded by recording."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torchloom.errors import ConfigError
from torchloom.fusion.sync import TimeSync
from torchloom.resume.streams import ConsumerStream

Recording = Callable[[], Mapping[str, Any]]


class SyncedRecordings(ConsumerStream[dict[str, Any]]):
    """Align each recording with :class:`TimeSync` and stream the samples, split across ranks × workers.

    ``recordings`` are callables returning one recording's streams (so each worker opens its own
    files or iterators). Consumers take whole recordings; with fewer recordings than consumers,
    the ticks of a recording are split between the consumers that share it (each still aligns the
    whole recording). Every aligned sample is yielded exactly once, with ``"recording"`` added.
    ``sync_options`` are TimeSync's keyword arguments.

    Resumable per consumer like :class:`~torchloom.streaming.StreamDataset` (recording and sample
    within it; a resumed recording is aligned again and the delivered samples skipped);
    ``set_epoch`` reaches persistent workers.

    Example:
        >>> import numpy as np
        >>> def recording():
        ...     return {"cam": (np.arange(3) / 10, np.arange(3)), "imu": (np.arange(9) / 30, np.zeros(9))}
        >>> samples = list(SyncedRecordings([recording, recording], reference="cam", tolerance=0.05))
        >>> [(s["recording"], s["cam"]) for s in samples]
        [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    """

    ITEM_NAME = "recording"

    def __init__(
        self,
        recordings: Sequence[Recording],
        *,
        rank: int | None = None,
        world_size: int | None = None,
        **sync_options: Any,
    ) -> None:
        if not recordings:
            raise ConfigError("SyncedRecordings needs at least one recording")
        if "reference" not in sync_options or "tolerance" not in sync_options:
            raise ConfigError("SyncedRecordings needs TimeSync's reference= and tolerance=")
        super().__init__(len(recordings), rank=rank, world_size=world_size)
        self.recordings = list(recordings)
        self.sync_options = sync_options

    def _settings(self) -> dict[str, Any]:
        return {
            "recordings": len(self.recordings),
            "sync_options": repr(sorted(self.sync_options.items())),
        }

    def _read_item(self, item: int, group: int, position: int) -> Iterator[dict[str, Any]]:
        sync = TimeSync(self.recordings[item](), **self.sync_options)
        for number, sample in enumerate(sync):
            if number % group == position:
                yield {**sample, "recording": item}
