"""Map-style datasets over real layouts, the fields of a manifest, and the sample index.

Which datasets take which options (:mod:`torchloom.datasets.options`): those that decode each
sample from files take the :class:`SampleOptions` (``transform``, ``on_error``, ``seed``,
``debug``); those that also index files found in a folder or named by a manifest take the
:class:`IndexingOptions` too (all but :class:`HyperspectralDataset`). Datasets made from other
datasets or from values in memory (:class:`TableDataset`, :class:`MixedDataset`,
:class:`WindowDataset`) take neither: their samples come from their sources, whose options apply.
"""

from torchloom._buffers.slots import BatchSlots
from torchloom.datasets.contract import CacheableDataset, FetchesBatches, FetchesInto, Slot
from torchloom.datasets.discovery import (
    IMAGE_EXTENSIONS,
    METADATA_FOLDERS,
    REASON_BESIDE_SPLITS,
    REASON_EXTENSION,
    REASON_HIDDEN,
    REASON_LOOP,
    REASON_METADATA,
    REASON_MISSING_FOLDER,
    REASON_NOT_IN_CLASS,
    REASON_OUTSIDE_ROOT,
    REASON_UNLISTABLE,
    SPLIT_NAMES,
    Discovery,
    Exclusion,
    find_every_split,
    find_samples,
    find_tree,
)
from torchloom.datasets.fields import CompiledField, Field, FieldContext, Image, JoinKey, Label, Numeric, Text
from torchloom.datasets.folder import FolderDataset
from torchloom.datasets.hyperspectral import HyperspectralDataset, open_cube
from torchloom.datasets.index import DatasetReport, SampleIndex, StringColumn
from torchloom.datasets.listing import ObjectEntry, PrefixListing
from torchloom.datasets.manifest import ManifestDataset
from torchloom.datasets.mixed import MixedDataset
from torchloom.datasets.options import IndexingOptions, SampleOptions
from torchloom.datasets.sources import Manifest
from torchloom.datasets.spatial_split import spatial_block_split
from torchloom.datasets.table import TableDataset
from torchloom.datasets.video import VIDEO_EXTENSIONS, VideoClipDataset
from torchloom.datasets.volume import VOLUME_EXTENSIONS, VolumeDataset
from torchloom.datasets.walk import FolderEntry
from torchloom.datasets.window import WindowDataset
from torchloom.errors import (
    EmptyDatasetError,
    FieldNotFoundError,
    ManifestError,
    PathOutsideRootError,
    SampleIndexError,
    ValidationFailedError,
)

__all__ = [
    "IMAGE_EXTENSIONS",
    "METADATA_FOLDERS",
    "REASON_BESIDE_SPLITS",
    "REASON_EXTENSION",
    "REASON_HIDDEN",
    "REASON_LOOP",
    "REASON_METADATA",
    "REASON_MISSING_FOLDER",
    "REASON_NOT_IN_CLASS",
    "REASON_OUTSIDE_ROOT",
    "REASON_UNLISTABLE",
    "SPLIT_NAMES",
    "VIDEO_EXTENSIONS",
    "VOLUME_EXTENSIONS",
    "BatchSlots",
    "CacheableDataset",
    "CompiledField",
    "DatasetReport",
    "Discovery",
    "EmptyDatasetError",
    "Exclusion",
    "FetchesBatches",
    "FetchesInto",
    "Field",
    "FieldContext",
    "FieldNotFoundError",
    "FolderDataset",
    "FolderEntry",
    "HyperspectralDataset",
    "Image",
    "IndexingOptions",
    "JoinKey",
    "Label",
    "Manifest",
    "ManifestDataset",
    "ManifestError",
    "MixedDataset",
    "Numeric",
    "ObjectEntry",
    "PathOutsideRootError",
    "PrefixListing",
    "SampleIndex",
    "SampleIndexError",
    "SampleOptions",
    "Slot",
    "StringColumn",
    "TableDataset",
    "Text",
    "ValidationFailedError",
    "VideoClipDataset",
    "VolumeDataset",
    "WindowDataset",
    "find_every_split",
    "find_samples",
    "find_tree",
    "open_cube",
    "spatial_block_split",
]
