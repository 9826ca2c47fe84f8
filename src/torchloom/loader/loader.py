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
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler

from torchloom._buffers.pool import BufferPool
from torchloom._buffers.slots import BatchSlots
from torchloom.collation import collate
from torchloom.datasets.contract import FetchesBatches, FetchesInto
from torchloom.errors import ConfigError, StateMismatchError, UsageError
from torchloom.io.threads import batch_threads
from torchloom.loader.counts import check_count
from torchloom.loader.iteration import LoaderIteration, PassPlan
from torchloom.loader.pinning import pin_batch
from torchloom.loader.position import KEY_BATCHES, KEY_SAMPLER, SamplerPosition
from torchloom.resume.state import Resumable, check_epoch
from torchloom.samplers.contract import UnitSampler
from torchloom.samplers.index import IndexSampler


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
        num_threads: threads building batches (default: one per core this process may use, at
            most 8: they share the cores with the training step; see :mod:`torchloom.io.threads`).
        prefetch: batches ready ahead of the training loop, besides those being built.
        pin_memory: pin batches for faster, asynchronous copies to CUDA (ignored with a warning
            when CUDA is unavailable).
        drop_last: drop the last batch when it is short.
        seed: seeds the default sampler.

    Resume: :meth:`state_dict` is the position after the last batch delivered (not the batches
    being built ahead); :meth:`load_state_dict` makes the next iteration deliver exactly the rest.
    ``set_epoch`` and ``load_state_dict`` follow :mod:`torchloom.resume.epochs` (either order: the
    later epoch wins, and the one that loses warns; a finished epoch resumes into the next;
    ``set_epoch(e)`` after a ``break`` in ``e`` or after ``e`` was read to its end reads ``e`` again
    from its start). How each kind of sampler resumes (torchloom's from their own state; one with a
    state from elsewhere, such as torchdata's, from that state, handed over when the resumed pass
    begins; plain ones by skipping the batches delivered, with what they must match checked; a
    ``RandomSampler`` replayed from its ``torch.Generator``, and refused inside an epoch without
    one) is in :mod:`torchloom.loader.position`. The dataset's
    ``set_epoch`` is told the epoch actually read (the loaded one, the one that wins). A sampler's own
    ``set_epoch`` (Lightning calls ``loader.sampler.set_epoch``) is followed, since it has happened:
    the state is then the start of that epoch; made before a load, it competes with the load as
    ``Loader.set_epoch`` does; made after one, a plain sampler's epoch is read whole (torchloom's
    samplers apply the rules themselves). A plain sampler's ``set_epoch`` of the epoch it is already
    in changes nothing the Loader can see: call ``loader.set_epoch`` for that. A new iteration after
    one stopped early (``break``) starts the epoch over, as a DataLoader's does; the state taken after
    the stop, until then, is the stopped position, to resume from.

    Example:
        >>> import torch
        >>> from torchloom.datasets import TableDataset
        >>> import pyarrow as pa
        >>> loader = Loader(TableDataset(pa.table({"x": list(range(10))})), batch_size=4, num_threads=2)
        >>> [batch["x"].tolist() for batch in loader]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    STATE_VERSION = 2

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
        check_count("batch_size", batch_size, least=1)
        check_count("prefetch", prefetch, least=0)
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
        if isinstance(unit, int) and unit > 1 and batch_size % unit:
            raise ConfigError(
                f"batch_size={batch_size} must be a multiple of the sampler's unit {unit} (each batch holds "
                "whole units, so the composition the sampler promises per unit holds per batch)"
            )
        self.collate_fn = collate_fn or collate
        # None is the default; 0 is refused, not taken as the default (a DataLoader's num_workers=0
        # means no workers: a Loader always has threads).
        self.num_threads = check_count(
            "num_threads",
            batch_threads() if num_threads is None else num_threads,
            least=1,
            fix="leave it out for one thread per core (at most 8), or load in the training loop itself "
            "with a DataLoader(num_workers=0)",
        )
        self.prefetch = prefetch
        self.drop_last = drop_last
        self.pin_memory = pin_memory and self._can_pin()
        self._pool = BufferPool(limit=self.num_threads + prefetch + 4)
        # What the dataset offers beyond len and [key], resolved once (the sampler's: in _position).
        self._fetch_samples = self._sample_fetcher(dataset)
        self._position = SamplerPosition(
            self.sampler,
            dataset,
            owner=type(self).__name__,
            batch_size=batch_size,
            owns_sampler=sampler is None,
            epoch_batches=self.__len__,
        )
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
        """Start ``epoch`` (passed to the sampler and, when it has one, the dataset): the next
        iteration reads it from its start, the current epoch too after a ``break`` or its end.

        After a ``load_state_dict``, the same epoch keeps the loaded position; an earlier one loses
        with a warning (the dataset is told the epoch that is read instead); a later one wins, and
        the dropped checkpoint warns."""
        self._position.set_epoch(check_epoch(epoch))

    @property
    def epoch(self) -> int:
        """The epoch of the position, which the next iteration reads (after ``load_state_dict``, the
        one the checkpoint resumes in; after an epoch's last batch, the next one)."""
        return self._position.epoch

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """A new iteration; one that is still running is stopped (its ``next`` then raises).

        Nothing is drawn from the sampler before the first ``next``: a ``set_epoch`` between
        ``iter`` and ``next`` (Lightning's order when it resumes) still chooses the epoch."""
        self._stop_live("iter(loader) started a new iteration of this Loader")
        position = self._position
        iteration = LoaderIteration(
            PassPlan(
                batch_size=self.batch_size,
                drop_last=self.drop_last,
                num_threads=self.num_threads,
                prefetch=self.prefetch,
                begin=position.begin,
                position=position.position,
                end_of_epoch=position.end_of_epoch,
                fetch=self._fetch,
                deliver=position.deliver,
            )
        )
        self._live = weakref.ref(iteration)
        return iteration

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

    def _get_state(self) -> dict[str, Any]:
        return self._position.state()

    def _upgrade(self, state: dict[str, Any], version: int) -> dict[str, Any]:
        return self._position.upgrade(state, version)

    def _set_state(self, state: dict[str, Any]) -> None:
        if KEY_SAMPLER not in state or KEY_BATCHES not in state:
            raise StateMismatchError("Loader.load_state_dict needs the dict Loader.state_dict() returned")
        self._stop_live("load_state_dict stopped this iteration")
        self._position.load(state)
