"""DecodedCache: decode every image of a dataset once, then read it from a memory-mapped file.

"Decode once, augment many": decoding (and shrinking 1080p sources to the size that is
trained on) happens once; random augmentation still runs every epoch, after the cache, with each
sample's own ``(seed, epoch, index)`` draws.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from torch.utils.data import Dataset

from torchloom._buffers.slots import BatchSlots
from torchloom.cache.atomic import cache_lock, new_staging_folder, replace_folder
from torchloom.cache.build import build_cache
from torchloom.cache.fingerprint import InputStats, content_key, settings_of
from torchloom.cache.integrity import file_problem
from torchloom.cache.memory import SharedCopy, format_bytes
from torchloom.cache.opening import CacheProblem, inspect_cache, map_again
from torchloom.cache.storage import INPUTS_FILE, META_FILE, ImageStore
from torchloom.datasets.contract import CacheableDataset, FetchesBatches, FetchesInto, Slot
from torchloom.datasets.options import takes_no_sample_options
from torchloom.errors import CacheError, ConfigError, CorruptCacheError, SampleError, UsageError, check_choice
from torchloom.faults import Skipped
from torchloom.timing import StageClock
from torchloom.transforms.base import leaves_input_intact

Location = Literal["disk", "memory"]
LOCATIONS = ("disk", "memory")
#: Skipped samples a report's text lists by name.
SKIPS_LISTED = 20


@dataclass
class CacheReport:
    """What opening a cache did, and the samples it holds no image for (skipped at build time).

    Example:
        >>> print(CacheReport(built=False, reason=None, samples=2, nbytes=2048, layout="fixed",
        ...                   shape=(2, 16, 16, 3)))
        cache reused: 2 samples, 2.0 KiB, fixed layout (2x16x16x3), 0 skipped
    """

    built: bool
    reason: str | None
    samples: int
    nbytes: int
    layout: str
    shape: tuple[int, ...] | None
    skipped: list[Skipped] = field(default_factory=list)
    #: With ``location="memory"``, whether this process copied the cache into shared memory (not
    #: when it mapped the copy another process on the node made).
    copied: bool = False

    def __str__(self) -> str:
        action = f"built ({self.reason})" if self.built else "reused"
        shape = "x".join(map(str, self.shape)) if self.shape else "mixed shapes"
        lines = [
            f"cache {action}: {self.samples} samples, {format_bytes(self.nbytes)}, {self.layout} layout "
            f"({shape}), {len(self.skipped)} skipped"
        ]
        lines += [
            f"  skipped #{s.index} {s.path!r}: {s.error}: {s.reason}" for s in self.skipped[:SKIPS_LISTED]
        ]
        if len(self.skipped) > SKIPS_LISTED:
            lines.append(f"  ... and {len(self.skipped) - SKIPS_LISTED} more (all in report.skipped)")
        return "\n".join(lines)


class DecodedCache(Dataset["dict[str, Any] | Skipped"], FetchesInto, FetchesBatches):
    """A dataset's samples with their images decoded once into a memory-mapped cache.

    It mirrors ``dataset``: same length, same keys (``int`` or :class:`torchloom.SampleKey`), the
    same sample dicts (labels, paths, manifest fields), except that the image is read from the
    cache (upright, as ``dataset`` decodes it, shrunk with ``cv2.INTER_AREA`` so its longer side is
    at most ``max_side``) and then given to ``dataset``'s transform with ``dataset.rng(key)``: the
    same random draws as without the cache (with ``max_side``, crop boxes are drawn on the smaller
    image, the same relative boxes up to rounding). With ``max_side=None`` a sample equals the
    uncached one exactly, except after a resizing transform on a JPEG: uncached, the JPEG is decoded
    at 1/2, 1/4 or 1/8 scale when the crop allows, the cache holds it at full size, so pixels differ
    slightly (the same box, resized from more detail). ``__getitems__`` reads
    a batch with one gather and writes its images into one batch buffer, as the dataset does.

    Building decodes every sample in threads with a progress bar, into a temporary folder renamed
    onto ``path`` when complete. Opening checks the cache's settings and every input file's size and
    mtime (so a cache copied along with its data by ``rsync -a`` stays valid; a file replaced by one
    of the same size with its mtime kept, as ``cp -p`` does, is not noticed: delete the cache to
    rebuild it): a stale cache is rebuilt with a warning saying what changed (``rebuild=False``: a
    :class:`StaleCacheError`), a truncated or altered one likewise (:class:`CorruptCacheError`), and
    a folder that is not a torchloom cache is refused (:class:`NotACacheError`), never overwritten.
    Builders in several processes (the local ranks of a job, other jobs) wait for each other
    through ``<path>.lock`` (``flock``: a builder killed mid-build releases it, and the next one
    removes its partial folder and builds); the later ones use the first one's cache. Samples
    ``dataset`` fails to decode under ``on_error="skip"`` are listed in ``report`` and read as
    :class:`torchloom.Skipped` (or raise, under ``"raise"``).

    The cache pickles without its memory maps (DataLoader workers map the files again), and every
    process maps the same pages: one copy in memory serves every worker and every rank of the node.

    Args:
        dataset: a :class:`torchloom.FolderDataset` or :class:`torchloom.ManifestDataset` (what the
            cache reads of it is :class:`torchloom.datasets.CacheableDataset`).
        path: the cache folder (created; its parent holds the lock file and temporary folders).
        fields: the sample fields to cache: the dataset's image field (``"image"`` unless a
            manifest's ``Image`` field has another ``name=``).
        max_side: shrink images whose longer side is longer than this (e.g. 1080p sources
            trained at 224 px); ``None`` keeps them as decoded.
        location: ``"disk"`` maps the folder's files; ``"memory"`` maps one copy of them in
            ``/dev/shm`` that every process on the node opening a cache of the same content shares
            (the first one copies, checking the free space; the others wait and map it), held until
            this object is closed or garbage-collected, or the process exits: keep it open while
            loaders read it.
        memory_budget: with ``"memory"``, the most bytes this user's copies may take in
            ``/dev/shm`` together: copies no process uses are kept up to it for the next job (the
            next run of a sweep), the least recently used evicted first; ``None`` keeps none (the
            last process to close a copy removes it, and what killed jobs left is removed when a
            copy is next opened).
        rebuild: rebuild a stale or damaged cache (with a warning) instead of raising.
        verify: check every byte's checksum on open instead of sampled blocks.
        num_threads: threads that decode (default: one per core this process may use, at most
            32: the rule for file work, as in :class:`~torchloom.datasets.IndexingOptions`).
        progress: show progress bars while building.

    Example:
        >>> import os, tempfile
        >>> from torchloom import FolderDataset
        >>> from torchloom.testing import write_class_folders
        >>> root = tempfile.mkdtemp()
        >>> _ = write_class_folders(os.path.join(root, "data"), [2, 1], size=(64, 96), progress=False)
        >>> dataset = FolderDataset(os.path.join(root, "data"), progress=False)
        >>> cache = DecodedCache(dataset, os.path.join(root, "cache"), max_side=48, progress=False)
        >>> cache[2]["image"].shape, cache[2]["label"], cache.report.built
        (torch.Size([3, 32, 48]), 1, True)
        >>> DecodedCache(dataset, os.path.join(root, "cache"), max_side=48, progress=False).report.built
        False
    """

    @takes_no_sample_options(
        "it applies the transform, fault policy and seed of the dataset it caches: set them there"
    )
    def __init__(
        self,
        dataset: CacheableDataset,
        path: str | os.PathLike[str],
        *,
        fields: Sequence[str] = ("image",),
        max_side: int | None = None,
        location: Location = "disk",
        memory_budget: int | None = None,
        rebuild: bool = True,
        verify: bool = False,
        num_threads: int | None = None,
        progress: bool = True,
    ) -> None:
        if not isinstance(dataset, CacheableDataset):
            raise UsageError(
                f"DecodedCache caches a FolderDataset or ManifestDataset (a "
                f"torchloom.datasets.CacheableDataset), got {type(dataset).__name__}"
            )
        check_choice("location", location, LOCATIONS)
        if max_side is not None and (type(max_side) is not int or max_side < 1):
            raise ConfigError(f"max_side must be a positive int or None, got {max_side=}")
        if memory_budget is not None and (type(memory_budget) is not int or memory_budget < 1):
            raise ConfigError(f"memory_budget must be a positive int (bytes) or None, got {memory_budget=}")
        if num_threads is not None and num_threads < 1:
            raise ConfigError(f"num_threads must be >= 1 or None, got {num_threads=}")
        self.source = dataset
        # A symbolic link to a folder is resolved: the cache is built beside the folder it names and
        # renamed onto it there (the link stays as it is, pointing at the new cache).
        self.path = os.path.realpath(os.fspath(path))
        if os.path.ismount(self.path):
            raise ConfigError(
                f"cache path {os.fspath(path)!r} is a mount point, which a finished build cannot be "
                "renamed onto; pass a folder inside it"
            )
        self.location = location
        self.memory_budget = memory_budget
        self.max_side = max_side
        self.fields = (_image_field(dataset, fields),)
        self._settings = settings_of(self.fields[0], max_side, dataset.exif_orientation, dataset.max_pixels)
        self._shared: SharedCopy | None = None
        inputs = InputStats.of(dataset.index.paths, num_threads=num_threads, root=dataset.read_root)
        built, reason = self._open_or_build(
            inputs, rebuild=rebuild, verify=verify, num_threads=num_threads, progress=progress
        )
        self._failures = {int(record["index"]): record for record in self.meta["skipped"]}
        self.report = CacheReport(
            built=built,
            reason=reason,
            samples=len(dataset),
            nbytes=self.nbytes,
            layout=self.meta["layout"],
            shape=tuple(self.meta["shape"]) if self.meta["shape"] else None,
            skipped=[self._skipped(index, record) for index, record in sorted(self._failures.items())],
            copied=self._shared is not None and self._shared.made,
        )

    # -- opening ---------------------------------------------------------------------------------

    def _open_or_build(
        self, inputs: InputStats, *, rebuild: bool, verify: bool, num_threads: int | None, progress: bool
    ) -> tuple[bool, str | None]:
        with cache_lock(self.path, exclusive=False):
            found = self._inspect(inputs, verify)
            if not isinstance(found, CacheProblem):
                self._attach(*found, inputs)
                return False, None
        if found.kind != "missing" and not rebuild:
            raise found.error(self.path)
        with contextlib.ExitStack() as locked:
            try:
                locked.enter_context(cache_lock(self.path, exclusive=True))
            except CacheError as exc:
                raise CacheError(f"{found.message}, and it cannot be built: {exc}") from exc
            found = self._inspect(inputs, verify)  # another process may have built it meanwhile
            if not isinstance(found, CacheProblem):
                self._attach(*found, inputs)
                return False, None
            if found.kind != "missing":
                if not rebuild:
                    raise found.error(self.path)
                warnings.warn(f"{found.message}; rebuilding", stacklevel=3)
            staging = new_staging_folder(self.path)
            try:
                meta = build_cache(
                    staging,
                    self.source,
                    cache_path=self.path,
                    settings=self._settings,
                    inputs=inputs,
                    max_side=self.max_side,
                    num_threads=num_threads,
                    progress=progress,
                )
                replace_folder(staging, self.path)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self._attach(meta, ImageStore.open(self.path, meta), inputs)
        return True, found.message

    def _inspect(self, inputs: InputStats, full: bool) -> CacheProblem | tuple[dict[str, Any], ImageStore]:
        return inspect_cache(self.path, self._settings, inputs, root=self.source.root, full=full)

    def _attach(self, meta: dict[str, Any], store: ImageStore, inputs: InputStats) -> None:
        """Start reading the cache described by ``meta`` (in the node's shared-memory copy if asked)."""
        self.meta = meta
        self._folder = self.path
        if self.location == "memory":
            images = {name: meta["files"][name] for name in self._image_files}
            self._shared = SharedCopy(
                self.path,
                [*self._image_files, META_FILE],
                content_key(self._settings, inputs, images),
                budget=self.memory_budget,
            )
            self._folder = self._shared.folder
            store = ImageStore.open(self._folder, meta)
        self._store: ImageStore | None = store

    @property
    def _image_files(self) -> list[str]:
        return [name for name in self.meta["files"] if name != INPUTS_FILE]

    def _opened(self) -> ImageStore:
        """The memory maps, made again after unpickling (in a DataLoader worker)."""
        store = self._store
        if store is None:
            store = self._store = self._reopen()
        return store

    def _reopen(self) -> ImageStore:
        try:
            return map_again(self.path, self._folder, self.meta["build_id"], self._image_files)
        except CorruptCacheError as exc:
            raise CorruptCacheError(f"{exc}; open the DecodedCache again to rebuild it") from exc

    # -- reading ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: int) -> dict[str, Any] | Skipped:
        index, key = self._resolve(key)
        return self._get(index, key, None, None)

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any] | Skipped]:
        """Load a batch: one gather from the cache, images written into one batch buffer."""
        return self.getitems_into(keys, self.source.batch_slots(len(keys)))

    @property
    def stage_clock(self) -> StageClock | None:
        """The source dataset's stage clock (a LoaderProfiler attaches one); cache reads count as read."""
        return self.source.stage_clock

    @stage_clock.setter
    def stage_clock(self, clock: StageClock | None) -> None:
        self.source.stage_clock = clock

    def getitems_into(self, keys: Sequence[int], slots: BatchSlots) -> list[dict[str, Any] | Skipped]:
        """``__getitems__`` into the given batch slots (the thread Loader's reused buffers)."""
        clock = self.source.stage_clock
        began = time.perf_counter()
        resolved = [self._resolve(key) for key in keys]
        slots.generators = self.source.batch_generators([key for _, key in resolved])
        cached = [index for index, _ in resolved if index not in self._failures]
        store = self._opened()
        # A transform that only reads gets views of the memory map; anything else a private copy.
        if leaves_input_intact(self.source.transform):
            images = iter([store.view(index) for index in cached])
        else:
            images = iter(store.read_many(cached))
        if clock is not None:
            clock.add("read", time.perf_counter() - began)
        return [
            self._get(index, key, (slots, position), None if index in self._failures else next(images))
            for position, (index, key) in enumerate(resolved)
        ]

    def _resolve(self, key: int) -> tuple[int, int]:
        key = self.source.checked_key(key)
        return int(key), key

    def _get(
        self, index: int, key: int, slot: Slot | None, image: np.ndarray | None
    ) -> dict[str, Any] | Skipped:
        record = self._failures.get(index)
        if record is not None:
            return self._replay(index, record)
        if image is None:
            image = self._opened().read(index)
        source = self.source
        return source.under_policy(
            index, source.index.paths[index], lambda: source.load_sample(index, key, slot, image)
        )

    def _replay(self, index: int, record: dict[str, Any]) -> Skipped:
        """A sample that failed at build time fails again, under the dataset's fault policy."""
        policy = self.source.policy
        if (policy.after_retries if policy.on_error == "retry" else policy.on_error) == "skip":
            return self._skipped(index, record)
        raise SampleError(
            index,
            record["path"],
            f"{record['error']}: {record['reason']} (recorded when cache {self.path!r} was built)",
        )

    def _skipped(self, index: int, record: dict[str, Any]) -> Skipped:
        return Skipped(
            index,
            record["path"],
            record["error"],
            record["reason"],
            int(record["attempts"]),
            self.source.fault_name,
        )

    # -- the rest --------------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of image data the cache holds (what ``location="memory"`` puts in shared memory)."""
        return sum(int(self.meta["files"][name]["size"]) for name in self._image_files)

    @property
    def targets(self) -> np.ndarray:
        """The dataset's labels (for samplers such as :class:`torchloom.BalancedSampler`)."""
        targets: np.ndarray = self.source.index.labels
        return targets

    def verify(self) -> None:
        """Read every byte the cache reads and compare its checksum with the one taken at build time.

        Raises :class:`CorruptCacheError` naming each file that differs.
        """
        problems = []
        for name in self._image_files + ([INPUTS_FILE] if self._folder == self.path else []):
            why = file_problem(os.path.join(self._folder, name), self.meta["files"][name], full=True)
            if why is not None:
                problems.append(f"{name} is {why}")
        if problems:
            raise CorruptCacheError(
                f"cache {self._folder!r}: {'; '.join(problems)}; rebuild it with "
                "DecodedCache(..., verify=True), which rebuilds a cache that fails verification"
            )

    def close(self) -> None:
        """Drop the memory maps and remove a shared-memory copy this process made."""
        self._store = None
        if self._shared is not None:
            self._shared.close()
            self._shared = None

    def __enter__(self) -> DecodedCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None  # workers map the files again; the owner alone removes shared memory
        state["_shared"] = None
        return state

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.meta["shape"])) if self.meta["shape"] else "mixed shapes"
        return (
            f"DecodedCache({self.path!r}, {len(self)} samples, {self.meta['layout']} {shape}, "
            f"{self.location}, of {self.source!r})"
        )


def _image_field(dataset: CacheableDataset, fields: Sequence[str]) -> str:
    """The name of ``dataset``'s image field, checked against ``fields``."""
    name = dataset.image_field  # "image", unless a ManifestDataset's Image field has another name=
    if name is None or not len(dataset.index.paths):
        raise ConfigError(f"{dataset!r} has no image field: there is nothing to decode and cache")
    if isinstance(fields, str) or tuple(fields) != (name,):
        raise ConfigError(
            f"fields={fields!r}: DecodedCache caches the dataset's image field, {name!r} (other fields are "
            f"read from the dataset's index, already in memory); pass fields=({name!r},)"
        )
    return str(name)
