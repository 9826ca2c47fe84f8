"""Map-style datasets over real layouts."""

from torchloom.datasets.fields import Image, Label, Numeric, Text
from torchloom.datasets.folder import IMAGE_EXTENSIONS, FolderDataset
from torchloom.datasets.manifest import ManifestDataset

__all__ = ["IMAGE_EXTENSIONS", "FolderDataset", "Image", "Label", "ManifestDataset", "Numeric", "Text"]
