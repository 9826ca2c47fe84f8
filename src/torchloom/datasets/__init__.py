"""Map-style datasets over real layouts."""

from torchloom.datasets.fields import Image, Key, Label, Numeric, Text
from torchloom.datasets.folder import IMAGE_EXTENSIONS, FolderDataset
from torchloom.datasets.manifest import ManifestDataset

__all__ = ["IMAGE_EXTENSIONS", "FolderDataset", "Image", "Key", "Label", "ManifestDataset", "Numeric", "Text"]
