"""Readers, one format each, over one file layer (:mod:`torchloom.io.files`): local files, and
objects in a store (:class:`ObjectStore`) for URLs."""

from torchloom._buffers.pool import ScratchArrays
from torchloom.errors import (
    DecodeError,
    HeaderError,
    MissingFileError,
    ObjectChangedError,
    UnreadableFileError,
    UnsafeFileError,
    UnsupportedURLError,
)
from torchloom.io.cube import ArrayCube, CubeSource
from torchloom.io.envi import EnviCube, open_envi, read_header, write_envi
from torchloom.io.envi_header import EnviHeader
from torchloom.io.files import FileBackend, FileInfo, LocalFiles, file_info, open_file, read_bytes, read_range
from torchloom.io.hdf5 import Hdf5Cube, read_hdf5_array
from torchloom.io.image import DEFAULT_MAX_PIXELS, ImageHeader, decode_image, probe_image, read_image
from torchloom.io.object_cache import ObjectCache
from torchloom.io.objects import ObjectRoot, ObjectStore
from torchloom.io.store_requests import Fetched, StoreStats
from torchloom.io.table import read_table
from torchloom.io.video import VideoClip, VideoHeader, probe_video, read_frame_numbers, read_frames
from torchloom.io.video_orientation import DisplayOrientation
from torchloom.io.video_writer import write_video
from torchloom.io.volume import VolumeHeader, probe_volume, read_volume

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "ArrayCube",
    "CubeSource",
    "DecodeError",
    "DisplayOrientation",
    "EnviCube",
    "EnviHeader",
    "Fetched",
    "FileBackend",
    "FileInfo",
    "Hdf5Cube",
    "HeaderError",
    "ImageHeader",
    "LocalFiles",
    "MissingFileError",
    "ObjectCache",
    "ObjectChangedError",
    "ObjectRoot",
    "ObjectStore",
    "ScratchArrays",
    "StoreStats",
    "UnreadableFileError",
    "UnsafeFileError",
    "UnsupportedURLError",
    "VideoClip",
    "VideoHeader",
    "VolumeHeader",
    "decode_image",
    "file_info",
    "open_envi",
    "open_file",
    "probe_image",
    "probe_video",
    "probe_volume",
    "read_bytes",
    "read_frame_numbers",
    "read_frames",
    "read_hdf5_array",
    "read_header",
    "read_image",
    "read_range",
    "read_table",
    "read_volume",
    "write_envi",
    "write_video",
]
