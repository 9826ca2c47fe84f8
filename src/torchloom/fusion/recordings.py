"""SyncedRecordings: TimeSync over many recordings as an IterableDataset, sharded by recording."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from torchloom.fusion.timesync import TimeSync
from torchloom.samplers.base import default_rank_and_world
from torchloom.streaming.dataset import assignment

Recording = Callable[[], Mapping[str, Any]]


class SyncedRecordings(IterableDataset[dict[str, Any]]):
    """Align each recording with :class:`TimeSync` and stream the samples, split across ranks × workers.

    ``recordings`` are callables returning one recording's streams (so each worker opens its own
    files or iterators). Consumers take whole recordings; with fewer recordings than consumers,
    the ticks of a recording are split between the consumers that share it (each still aligns the
    whole recording). Every aligned sample is yielded exactly once, with ``"recording"`` added.
    ``sync_options`` are TimeSync's keyword arguments.

    Example:
        >>> import numpy as np
        >>> def recording():
        ...     return {"cam": (np.arange(3) / 10, np.arange(3)), "imu": (np.arange(9) / 30, np.zeros(9))}
        >>> samples = list(SyncedRecordings([recording, recording], reference="cam", tolerance=0.05))
        >>> [(s["recording"], s["cam"]) for s in samples]
        [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    """

    def __init__(
        self,
        recordings: Sequence[Recording],
        *,
        rank: int | None = None,
        world_size: int | None = None,
        **sync_options: Any,
    ) -> None:
        if not recordings:
            raise ValueError("SyncedRecordings needs at least one recording")
        if "reference" not in sync_options or "tolerance" not in sync_options:
            raise ValueError("SyncedRecordings needs TimeSync's reference= and tolerance=")
        self.recordings = list(recordings)
        self.sync_options = sync_options
        self.rank, self.world_size = default_rank_and_world(rank, world_size)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        plan = assignment(len(self.recordings), self.world_size * workers, self.rank * workers + worker)
        for recording, group, position in plan:
            sync = TimeSync(self.recordings[recording](), **self.sync_options)
            for number, sample in enumerate(sync):
                if number % group == position:
                    yield {**sample, "recording": recording}
