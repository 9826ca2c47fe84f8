"""torchloom: messy, multi-source data into fast, correct PyTorch batches.

The core API, below, is what most training scripts need: the datasets of image folders,
manifests and tables, the image transforms, collate and its padding rules, the samplers, the
thread Loader, the decoded cache, the fault policy and the base errors. Each subpackage holds the
rest of its concern: :mod:`torchloom.io` (readers: ENVI and HDF5 cubes, video, volumes, tables),
:mod:`torchloom.datasets` (hyperspectral, video, volume and window datasets, the sample index),
:mod:`torchloom.transforms`, :mod:`torchloom.collation` (the rules :class:`Collate` applies),
:mod:`torchloom.samplers`, :mod:`torchloom.fusion` (joins and time alignment),
:mod:`torchloom.streaming`, :mod:`torchloom.cache`, :mod:`torchloom.loader`,
:mod:`torchloom.resume`, :mod:`torchloom.tools` (doctor, prepare, show, bench, demo),
:mod:`torchloom.testing` (synthetic data), :mod:`torchloom.faults`, :mod:`torchloom.seeding`
and :mod:`torchloom.errors` (every error type).

Example:
    >>> import torchloom
    >>> "FolderDataset" in torchloom.__all__ and len(torchloom.__all__) <= 40
    True
"""

from torchloom.cache import DecodedCache
from torchloom.collation import Collate, PadImages, PadSequences, collate
from torchloom.datasets import (
    FolderDataset,
    Image,
    Label,
    ManifestDataset,
    MixedDataset,
    Numeric,
    TableDataset,
    Text,
)
from torchloom.errors import ConfigError, DataError, SampleError, TorchloomError
from torchloom.faults import FaultPolicy, FaultReport, Skipped
from torchloom.io import read_image
from torchloom.loader import Loader, LoaderProfiler, tune
from torchloom.resume import ResumeReport, check_resume
from torchloom.samplers import BalancedSampler, IndexSampler, MixtureSampler, WeightedSampler
from torchloom.seeding import SampleKey, sample_rng
from torchloom.streaming import StreamDataset
from torchloom.transforms import CenterCrop, Compose, HorizontalFlip, Normalize, RandomResizedCrop, Resize

#: The installed torchloom's version (the one place it is written; pyproject.toml reads it).
__version__ = "0.1.0"

__all__ = [
    "BalancedSampler",
    "CenterCrop",
    "Collate",
    "Compose",
    "ConfigError",
    "DataError",
    "DecodedCache",
    "FaultPolicy",
    "FaultReport",
    "FolderDataset",
    "HorizontalFlip",
    "Image",
    "IndexSampler",
    "Label",
    "Loader",
    "LoaderProfiler",
    "ManifestDataset",
    "MixedDataset",
    "MixtureSampler",
    "Normalize",
    "Numeric",
    "PadImages",
    "PadSequences",
    "RandomResizedCrop",
    "Resize",
    "ResumeReport",
    "SampleError",
    "SampleKey",
    "Skipped",
    "StreamDataset",
    "TableDataset",
    "Text",
    "TorchloomError",
    "WeightedSampler",
    "__version__",
    "check_resume",
    "collate",
    "read_image",
    "sample_rng",
    "tune",
]
