"""Read images into RGB ``uint8`` HWC arrays.

JPEG goes through simplejpeg (libjpeg-turbo), decoding at 1/2, 1/4 or 1/8 scale when
``min_size`` allows it; PNG, BMP, TIFF, WebP and GIF go through Pillow. Grayscale, palette,
CMYK, 16-bit and alpha images are converted the same way whatever their format: alpha is
dropped, 16-bit values keep their high byte, grayscale is repeated over three channels.
EXIF orientation is applied (``exif_orientation=True``, the default), so an image reads as any
viewer shows it; headers report the displayed size, so crop planning and DCT-scaled decoding agree
with it. ``exif_orientation=False`` returns the stored pixel order.

Example:
    >>> import numpy as np, simplejpeg, tempfile, os
    >>> from torchloom import read_image
    >>> path = os.path.join(tempfile.mkdtemp(), "x.jpg")
    >>> _ = open(path, "wb").write(simplejpeg.encode_jpeg(np.zeros((64, 48, 3), np.uint8)))
    >>> read_image(path).shape
    (64, 48, 3)
    >>> read_image(path, min_size=12).shape
    (16, 12, 3)
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from io import BytesIO

import numpy as np
import simplejpeg
from PIL import Image, UnidentifiedImageError

from torchloom._buffers.pool import ScratchArrays
from torchloom.errors import DecodeError
from torchloom.io.files import Inside, open_file, read_bytes, read_range
from torchloom.io.orientation import (
    ORIENTATION_TAG,
    jpeg_orientation,
    oriented_size,
    png_orientation,
    stored_size,
)
from torchloom.io.orientation import orient as orient_array

#: Pillow's own warning threshold: larger images are refused as possible decompression bombs.
DEFAULT_MAX_PIXELS = 178_956_970

JPEG_MAGIC = b"\xff\xd8\xff"
PILLOW_FORMATS = ("PNG", "BMP", "TIFF", "WEBP", "GIF", "JPEG", "PPM")
# Power-of-two DCT scales only: libjpeg-turbo's n/8 scales between 1/2 and 1 decode slower.
JPEG_SCALE_DENOMINATORS = (8, 4, 2)
_SIXTEEN_BIT_MODES = {"I;16", "I;16B", "I;16L", "I;16N", "I"}

SizeLike = int | tuple[int, int]

#: Image formats in an ISO media container (what phones save), known by the container's brand:
#: recognised and named, not decoded.
CONTAINER_BRANDS = {
    **dict.fromkeys((b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"), "HEIC"),
    **dict.fromkeys((b"avif", b"avis"), "AVIF"),
}
#: The extensions each container format goes by.
CONTAINER_EXTENSIONS = {"HEIC": (".heic", ".heif", ".hif"), "AVIF": (".avif",)}


def container_format(data: bytes) -> str | None:
    """``"HEIC"`` or ``"AVIF"`` for the bytes of an image in an ISO media container (its ``ftyp``
    box's major brand, or one of its compatible brands), else ``None``.

    Example:
        >>> container_format(b"\\x00\\x00\\x00\\x18ftypheic\\x00\\x00\\x00\\x00mif1heic")
        'HEIC'
        >>> container_format(b"GIF89a") is None
        True
    """
    if data[4:8] != b"ftyp":
        return None
    size = int.from_bytes(data[:4], "big")
    brands = [data[8:12]] + [data[i : i + 4] for i in range(16, min(size, len(data), 64), 4)]
    return next((CONTAINER_BRANDS[brand] for brand in brands if brand in CONTAINER_BRANDS), None)


@dataclass(frozen=True)
class ImageHeader:
    """What an image file declares about itself, read without decoding pixels.

    Example:
        >>> import numpy as np, simplejpeg
        >>> from torchloom.io import probe_image
        >>> header = probe_image(simplejpeg.encode_jpeg(np.zeros((40, 30, 3), np.uint8)), "x.jpg")
        >>> header.height, header.width, header.format, header.pixels
        (40, 30, 'JPEG', 1200)
    """

    height: int
    width: int
    format: str
    #: EXIF orientation (1..8) already reflected in ``height`` and ``width`` (1: as stored).
    orientation: int = 1

    @property
    def pixels(self) -> int:
        return self.height * self.width


def max_file_bytes(max_pixels: int) -> int:
    """The largest file an image within ``max_pixels`` can plausibly be: uncompressed 16-bit RGBA
    plus room for metadata. Larger files are refused before they are read into memory.

    Example:
        >>> max_file_bytes(1_000_000) // (1 << 20)
        71
    """
    return max_pixels * 8 + (64 << 20)


#: Why a file over :func:`max_file_bytes` is refused.
IMAGE_TOO_LARGE = "larger than any image within max_pixels could be"


def read_image_bytes(
    path: str | os.PathLike[str], *, max_pixels: int = DEFAULT_MAX_PIXELS, inside: Inside = None
) -> bytes:
    """An image file's encoded bytes, read through the file layer (regular files only, inside
    ``inside`` when given); a file larger than any image within ``max_pixels`` is refused unread.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.jpg")
        >>> _ = open(path, "wb").write(b"\\xff\\xd8\\xff")
        >>> read_image_bytes(path)
        b'\\xff\\xd8\\xff'
    """
    return read_bytes(path, inside=inside, max_bytes=max_file_bytes(max_pixels), too_large=IMAGE_TOO_LARGE)


def probe_image(
    data: bytes,
    path: str | os.PathLike[str],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    exif_orientation: bool = True,
) -> ImageHeader:
    """Read an image's displayed size and format from its header and apply the pixel-count guard.

    Example:
        >>> import numpy as np, simplejpeg
        >>> probe_image(simplejpeg.encode_jpeg(np.zeros((8, 16, 3), np.uint8)), "x.jpg")
        ImageHeader(height=8, width=16, format='JPEG', orientation=1)
    """
    if not data:
        raise DecodeError(path, "file is empty (0 bytes)")
    if data.startswith(JPEG_MAGIC):
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        except ValueError as exc:
            raise DecodeError(path, f"invalid JPEG header ({exc})") from exc
        orientation = jpeg_orientation(data) if exif_orientation else 1
        header = ImageHeader(*oriented_size(int(height), int(width), orientation), "JPEG", orientation)
    else:
        with _open_with_pillow(data, path) as image:
            orientation = _pillow_orientation(image) if exif_orientation else 1
            height, width = oriented_size(image.height, image.width, orientation)
            header = ImageHeader(height, width, str(image.format), orientation)
    _check_pixels(header, path, max_pixels)
    return header


#: The first read of a header probe; most images declare their size well within it.
HEADER_PROBE_BYTES = 64 * 1024
#: The most a header probe reads from one file (a 1 GiB non-image costs no more than this).
MAX_HEADER_BYTES = 4 * 1024 * 1024


def probe_file(
    path: str | os.PathLike[str],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    exif_orientation: bool = True,
    inside: Inside = None,
) -> ImageHeader:
    """:func:`probe_image` of a file, reading a bounded prefix: 64 KiB, then up to 4 MiB when large
    metadata (EXIF thumbnails, ICC profiles) pushes the size past the first block.

    Example:
        >>> import numpy as np, simplejpeg, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "x.jpg")
        >>> _ = open(path, "wb").write(simplejpeg.encode_jpeg(np.zeros((8, 16, 3), np.uint8)))
        >>> probe_file(path).width
        16
    """
    head = read_range(path, 0, HEADER_PROBE_BYTES, inside=inside)
    try:
        header = probe_image(head, path, max_pixels=max_pixels, exif_orientation=exif_orientation)
    except DecodeError:
        if len(head) < HEADER_PROBE_BYTES:
            raise  # the whole file was read: the header is bad
        head = read_range(path, 0, MAX_HEADER_BYTES, inside=inside)
        header = probe_image(head, path, max_pixels=max_pixels, exif_orientation=exif_orientation)
    unoriented_png = header.format == "PNG" and header.orientation == 1
    if exif_orientation and unoriented_png and len(head) >= HEADER_PROBE_BYTES:
        # Pillow finds an eXIf chunk after the pixel data only by decoding them, which a prefix
        # cannot: walk the file's chunks for it, as decoding the whole file would find it (one
        # Pillow already found in the prefix is the file's only one).
        with open_file(path, inside=inside) as handle:
            orientation = png_orientation(handle)
        if orientation != header.orientation:
            stored = stored_size(header.height, header.width, header.orientation)
            header = ImageHeader(*oriented_size(*stored, orientation), header.format, orientation)
    return header


def decode_image(
    data: bytes,
    path: str | os.PathLike[str],
    *,
    min_size: SizeLike | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    exif_orientation: bool = True,
    scratch: ScratchArrays | None = None,
    orientation: int | None = None,
) -> np.ndarray:
    """Decode encoded image bytes to an RGB ``uint8`` HWC array (upright, unless
    ``exif_orientation=False``).

    ``min_size`` (``int`` or ``(height, width)``) lets a JPEG decode at the smallest of 1/2,
    1/4 or 1/8 scale whose height and width are still at least that large; other formats always
    decode at full size. ``path`` is only used in error messages. With ``scratch``, a JPEG is
    decoded into a reused buffer of that pool (already-touched memory) instead of a new array.
    ``orientation``: the JPEG's EXIF orientation when the caller already read it (``probe_image``'s
    header), so the segments are not walked again.

    Example:
        >>> import numpy as np, simplejpeg
        >>> decode_image(simplejpeg.encode_jpeg(np.zeros((80, 80, 3), np.uint8)), "x.jpg",
        ...              min_size=(20, 10)).shape
        (20, 20, 3)
    """
    if data.startswith(JPEG_MAGIC):
        if not exif_orientation:
            orientation = 1
        elif orientation is None:
            orientation = jpeg_orientation(data)
        if min_size is not None:  # min_size is in displayed coordinates; the decoder sees stored ones
            min_size = stored_size(*_as_pair(min_size), orientation)
        return _orient(_decode_jpeg(data, path, min_size, max_pixels, scratch), orientation)
    return _decode_with_pillow(data, path, max_pixels, exif_orientation)


def read_image(
    path: str | os.PathLike[str],
    *,
    min_size: SizeLike | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    exif_orientation: bool = True,
    inside: Inside = None,
) -> np.ndarray:
    """Read an image file into an RGB ``uint8`` HWC array, upright (EXIF orientation applied
    unless ``exif_orientation=False``); ``inside``: a real folder the file must resolve into.

    Raises :class:`DecodeError` naming the file for empty, truncated, corrupt, non-image and
    oversized (more than ``max_pixels``) files; ``OSError`` for files that cannot be opened.

    Example:
        >>> import numpy as np, tempfile, os
        >>> from PIL import Image
        >>> path = os.path.join(tempfile.mkdtemp(), "gray.png")
        >>> Image.fromarray(np.full((4, 5), 7, np.uint8)).save(path)
        >>> image = read_image(path)
        >>> image.shape, image.dtype, int(image[0, 0, 2])
        ((4, 5, 3), dtype('uint8'), 7)
    """
    data = read_image_bytes(path, max_pixels=max_pixels, inside=inside)
    return decode_image(
        data, path, min_size=min_size, max_pixels=max_pixels, exif_orientation=exif_orientation
    )


def jpeg_scale_for(height: int, width: int, min_size: SizeLike | None) -> int:
    """The largest power-of-two DCT denominator (1, 2, 4 or 8) keeping ``min_size``.

    Example:
        >>> jpeg_scale_for(1080, 1920, 224), jpeg_scale_for(256, 256, 224)
        (4, 1)
    """
    if min_size is None:
        return 1
    min_height, min_width = _as_pair(min_size)
    for denominator in JPEG_SCALE_DENOMINATORS:
        if math.ceil(height / denominator) >= min_height and math.ceil(width / denominator) >= min_width:
            return denominator
    return 1


def _decode_jpeg(
    data: bytes,
    path: str | os.PathLike[str],
    min_size: SizeLike | None,
    max_pixels: int,
    scratch: ScratchArrays | None = None,
) -> np.ndarray:
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as exc:
        raise DecodeError(path, f"invalid JPEG header ({exc})") from exc
    _check_pixels(ImageHeader(int(height), int(width), "JPEG"), path, max_pixels)
    if colorspace in ("CMYK", "YCCK"):
        # libjpeg-turbo ignores Adobe's inverted-CMYK marker; Pillow handles it.
        return _decode_with_pillow(data, path, max_pixels)
    denominator = jpeg_scale_for(height, width, min_size)
    min_height, min_width = math.ceil(height / denominator), math.ceil(width / denominator)
    if scratch is not None:
        try:
            buffer = scratch.take(min_height * min_width * 3)
            return simplejpeg.decode_jpeg(
                data, colorspace="RGB", min_height=min_height, min_width=min_width, buffer=buffer
            )
        except ValueError:
            pass  # decoded again below without the buffer, for the decoder's own error message
    try:
        return simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=min_height, min_width=min_width)
    except ValueError as exc:
        raise DecodeError(path, f"corrupt or truncated JPEG ({exc})") from exc


def _decode_with_pillow(
    data: bytes, path: str | os.PathLike[str], max_pixels: int, exif_orientation: bool = True
) -> np.ndarray:
    with _open_with_pillow(data, path) as image:
        _check_pixels(ImageHeader(image.height, image.width, str(image.format)), path, max_pixels)
        orientation = _pillow_orientation(image) if exif_orientation else 1
        try:
            image.load()
        except (OSError, ValueError, SyntaxError) as exc:
            raise DecodeError(path, f"corrupt or truncated {image.format} ({exc})") from exc
        return _orient(_to_rgb_array(image, path), orientation)


def _pillow_orientation(image: Image.Image) -> int:
    try:
        value = image.getexif().get(ORIENTATION_TAG, 1)
    except (OSError, ValueError, SyntaxError, struct.error):  # a malformed EXIF block: as stored
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _orient(image: np.ndarray, orientation: int) -> np.ndarray:
    return image if orientation == 1 else orient_array(image, orientation)


def _open_with_pillow(data: bytes, path: str | os.PathLike[str]) -> Image.Image:
    try:
        return Image.open(BytesIO(data), formats=PILLOW_FORMATS)
    except Image.DecompressionBombError as exc:
        raise DecodeError(path, f"refused as a possible decompression bomb ({exc})") from exc
    except UnidentifiedImageError as exc:
        container = container_format(data)
        if container is not None:
            extension = os.path.splitext(os.fspath(path))[1]
            named = "" if extension.lower() in CONTAINER_EXTENSIONS[container] else f" named {extension}"
            raise DecodeError(
                path, f"{container} image{named}: not supported; convert it (e.g. with `heif-convert`)"
            ) from exc
        raise DecodeError(
            path, f"not a supported image (starts with {data[:8]!r}; reads {', '.join(PILLOW_FORMATS)})"
        ) from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise DecodeError(path, f"invalid image header ({exc})") from exc


def _to_rgb_array(image: Image.Image, path: str | os.PathLike[str]) -> np.ndarray:
    mode = image.mode
    if mode == "RGB":
        array = np.asarray(image)
    elif mode in _SIXTEEN_BIT_MODES:
        wide = np.asarray(image).astype(np.int64, copy=False)
        gray = (np.clip(wide, 0, 65535) >> 8).astype(np.uint8)
        array = np.repeat(gray[:, :, None], 3, axis=2)
    elif mode == "F":
        raise DecodeError(path, "floating-point (mode F) images have no standard RGB mapping")
    else:
        try:
            array = np.asarray(image.convert("RGB"))
        except ValueError as exc:
            raise DecodeError(path, f"cannot convert mode {mode} to RGB ({exc})") from exc
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array).copy()
    return array


def _check_pixels(header: ImageHeader, path: str | os.PathLike[str], max_pixels: int) -> None:
    if header.height <= 0 or header.width <= 0:
        raise DecodeError(path, f"header declares an empty image ({header.width}x{header.height})")
    if header.pixels > max_pixels:
        raise DecodeError(
            path,
            f"header declares {header.width}x{header.height} = {header.pixels:,} pixels, above "
            f"max_pixels={max_pixels:,} (decompression-bomb guard; raise max_pixels if genuine)",
        )


def _as_pair(size: SizeLike) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    height, width = size
    return int(height), int(width)
