"""torchloom: messy, multi-source data into fast, correct PyTorch batches.

Example:
    >>> import torchloom
    >>> "FolderDataset" in torchloom.__all__
    True
"""

from torchloom.collate import CollateError, collate
from torchloom.datasets import FolderDataset, Image, Label, ManifestDataset, Numeric, Text
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
from torchloom.index import DatasetReport, SampleIndex, StringColumn
from torchloom.io import read_image, read_table
from torchloom.seeding import SampleKey, sample_rng
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
    "CenterCrop",
    "CollateError",
    "Compose",
    "DatasetReport",
    "DecodeError",
    "EmptyDatasetError",
    "FaultPolicy",
    "FaultReport",
    "FolderDataset",
    "HorizontalFlip",
    "Image",
    "Label",
    "Lambda",
    "ManifestDataset",
    "ManifestError",
    "Normalize",
    "Numeric",
    "PathOutsideRootError",
    "RandomResizedCrop",
    "Resize",
    "SampleError",
    "SampleIndex",
    "SampleKey",
    "Skipped",
    "StringColumn",
    "Text",
    "ToTensor",
    "TorchloomError",
    "TransformError",
    "ValidationFailedError",
    "__version__",
    "collate",
    "read_image",
    "read_table",
    "sample_rng",
]
