"""Loader: batches built by threads in the training process, resumable exactly.

DataLoader workers are processes: every batch crosses into the training process through freshly
faulted shared memory, which caps near 1 GB/s (measured: 15 workers fed an H200 5,536 of the 13,108
img/s its model could take). The decoders torchloom uses (libjpeg-turbo, OpenCV) release the GIL,
so threads in the training process decode in parallel without that hand-off: :class:`Loader`
fetches whole batches (``dataset.__getitems__``) on a thread pool, keeps ``num_threads + prefetch``
batches in flight, delivers them in order, and writes images into reused batch buffers (already-
touched pages; a buffer is reused only when nothing else holds it, so a batch you keep is never
overwritten).

Why not torchdata.nodes: its ParallelMapper adds a reader thread, a
reassembly queue, a prefetch thread and a one-batch look-ahead in the root; on 2 cores the extra
hand-offs cost GIL time the decoders need, and exact state needs its snapshot machinery. A pool
of threads fed in order by the caller gives the same parallelism, the exact delivered position by
construction (the sampler's state is recorded as each batch's keys are drawn) and a shutdown that
cancels what is pending and joins every thread when iteration stops, however it stops.
"""

from __future__ import annotations

import math
import os
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler

from torchloom._buffers.pool import BufferPool
from torchloom._buffers.slots import BatchSlots
from torchloom.collate import collate
from torchloom.datasets.contract import FetchesBatches, FetchesInto
from torchloom.errors import ConfigError, StateMismatchError, UsageError
from torchloom.loader.iteration import LoaderIteration, PassPlan
from torchloom.loader.pinning import pin_batch
from torchloom.resume.epochs import Epochs, HasEpoch, SetsEpoch
from torchloom.resume.state import Resumable, Stateful, check_epoch
from torchloom.samplers.contract import UnitSampler
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

    What it uses of the dataset and the sampler beyond ``len``, ``dataset[key]`` and ``iter(sampler)``
    is checked once, here (:mod:`torchloom.datasets.contract`, :mod:`torchloom.samplers.contract`):
    a batched fetch into its reused buffers or at once, a sampler's unit, epochs and state.

    Args:
        dataset: a map-style dataset; ``getitems_into`` or ``__getitems__`` is used when it has one.
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
    ``set_epoch`` and ``load_state_dict`` follow :mod:`torchloom.resume.epochs` (either order; a finished
    epoch resumes into the next) with torchloom's samplers and with plain ones (fast-forwarded in
    their epoch); a sampler with a state of its own from elsewhere (torchdata's) resumes as that
    state says. A sampler's own ``set_epoch`` (Lightning calls ``loader.sampler.set_epoch``) is
    followed, since it has happened: the state is then the start of that epoch; made before a load,
    it competes with the load as ``Loader.set_epoch`` does; made after one, a plain sampler's epoch is
    read whole (torchloom's samplers apply the rules themselves). A new iteration after one stopped
    early (``break``) starts the epoch over, as a DataLoader's does; the state taken after the stop is
    the stopped position, to resume from.

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
        unit = self.sampler.unit if isinstance(self.sampler, UnitSampler) else 1
        if unit > 1 and batch_size % unit:
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
        # What the sampler and the dataset offer beyond iter, len and [key], resolved once.
        self._stateful_sampler = self.sampler if isinstance(self.sampler, Stateful) else None
        self._epoch_sampler = self.sampler if isinstance(self.sampler, HasEpoch) else None
        self._epoch_taking_sampler = self.sampler if isinstance(self.sampler, SetsEpoch) else None
        self._epoch_taking_dataset = dataset if isinstance(dataset, SetsEpoch) else None
        self._fetch_samples = self._sample_fetcher(dataset)
        self._epochs = Epochs(type(self).__name__)
        self._delivered: dict[str, Any] | None = None  # the position after the last delivered batch
        # A sampler without a state of its own: batches a loaded position skips on the next iteration.
        self._resume_batches = 0
        # With no sampler given, a new iteration after a finished epoch starts the next one.
        self._owns_sampler = sampler is None
        # The running iteration, weakly: it refers to this loader, so a strong reference back would
        # keep an abandoned iteration (and its threads) alive until a garbage collection.
        self._live: weakref.ref[LoaderIteration] | None = None

    def _sample_fetcher(self, dataset: Dataset[Any]) -> Callable[[Sequence[Any]], list[Any]]:
        """How a batch's samples are loaded: into this loader's reused buffers, at once, or one by one."""
        if isinstance(dataset, FetchesInto):
            into, take = dataset.getitems_into, self._pool.take
            return lambda keys: into(keys, BatchSlots(len(keys), take))
        if isinstance(dataset, FetchesBatches):
            return dataset.__getitems__
        return lambda keys: [dataset[key] for key in keys]

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

        After a ``load_state_dict``, a later epoch wins; the same epoch keeps the loaded position
        (torchloom's samplers keep it themselves); an earlier one is refused with a warning."""
        epoch = check_epoch(epoch)
        previous = self._epochs.epoch
        if not self._epochs.set_epoch(epoch):
            return  # a loaded later epoch wins
        if epoch != previous:
            self._resume_batches = 0
        for part in (self._epoch_taking_sampler, self._epoch_taking_dataset):
            if part is not None:
                part.set_epoch(epoch)
        self._delivered = None  # the position is now the sampler's: the start of the epoch

    def _sampler_epoch(self) -> int | None:
        """The sampler's current epoch, when it has epochs (torchloom's samplers, DistributedSampler)."""
        return None if self._epoch_sampler is None else int(self._epoch_sampler.epoch)

    def _epoch(self) -> int:
        """The epoch of the position: the sampler's when it has epochs, else this loader's."""
        epoch = self._sampler_epoch()
        return self._epochs.epoch if epoch is None else epoch

    def _follow_sampler(self) -> bool:
        """Take the sampler's epoch when its own ``set_epoch`` moved it since this loader last looked
        (Lightning calls ``loader.sampler.set_epoch``); True when it had moved."""
        epoch = self._sampler_epoch()
        if epoch is None or epoch == self._epochs.epoch:
            return False
        self._epochs.follow(epoch)
        return True

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """A new iteration; one that is still running is stopped (its ``next`` then raises).

        Nothing is drawn from the sampler before the first ``next``: a ``set_epoch`` between
        ``iter`` and ``next`` (Lightning's order when it resumes) still chooses the epoch."""
        self._stop_live("iter(loader) started a new iteration of this Loader")
        iteration = LoaderIteration(
            PassPlan(
                sampler=self.sampler,
                batch_size=self.batch_size,
                drop_last=self.drop_last,
                num_threads=self.num_threads,
                prefetch=self.prefetch,
                begin=self._begin,
                position=self._position,
                end_of_epoch=self._end_of_epoch,
                fetch=self._fetch,
                deliver=self._deliver,
            )
        )
        self._live = weakref.ref(iteration)
        return iteration

    def _begin(self) -> tuple[int, int]:
        """Start an iteration: the batches it skips to resume (samplers without a state) and its epoch."""
        epoch = self._sampler_epoch()
        if self._owns_sampler and epoch is not None and self._epochs.repeats(epoch):
            self.set_epoch(epoch + 1)  # as DataLoader(shuffle=True) reshuffles every iteration
        skip, self._resume_batches = self._resume_batches, 0
        if self._follow_sampler():
            skip = 0  # the sampler was moved to another epoch since the load: start that one whole
        self._epochs.begin()
        return skip, self._epochs.epoch

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
        batch = self.collate_fn(self._fetch_samples(keys))
        if self.pin_memory:
            batch = pin_batch(batch)
        return batch

    # --- state ----------------------------------------------------------------------------------

    def _sampler_state(self) -> dict[str, Any]:
        return {} if self._stateful_sampler is None else self._stateful_sampler.state_dict()

    def _position(self, batches: int, epoch: int) -> dict[str, Any]:
        """The position after ``batches`` batches of ``epoch`` drawn now: the sampler's state (when it
        has one), else the batches to fast-forward."""
        return {KEY_SAMPLER: self._sampler_state(), KEY_BATCHES: batches, KEY_EPOCH: epoch}

    def _end_of_epoch(self, batches: int, epoch: int) -> dict[str, Any]:
        """The position after the whole of ``epoch``: the sampler's own state once it is drawn to the
        end (a short last batch dropped included); for a sampler without one, the start of the next
        epoch."""
        if self._stateful_sampler is not None:
            return self._position(batches, epoch)
        return {KEY_SAMPLER: {}, KEY_BATCHES: 0, KEY_EPOCH: epoch + 1}

    def _deliver(self, position: dict[str, Any], *, finished: bool) -> None:
        """The position after the batch just delivered (``finished``: the epoch's last)."""
        self._delivered = position
        if finished:
            self._epochs.finish(self._epoch())

    def _get_state(self) -> dict[str, Any]:
        delivered = self._delivered
        sampler_epoch = self._sampler_epoch()
        if delivered is not None and (sampler_epoch is None or sampler_epoch == self._epochs.epoch):
            return dict(delivered)
        # Nothing delivered since a load or set_epoch; or the sampler's own set_epoch (as Lightning
        # calls it) moved on to another epoch since: the position is the sampler's.
        return {
            KEY_SAMPLER: self._sampler_state(),
            KEY_BATCHES: self._resume_batches if delivered is None else 0,
            KEY_EPOCH: self._epoch(),
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        if KEY_SAMPLER not in state or KEY_BATCHES not in state:
            raise StateMismatchError("Loader.load_state_dict needs the dict Loader.state_dict() returned")
        self._stop_live("load_state_dict stopped this iteration")
        self._delivered = None
        if self._stateful_sampler is not None and state[KEY_SAMPLER]:
            self._stateful_sampler.load_state_dict(state[KEY_SAMPLER])  # the sampler now holds the position
            self._resume_batches = 0
            epoch = self._sampler_epoch()
            if epoch is not None:
                self._epochs.follow(epoch)  # the epoch the sampler resumes in
            return
        self._follow_sampler()  # the sampler's own set_epoch since: a request this load competes with
        saved = state.get(KEY_EPOCH)  # None in states written before the epoch was: this epoch
        epoch = self._epochs.epoch if saved is None else int(saved)
        if not self._epochs.admits(epoch):
            return  # set_epoch asked for a later epoch before this load: the later epoch wins
        self._epochs.load(epoch, finished=False)
        if self._epoch_taking_sampler is not None:
            self._epoch_taking_sampler.set_epoch(epoch)
        batches = int(state[KEY_BATCHES])
        # A state at the end of an epoch from before the end was recorded as such: the whole next epoch.
        self._resume_batches = batches if batches < len(self) else 0
