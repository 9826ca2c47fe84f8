"""Map-style datasets over real layouts."""

from torchloom.datasets.contract import CacheableDataset, FetchesBatches, FetchesInto
from torchloom.datasets.discovery import IMAGE_EXTENSIONS, Discovery, find_samples
from torchloom.datasets.fields import Image, JoinKey, Label, Numeric, Text
from torchloom.datasets.folder import FolderDataset
from torchloom.datasets.hyperspectral import HyperspectralDataset, open_cube
from torchloom.datasets.index import DatasetReport, SampleIndex, StringColumn
from torchloom.datasets.manifest import ManifestDataset
from torchloom.datasets.mixed import MixedDataset
from torchloom.datasets.options import IndexingOptions, SampleOptions
from torchloom.datasets.sources import Manifest
from torchloom.datasets.spatial_split import spatial_block_split
from torchloom.datasets.table import TableDataset
from torchloom.datasets.video import VIDEO_EXTENSIONS, VideoClipDataset
from torchloom.datasets.volume import VOLUME_EXTENSIONS, VolumeDataset
from torchloom.datasets.window import WindowDataset, WindowIndex

__all__ = [
    "IMAGE_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "VOLUME_EXTENSIONS",
    "CacheableDataset",
    "DatasetReport",
    "Discovery",
    "FetchesBatches",
    "FetchesInto",
    "FolderDataset",
    "HyperspectralDataset",
    "Image",
    "IndexingOptions",
    "JoinKey",
    "Label",
    "Manifest",
    "ManifestDataset",
    "MixedDataset",
    "Numeric",
    "SampleIndex",
    "SampleOptions",
    "StringColumn",
    "TableDataset",
    "Text",
    "VideoClipDataset",
    "VolumeDataset",
    "WindowDataset",
    "WindowIndex",
    "find_samples",
    "open_cube",
    "spatial_block_split",
]
