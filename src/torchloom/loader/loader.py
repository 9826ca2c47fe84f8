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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler

from torchloom._buffers.pool import BufferPool
from torchloom._buffers.slots import BatchSlots
from torchloom.collate import collate
from torchloom.errors import ConfigError, StateMismatchError, UsageError
from torchloom.loader.pinning import pin_batch
from torchloom.resume.state import Resumable, check_epoch
from torchloom.samplers.index import IndexSampler

KEY_SAMPLER = "sampler"
KEY_BATCHES = "batches"
#: The epoch of the position, for a sampler without a state of its own (e.g. DistributedSampler).
KEY_EPOCH = "epoch"
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
    (they are raised from the thread that loaded it, unchanged); the threads stop while an error is
    handled, and a further ``next`` goes on with the following batch, as a DataLoader does. Stopping
    iteration early (``break``, dropping the iterator, :meth:`close`) cancels what is pending and
    leaves no thread running. One iteration runs at a time: ``iter(loader)`` stops a running one,
    whose ``next`` then raises saying so (for two at once, make two Loaders).

    Args:
        dataset: a map-style dataset; ``__getitems__`` is used when it has one.
        batch_size: samples per batch.
        sampler: the order (a torchloom sampler for exact resume); default an
            :class:`~torchloom.samplers.IndexSampler` (shuffled with ``shuffle=True``).
        shuffle: with no sampler, shuffle every epoch (seeded by ``seed`` and the epoch). With no
            sampler, a new iteration after a finished one starts the next epoch, as a DataLoader
            reshuffles (:meth:`set_epoch` sets the epoch explicitly).
        collate_fn: default :func:`torchloom.collate`.
        num_threads: threads building batches (default: one per core, at most 8).
        prefetch: batches ready ahead of the training loop, besides those being built.
        pin_memory: pin batches for faster, asynchronous copies to CUDA (ignored with a warning
            when CUDA is unavailable).
        drop_last: drop the last batch when it is short.
        seed: seeds the default sampler.

    Resume: :meth:`state_dict` is the position after the last batch delivered (not the batches
    being built ahead); :meth:`load_state_dict` makes the next iteration deliver exactly the rest.
    ``set_epoch`` and ``load_state_dict`` follow :mod:`torchloom.resume.state` (either order; a finished
    epoch resumes into the next) with torchloom's samplers and with plain ones (fast-forwarded in
    their epoch); a sampler with a state of its own from elsewhere (torchdata's) resumes as that
    state says. A new iteration after one stopped early (``break``) starts the epoch over, as a
    DataLoader's does; the state taken after the stop is the stopped position, to resume from.

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
        self.sampler: Sampler[Any] = (
            sampler if sampler is not None else IndexSampler(len(dataset), shuffle=shuffle, seed=seed)  # type: ignore[arg-type]
        )
        unit = getattr(self.sampler, "unit", 1)
        if isinstance(unit, int) and unit > 1 and batch_size % unit:
            raise ConfigError(
                f"batch_size={batch_size} must be a multiple of the sampler's unit {unit} (each batch holds "
                "whole units, so the composition the sampler promises per unit holds per batch)"
            )
        self.collate_fn = collate_fn or collate
        self.num_threads = num_threads or default_threads()
        if self.num_threads < 1:
            raise ConfigError(f"num_threads must be >= 1, got {num_threads}")
        self.prefetch = prefetch
        self.drop_last = drop_last
        self.pin_memory = pin_memory and self._can_pin()
        self._pool = BufferPool(limit=self.num_threads + prefetch + 4)
        self._delivered: dict[str, Any] | None = None  # state after the last delivered batch
        self._delivered_epoch: int | None = None  # the sampler's epoch when that iteration started
        # Samplers without a state of their own: batches to skip on the next iteration, in which epoch.
        self._resume_batches = 0
        self._epoch: int | None = None
        # The epoch an iteration of the loader's own sampler finished (the next iteration moves on).
        self._owns_sampler = sampler is None
        self._finished_epoch: int | None = None
        # The running iteration, weakly: it refers to this loader, so a strong reference back would
        # keep an abandoned iteration (and its threads) alive until a garbage collection.
        self._live: weakref.ref[_Iteration] | None = None

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
        """Start ``epoch`` (passed to the sampler and, when it has one, the dataset).

        After a ``load_state_dict`` of a position in an earlier epoch, a later epoch wins; the same
        epoch keeps the loaded position (torchloom's samplers keep it themselves)."""
        epoch = check_epoch(epoch)
        if self._resume_batches and self._epoch is not None and epoch < self._epoch:
            warnings.warn(
                f"Loader.set_epoch({epoch}) after loading a checkpoint of epoch {self._epoch}: the later "
                f"epoch wins, so epoch {self._epoch} continues. Start your epoch loop at the checkpoint's "
                "epoch to silence this.",
                stacklevel=2,
            )
            return
        if epoch != self._epoch:
            self._resume_batches = 0
        for target in (self.sampler, self.dataset):
            setter = getattr(target, "set_epoch", None)
            if callable(setter):
                setter(epoch)
        self._epoch = epoch
        self._delivered = None  # the position is now the sampler's: the start of the epoch
        self._finished_epoch = None

    def _sampler_epoch(self) -> int | None:
        """The sampler's current epoch, when it says (torchloom's samplers, DistributedSampler)."""
        epoch = getattr(self.sampler, "epoch", None)
        return int(epoch) if isinstance(epoch, int) else None

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """A new iteration; one that is still running is stopped (its ``next`` then raises).

        Nothing is drawn from the sampler before the first ``next``: a ``set_epoch`` between
        ``iter`` and ``next`` (Lightning's order when it resumes) still chooses the epoch."""
        self._stop_live("iter(loader) started a new iteration of this Loader")
        iteration = _Iteration(self)
        self._live = weakref.ref(iteration)
        return iteration

    def _begin(self) -> int:
        """Start an iteration's epoch: the batches it skips to resume (samplers without a state)."""
        finished = self._finished_epoch
        if self._owns_sampler and finished is not None and finished == self._sampler_epoch():
            self.set_epoch(finished + 1)  # as DataLoader(shuffle=True) reshuffles every iteration
        resume = self._resume_batches
        sampler_epoch = self._sampler_epoch()
        if resume and sampler_epoch is not None and self._epoch is not None and sampler_epoch != self._epoch:
            resume = 0  # the sampler was moved to another epoch since the load: start that one whole
        self._resume_batches = 0
        self._epoch = sampler_epoch if sampler_epoch is not None else self._epoch
        return resume

    def close(self) -> None:
        """Stop the current iteration, if any: pending batches are cancelled, threads joined (its
        ``next`` then raises StopIteration).

        Dropping the iterator (leaving a ``for`` loop) does the same at once."""
        self._stop_live(None)

    def _stop_live(self, reason: str | None) -> None:
        live, self._live = self._live, None
        iteration = live() if live is not None else None
        if iteration is not None:
            iteration.stop(reason)

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
            batch = pin_batch(batch)
        return batch

    # --- state ----------------------------------------------------------------------------------

    def _sampler_state(self) -> dict[str, Any]:
        state = getattr(self.sampler, "state_dict", None)
        return state() if callable(state) else {}

    def _get_state(self) -> dict[str, Any]:
        delivered = self._delivered
        if delivered is not None and self._sampler_epoch() == self._delivered_epoch:
            return dict(delivered)
        # Nothing delivered since a load or set_epoch; or the sampler's own set_epoch (as Lightning
        # calls it) moved on to another epoch since: the position is the sampler's.
        batches = self._resume_batches if delivered is None else 0
        epoch = self._sampler_epoch()
        return {
            KEY_SAMPLER: self._sampler_state(),
            KEY_BATCHES: batches,
            KEY_EPOCH: epoch if epoch is not None else self._epoch,
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        if KEY_SAMPLER not in state or KEY_BATCHES not in state:
            raise StateMismatchError("Loader.load_state_dict needs the dict Loader.state_dict() returned")
        self._stop_live("load_state_dict stopped this iteration")
        load = getattr(self.sampler, "load_state_dict", None)
        self._delivered = None
        self._finished_epoch = None
        if callable(load) and state[KEY_SAMPLER]:
            load(state[KEY_SAMPLER])  # the sampler now holds the position
            self._resume_batches = 0
            return
        epoch = state.get(KEY_EPOCH)
        current = self._sampler_epoch()
        current = current if current is not None else self._epoch
        if epoch is not None:
            if current is not None and current > int(epoch):
                return  # set_epoch asked for a later epoch before this load: the later epoch wins
            setter = getattr(self.sampler, "set_epoch", None)
            if callable(setter):
                setter(int(epoch))
            self._epoch = int(epoch)
        batches = int(state[KEY_BATCHES])
        # A state at the end of an epoch from before the end was recorded as such: the whole next epoch.
        self._resume_batches = batches if batches < len(self) else 0


class _Iteration:
    """One pass of a :class:`Loader` over its sampler: batches fetched ahead on a thread pool and
    delivered in order, the loader's state set to each delivered batch's position.

    An error raised while loading a batch reaches the caller when that batch is due, and the
    threads stop (nothing runs while the error is handled); a further ``next`` starts them again
    and goes on with the following batch, as a DataLoader does. When a newer iteration or a
    ``load_state_dict`` stops this one, its ``next`` raises :class:`UsageError` saying so (its
    remaining batches were not delivered).
    """

    def __init__(self, loader: Loader) -> None:
        self._executor: ThreadPoolExecutor | None = None
        # Batches drawn and not yet delivered: each one's fetch, position once delivered, and keys.
        self._pending: deque[tuple[Future[Any], dict[str, Any], list[Any]]] = deque()
        self._started = False
        self._done = False
        self._stopped: str | None = None  # why a newer iteration or a load stopped this one
        self._sampler_error: Exception | None = None
        self._loader = loader
        self._stateful = callable(getattr(loader.sampler, "state_dict", None))
        self._depth = loader.num_threads + loader.prefetch
        self._exhausted = False
        self._finished: dict[str, Any] | None = None  # the position once the epoch is drawn to its end
        self._keys: Iterator[Any] = iter(())
        self._delivered = 0
        self._epoch: int | None = None

    def _start(self) -> None:
        """Begin the epoch at the first ``next``: draw keys, start the threads, fetch ahead."""
        self._started = True
        loader = self._loader
        resume = loader._begin()
        self._delivered = resume
        self._epoch = loader._epoch
        loader._delivered_epoch = loader._sampler_epoch()
        loader._delivered = self._snapshot(loader._sampler_state())
        self._keys = iter(loader.sampler)
        if resume:
            self._keys = itertools.islice(self._keys, resume * loader.batch_size, None)  # fast-forward
        self._start_threads()
        try:
            self._fill()
        except BaseException:
            self.stop(None)
            raise

    def __iter__(self) -> _Iteration:
        return self

    def __next__(self) -> Any:
        if self._stopped is not None:
            raise UsageError(
                f"this Loader iteration was stopped: {self._stopped}, so its remaining batches were not "
                "delivered. A Loader runs one iteration at a time (for two at once, make two Loaders)"
            )
        if self._done:
            raise StopIteration
        if self._sampler_error is not None:  # the sampler failed while drawing ahead
            error, self._sampler_error = self._sampler_error, None
            self.stop(None)
            raise error
        if not self._started:
            self._start()
        elif self._executor is None:  # paused by an error in an earlier batch: go on
            self._start_threads()
            self._fill()  # in place of the failed batch
        if not self._pending:
            self.stop(None)
            raise StopIteration
        future, snapshot, keys = self._pending.popleft()
        try:
            batch = future.result()
        except BaseException:
            if not (future.done() and not future.cancelled() and future.exception() is not None):
                self._pending.appendleft((future, snapshot, keys))  # interrupted while waiting (Ctrl-C)
                raise
            self._pause()  # the batch failed
            self._deliver(snapshot)  # it is behind: a resume goes on after it
            raise
        # Draw ahead before delivering, so that the last batch of the epoch is known as such. A
        # sampler error here is raised by the next call: this batch is delivered first.
        try:
            self._fill()
        except Exception as error:
            self._sampler_error = error
        self._deliver(snapshot)
        return batch

    def _deliver(self, snapshot: dict[str, Any]) -> None:
        """Set the loader's position to after the batch of ``snapshot``; after the epoch's last
        batch, the end of the epoch (which resumes into the whole next one)."""
        if self._exhausted and not self._pending and self._finished is not None:
            snapshot = self._finished
            self._loader._finished_epoch = self._loader._sampler_epoch()
        self._loader._delivered = snapshot

    def _fill(self) -> None:
        loader = self._loader
        while not self._exhausted and len(self._pending) < self._depth:
            batch_keys = list(itertools.islice(self._keys, loader.batch_size))
            if not batch_keys or (loader.drop_last and len(batch_keys) < loader.batch_size):
                self._exhausted = True
                self._finished = self._end_of_epoch()
                if not self._pending:  # nothing more to deliver: the position is the end already
                    self._deliver(self._finished)
                return
            self._delivered += 1
            snapshot = self._snapshot(loader._sampler_state() if self._stateful else {})
            self._pending.append((self._submit(batch_keys), snapshot, batch_keys))

    def _submit(self, keys: list[Any]) -> Future[Any]:
        assert self._executor is not None
        return self._executor.submit(self._loader._fetch, keys)

    def _start_threads(self) -> None:
        """Start the thread pool; batches whose fetch a pause cancelled are submitted again."""
        self._executor = ThreadPoolExecutor(self._loader.num_threads, thread_name_prefix="torchloom-loader")
        self._pending = deque(
            (self._submit(keys) if future.cancelled() else future, snapshot, keys)
            for future, snapshot, keys in self._pending
        )

    def _pause(self, *, wait: bool = True) -> None:
        """Cancel the fetches not yet started and join the threads (finished ones are kept)."""
        executor, self._executor = self._executor, None
        for future, _, _ in self._pending:
            future.cancel()
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)

    def _snapshot(self, sampler_state: dict[str, Any]) -> dict[str, Any]:
        return {KEY_SAMPLER: sampler_state, KEY_BATCHES: self._delivered, KEY_EPOCH: self._epoch}

    def _end_of_epoch(self) -> dict[str, Any]:
        """The position after the whole epoch: the sampler's own state once it is drawn to the end
        (a short last batch dropped included); for a sampler without one, the start of the next
        epoch (epoch + 1 when it has epochs, else simply the start)."""
        if self._stateful:
            return self._snapshot(self._loader._sampler_state())
        epoch = None if self._epoch is None else self._epoch + 1
        return {KEY_SAMPLER: {}, KEY_BATCHES: 0, KEY_EPOCH: epoch}

    def stop(self, reason: str | None, *, wait: bool = True) -> None:
        """End the iteration: cancel pending batches, join the threads (``wait``); with a
        ``reason`` (a newer iteration, a load), a later ``next`` raises instead of ending quietly."""
        if reason is not None and not self._done:
            self._stopped = reason
        self._done = True
        self._pause(wait=wait)
        self._pending.clear()

    def __del__(self) -> None:
        # Not joined: a garbage collection may run this on one of the pool's own threads, or at
        # interpreter exit; the threads end after the batch each one is building.
        self.stop(None, wait=False)
