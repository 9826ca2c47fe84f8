"""Readers, one format each."""

from torchloom.io.image import DEFAULT_MAX_PIXELS, ImageHeader, decode_image, probe_image, read_image
from torchloom.io.table import read_table

__all__ = ["DEFAULT_MAX_PIXELS", "ImageHeader", "decode_image", "probe_image", "read_image", "read_table"]
