"""Loader: batches built by threads in the training process, resumable exactly.

DataLoader workers are processes: every batch crosses into the training process through freshly
faulted shared memory, which caps near 1 GB/s (SPEC §6, §7: 15 workers fed an H200 5,536 of
13,108 img/s). The decoders torchloom uses (libjpeg-turbo, OpenCV) release the GIL, so threads in
the training process decode in parallel without that hand-off: :class:`Loader` fetches whole
batches (``dataset.__getitems__``) on a thread pool, keeps ``num_threads + prefetch`` batches in
flight, delivers them in order, and writes images into reused batch buffers (already-touched pages;
a buffer is reused only when nothing else holds it, so a batch you keep is never overwritten).

Why not torchdata.nodes (SPEC §3 named it): its ParallelMapper adds a reader thread, a
reassembly queue, a prefetch thread and a one-batch look-ahead in the root; on 2 cores the extra
hand-offs cost GIL time the decoders need, and exact state needs its snapshot machinery. A pool
of threads fed in order by the caller gives the same parallelism, the exact delivered position by
construction (the sampler's state is recorded as each batch's keys are drawn) and a shutdown that
cancels what is pending and joins every thread when iteration stops, however it stops.
"""

from __future__ import annotations

import itertools
import math
import os
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler

from torchloom.buffers import BatchSlots, BufferPool
from torchloom.collate import collate
from torchloom.errors import ConfigError, UsageError
from torchloom.samplers.index import IndexSampler
from torchloom.state import Resumable, StateMismatchError, check_epoch

KEY_SAMPLER = "sampler"
KEY_BATCHES = "batches"
# Threads used when num_threads is not given: one per core, but not more than this.
MAX_DEFAULT_THREADS = 8


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_threads() -> int:
    """One thread per core this process may use, at most :data:`MAX_DEFAULT_THREADS`."""
    return max(1, min(available_cores(), MAX_DEFAULT_THREADS))


class Loader(Resumable):
    """Batches of ``dataset`` built by a pool of threads in this process.

    Works with the same datasets (map-style), samplers (torchloom's are resumable), collate
    functions and fault policy as a DataLoader. Errors name the sample as the DataLoader path does
    (they are raised from the thread that loaded it, unchanged). Stopping iteration early (``break``,
    an exception, :meth:`close`) cancels what is pending and leaves no thread running.

    Args:
        dataset: a map-style dataset; ``__getitems__`` is used when it has one.
        batch_size: samples per batch.
        sampler: the order (a torchloom sampler for exact resume); default an
            :class:`~torchloom.samplers.IndexSampler` (shuffled with ``shuffle=True``).
        shuffle: with no sampler, shuffle every epoch (seeded by ``seed`` and the epoch).
        collate_fn: default :func:`torchloom.collate`.
        num_threads: threads building batches (default: one per core, at most 8).
        prefetch: batches ready ahead of the training loop, besides those being built.
        pin_memory: pin batches for faster, asynchronous copies to CUDA (ignored with a warning
            when CUDA is unavailable).
        drop_last: drop the last batch when it is short.
        seed: seeds the default sampler.

    Resume: :meth:`state_dict` is the position after the last batch delivered (not the batches
    being built ahead); :meth:`load_state_dict` makes the next iteration deliver exactly the rest.
    ``set_epoch`` and ``load_state_dict`` follow :mod:`torchloom.state` (either order; a finished
    epoch resumes into the next).

    Example:
        >>> import torch
        >>> from torchloom.datasets import TableDataset
        >>> import pyarrow as pa
        >>> loader = Loader(TableDataset(pa.table({"x": list(range(10))})), batch_size=4, num_threads=2)
        >>> [batch["x"].tolist() for batch in loader]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    STATE_VERSION = 1

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        batch_size: int,
        sampler: Sampler[Any] | None = None,
        shuffle: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_threads: int | None = None,
        prefetch: int = 2,
        pin_memory: bool = False,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        if isinstance(dataset, IterableDataset):
            raise UsageError(
                "Loader reads map-style datasets; for an IterableDataset (StreamDataset, SyncedRecordings) "
                "use a torch DataLoader with workers"
            )
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if prefetch < 0:
            raise ConfigError(f"prefetch must be >= 0, got {prefetch}")
        if sampler is not None and shuffle:
            raise ConfigError(
                "pass either sampler= or shuffle=True, not both (the sampler decides the order)"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.sampler: Sampler[Any] = sampler or IndexSampler(len(dataset), shuffle=shuffle, seed=seed)  # type: ignore[arg-type]
        self.collate_fn = collate_fn or collate
        self.num_threads = num_threads or default_threads()
        if self.num_threads < 1:
            raise ConfigError(f"num_threads must be >= 1, got {num_threads}")
        self.prefetch = prefetch
        self.drop_last = drop_last
        self.pin_memory = pin_memory and self._can_pin()
        self._pool = BufferPool(limit=self.num_threads + prefetch + 4)
        self._delivered: dict[str, Any] | None = None  # state after the last delivered batch
        self._resume_batches = 0  # batches to skip on the next iteration (samplers without state)
        # The running iteration, weakly: the generator refers to this loader, so a strong reference
        # back would keep an abandoned iteration (and its threads) alive until a garbage collection.
        self._live: weakref.ref[Generator[Any, None, None]] | None = None

    @staticmethod
    def _can_pin() -> bool:
        if torch.cuda.is_available():
            return True
        warnings.warn(
            "Loader(pin_memory=True): CUDA is not available, so batches are not pinned", stacklevel=3
        )
        return False

    # --- epochs and length ----------------------------------------------------------------------

    def __len__(self) -> int:
        samples = len(self.sampler)  # type: ignore[arg-type]
        return samples // self.batch_size if self.drop_last else math.ceil(samples / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` (passed to the sampler and, when it has one, the dataset)."""
        epoch = check_epoch(epoch)
        for target in (self.sampler, self.dataset):
            setter = getattr(target, "set_epoch", None)
            if callable(setter):
                setter(epoch)
        self._delivered = None  # the position is now the sampler's: the start of the epoch

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        self.close()
        iterator = self._batches()
        self._live = weakref.ref(iterator)
        return iterator

    def close(self) -> None:
        """Stop the current iteration, if any: pending batches are cancelled, threads joined.

        Dropping the iterator (leaving a ``for`` loop) does the same at once."""
        live, self._live = self._live, None
        iterator = live() if live is not None else None
        if iterator is not None:
            iterator.close()

    def _batches(self) -> Generator[Any, None, None]:
        stateful = callable(getattr(self.sampler, "state_dict", None))
        delivered, self._resume_batches = self._resume_batches, 0
        self._delivered = {
            KEY_SAMPLER: self.sampler.state_dict() if stateful else {},  # type: ignore[attr-defined]
            KEY_BATCHES: delivered,
        }
        keys: Iterator[Any] = iter(self.sampler)
        if delivered:
            keys = itertools.islice(keys, delivered * self.batch_size, None)  # fast-forward
        depth = self.num_threads + self.prefetch
        pending: deque[tuple[Future[Any], dict[str, Any]]] = deque()
        executor = ThreadPoolExecutor(self.num_threads, thread_name_prefix="torchloom-loader")
        try:
            exhausted = False
            while True:
                while not exhausted and len(pending) < depth:
                    batch_keys = list(itertools.islice(keys, self.batch_size))
                    if not batch_keys or (self.drop_last and len(batch_keys) < self.batch_size):
                        exhausted = True
                        break
                    delivered += 1
                    snapshot = self.sampler.state_dict() if stateful else {}  # type: ignore[attr-defined]
                    snapshot = {KEY_SAMPLER: snapshot, KEY_BATCHES: delivered}
                    pending.append((executor.submit(self._fetch, batch_keys), snapshot))
                if not pending:
                    return
                future, snapshot = pending.popleft()
                batch = future.result()
                self._delivered = snapshot
                yield batch
        finally:
            for future, _ in pending:
                future.cancel()
            executor.shutdown(wait=True, cancel_futures=True)

    def _fetch(self, keys: Sequence[Any]) -> Any:
        fetch_into = getattr(self.dataset, "getitems_into", None)
        if callable(fetch_into):
            samples = fetch_into(keys, BatchSlots(len(keys), self._pool.take))
        elif callable(getattr(self.dataset, "__getitems__", None)):
            samples = self.dataset.__getitems__(keys)  # type: ignore[attr-defined]
        else:
            samples = [self.dataset[key] for key in keys]
        batch = self.collate_fn(samples)
        if self.pin_memory:
            from torch.utils.data._utils.pin_memory import pin_memory

            batch = pin_memory(batch)
        return batch

    # --- state ----------------------------------------------------------------------------------

    def _get_state(self) -> dict[str, Any]:
        if self._delivered is not None:
            return {KEY_SAMPLER: self._delivered[KEY_SAMPLER], KEY_BATCHES: self._delivered[KEY_BATCHES]}
        sampler_state = getattr(self.sampler, "state_dict", None)
        sampler = sampler_state() if callable(sampler_state) else {}
        return {KEY_SAMPLER: sampler, KEY_BATCHES: self._resume_batches}

    def _set_state(self, state: dict[str, Any]) -> None:
        if KEY_SAMPLER not in state or KEY_BATCHES not in state:
            raise StateMismatchError("Loader.load_state_dict needs the dict Loader.state_dict() returned")
        self.close()
        load = getattr(self.sampler, "load_state_dict", None)
        self._delivered = None
        if callable(load) and state[KEY_SAMPLER]:
            load(state[KEY_SAMPLER])  # the sampler now holds the position
        else:
            self._resume_batches = int(state[KEY_BATCHES])
