"""torchloom: messy, multi-source data into fast, correct PyTorch batches.

The core API, below, is what most training scripts need. Each subpackage holds the rest of its
concern: :mod:`torchloom.io` (readers: ENVI and HDF5 cubes, video, volumes, tables),
:mod:`torchloom.datasets` (hyperspectral, video and volume datasets, the sample index),
:mod:`torchloom.transforms`, :mod:`torchloom.collate`, :mod:`torchloom.samplers`,
:mod:`torchloom.fusion` (joins and time alignment), :mod:`torchloom.streaming`,
:mod:`torchloom.cache`, :mod:`torchloom.loader`, :mod:`torchloom.resume`,
:mod:`torchloom.tools` (doctor, prepare, show, bench, demo) and :mod:`torchloom.errors` (every
error type).

Example:
    >>> import torchloom
    >>> "FolderDataset" in torchloom.__all__ and len(torchloom.__all__) <= 40
    True
"""

from torchloom.cache import DecodedCache, LRUCache
from torchloom.collate import AsList, Collate, PadImages, PadSequences, Stack, collate
from torchloom.datasets import (
    FolderDataset,
    Image,
    Label,
    ManifestDataset,
    MixedDataset,
    Numeric,
    TableDataset,
    Text,
    WindowDataset,
)
from torchloom.errors import ConfigError, DataError, SampleError, TorchloomError
from torchloom.faults import FaultPolicy, FaultReport, Skipped
from torchloom.io import read_image
from torchloom.loader import Loader, LoaderProfiler, tune
from torchloom.samplers import BalancedSampler, IndexSampler, MixtureSampler, WeightedSampler, WindowSampler
from torchloom.seeding import SampleKey, sample_rng
from torchloom.streaming import StreamDataset

#: The installed torchloom's version (the one place it is written; pyproject.toml reads it).
__version__ = "0.1.0"

__all__ = [
    "AsList",
    "BalancedSampler",
    "Collate",
    "ConfigError",
    "DataError",
    "DecodedCache",
    "FaultPolicy",
    "FaultReport",
    "FolderDataset",
    "Image",
    "IndexSampler",
    "LRUCache",
    "Label",
    "Loader",
    "LoaderProfiler",
    "ManifestDataset",
    "MixedDataset",
    "MixtureSampler",
    "Numeric",
    "PadImages",
    "PadSequences",
    "SampleError",
    "SampleKey",
    "Skipped",
    "Stack",
    "StreamDataset",
    "TableDataset",
    "Text",
    "TorchloomError",
    "WeightedSampler",
    "WindowDataset",
    "WindowSampler",
    "__version__",
    "collate",
    "read_image",
    "sample_rng",
    "tune",
]
