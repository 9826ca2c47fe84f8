"""torchloom: messy, multi-source data into fast, correct PyTorch batches.

Example:
    >>> import torchloom
    >>> "FolderDataset" in torchloom.__all__
    True
"""

from torchloom.cache import CacheReport, DecodedCache, LRUCache
from torchloom.collate import (
    AsList,
    Collate,
    CollateError,
    CropOrPadVolumes,
    PadImages,
    PadSequences,
    Stack,
    collate,
)
from torchloom.datasets import (
    FolderDataset,
    Image,
    Key,
    Label,
    ManifestDataset,
    MixedDataset,
    Numeric,
    TableDataset,
    Text,
    WindowDataset,
)
from torchloom.diagnose.doctor import DoctorReport, diagnose
from torchloom.errors import (
    DecodeError,
    EmptyDatasetError,
    ManifestError,
    PathOutsideRootError,
    SampleError,
    TorchloomError,
    ValidationFailedError,
)
from torchloom.faults import FaultPolicy, FaultReport, Skipped
from torchloom.fusion import (
    JoinedDataset,
    JoinError,
    JoinReport,
    SyncedRecordings,
    SyncReport,
    TimestampError,
    TimeSync,
)
from torchloom.index import DatasetReport, SampleIndex, StringColumn
from torchloom.io import read_image, read_table
from torchloom.loader import Loader, LoaderProfiler, ProfileReport, TuneResult, tune
from torchloom.samplers import (
    BalancedSampler,
    BatchKeySampler,
    IndexSampler,
    MixtureSampler,
    WeightedSampler,
    WindowSampler,
)
from torchloom.seeding import SampleKey, sample_rng
from torchloom.state import StateMismatchError
from torchloom.streaming import StreamDataset
from torchloom.transforms import (
    CenterCrop,
    Compose,
    HorizontalFlip,
    Lambda,
    Normalize,
    RandomResizedCrop,
    Resize,
    ToTensor,
    TransformError,
)

__version__ = "0.1.0"

__all__ = [
    "AsList",
    "BalancedSampler",
    "BatchKeySampler",
    "CacheReport",
    "CenterCrop",
    "Collate",
    "CollateError",
    "Compose",
    "CropOrPadVolumes",
    "DatasetReport",
    "DecodeError",
    "DecodedCache",
    "DoctorReport",
    "EmptyDatasetError",
    "FaultPolicy",
    "FaultReport",
    "FolderDataset",
    "HorizontalFlip",
    "Image",
    "IndexSampler",
    "JoinError",
    "JoinReport",
    "JoinedDataset",
    "Key",
    "LRUCache",
    "Label",
    "Lambda",
    "Loader",
    "LoaderProfiler",
    "ManifestDataset",
    "ManifestError",
    "MixedDataset",
    "MixtureSampler",
    "Normalize",
    "Numeric",
    "PadImages",
    "PadSequences",
    "PathOutsideRootError",
    "ProfileReport",
    "RandomResizedCrop",
    "Resize",
    "SampleError",
    "SampleIndex",
    "SampleKey",
    "Skipped",
    "Stack",
    "StateMismatchError",
    "StreamDataset",
    "StringColumn",
    "SyncReport",
    "SyncedRecordings",
    "TableDataset",
    "Text",
    "TimeSync",
    "TimestampError",
    "ToTensor",
    "TorchloomError",
    "TransformError",
    "TuneResult",
    "ValidationFailedError",
    "WeightedSampler",
    "WindowDataset",
    "WindowSampler",
    "__version__",
    "collate",
    "diagnose",
    "read_image",
    "read_table",
    "sample_rng",
    "tune",
]
