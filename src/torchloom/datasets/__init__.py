"""Map-style datasets over real layouts."""

from torchloom.datasets.fields import Image, Key, Label, Numeric, Text
from torchloom.datasets.folder import IMAGE_EXTENSIONS, FolderDataset
from torchloom.datasets.manifest import ManifestDataset
from torchloom.datasets.mixed import MixedDataset
from torchloom.datasets.table import TableDataset
from torchloom.datasets.window import WindowDataset, WindowIndex

__all__ = [
    "IMAGE_EXTENSIONS",
    "FolderDataset",
    "Image",
    "Key",
    "Label",
    "ManifestDataset",
    "MixedDataset",
    "Numeric",
    "TableDataset",
    "Text",
    "WindowDataset",
    "WindowIndex",
]
