"""What the thread Loader and DecodedCache need of a dataset.

A :class:`torchloom.Loader` reads any map-style dataset: ``len(dataset)`` and ``dataset[key]``, as a
DataLoader does. It uses three optional capabilities when the dataset has them, checked once when the
Loader is built: :class:`FetchesInto` (a batch written into the Loader's reused batch buffers),
:class:`FetchesBatches` (a batch at once, as DataLoader calls it) and
:class:`~torchloom.resume.epochs.SetsEpoch` (the epoch, passed on by ``Loader.set_epoch``).

A :class:`torchloom.cache.DecodedCache` reads a :class:`CacheableDataset`: one backed by a sample index
of image paths, whose decoding the cache can repeat and whose samples it can build around an image
read from the cache. torchloom's indexed datasets (:class:`~torchloom.datasets.FolderDataset`,
:class:`~torchloom.datasets.ManifestDataset`, ...) declare all of these, so mypy checks that they keep
them.

Example:
    >>> import pyarrow as pa, tempfile
    >>> from torchloom import FolderDataset
    >>> from torchloom.datasets import CacheableDataset, FetchesBatches, FetchesInto, TableDataset
    >>> from torchloom.testing import write_class_folders
    >>> table = TableDataset(pa.table({"x": [1, 2]}))  # a plain map-style dataset
    >>> isinstance(table, FetchesBatches), isinstance(table, CacheableDataset)
    (False, False)
    >>> root = tempfile.mkdtemp()
    >>> _ = write_class_folders(root, [1], size=(8, 8), progress=False)
    >>> folder = FolderDataset(root, progress=False)
    >>> isinstance(folder, FetchesInto), isinstance(folder, CacheableDataset)
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from torchloom._buffers.slots import BatchSlots
from torchloom.datasets.index import SampleIndex
from torchloom.faults import FaultPolicy, Skipped
from torchloom.io.files import Inside
from torchloom.timing import StageClock
from torchloom.transforms.base import Transform

#: Where a sample's image may be written: a batch's slots and the sample's position in it.
Slot = tuple[BatchSlots, int]


@runtime_checkable
class FetchesBatches(Protocol):
    """Loads a batch of samples at once (``DataLoader`` calls it with each batch's keys).

    Example:
        >>> from torchloom.datasets import FetchesBatches
        >>> class Squares:
        ...     def __len__(self):
        ...         return 4
        ...     def __getitem__(self, key):
        ...         return key * key
        ...     def __getitems__(self, keys):
        ...         return [key * key for key in keys]
        >>> isinstance(Squares(), FetchesBatches), Squares().__getitems__([1, 3])
        (True, [1, 9])
    """

    def __getitems__(self, keys: Sequence[int]) -> list[Any]: ...


@runtime_checkable
class FetchesInto(Protocol):
    """Loads a batch of samples, writing their images into the given batch slots (the Loader's
    reused buffers).

    Example:
        >>> import pyarrow as pa
        >>> from torchloom.datasets import FetchesInto, TableDataset
        >>> class Indices:
        ...     def getitems_into(self, keys, slots):
        ...         return [{"index": key} for key in keys]  # a real one writes images into slots
        >>> isinstance(Indices(), FetchesInto), isinstance(TableDataset(pa.table({"x": [1]})), FetchesInto)
        (True, False)
    """

    def getitems_into(self, keys: Sequence[int], slots: BatchSlots) -> list[Any]: ...


@runtime_checkable
class CacheableDataset(Protocol):
    """What :class:`~torchloom.cache.DecodedCache` reads of the dataset it caches.

    Building the cache decodes every ``index.paths`` entry as the dataset would (``read_file``,
    ``max_pixels``, ``exif_orientation``, inside ``read_root``); reading builds each sample with
    ``load_sample`` around the cached image, under the dataset's fault policy (``under_policy``), with
    the dataset's keys, generators, batch buffers and stage clock.

    Example:
        >>> import tempfile
        >>> from torchloom import FolderDataset
        >>> from torchloom.datasets import CacheableDataset
        >>> from torchloom.testing import write_class_folders
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = write_class_folders(root, [2], size=(8, 8), progress=False)
        ...     dataset = FolderDataset(root, progress=False)
        ...     print(isinstance(dataset, CacheableDataset), dataset.image_field, len(dataset.index))
        True image 2
    """

    index: SampleIndex
    #: The name of the sample's image field (``None``: the dataset has no image to cache).
    image_field: str | None
    #: The folder the dataset's paths are relative to (messages name paths relative to it), or None.
    root: str | None
    read_root: Inside
    max_pixels: int
    exif_orientation: bool
    transform: Transform | None
    policy: FaultPolicy
    stage_clock: StageClock | None

    @property
    def fault_name(self) -> str: ...

    def __len__(self) -> int: ...

    def read_file(self, path: str) -> bytes: ...

    def checked_key(self, key: int) -> int: ...

    def batch_slots(self, count: int) -> BatchSlots: ...

    def batch_generators(self, keys: Sequence[int]) -> list[np.random.Generator | None] | None: ...

    def load_sample(self, index: int, key: int, slot: Slot | None, image: np.ndarray) -> dict[str, Any]: ...

    def under_policy(
        self, index: int, path: str | None, load: Callable[[], dict[str, Any]]
    ) -> dict[str, Any] | Skipped: ...
