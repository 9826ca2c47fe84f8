"""One pass over image files: read once, hash, decode (small where possible), measure.

For every file :func:`examine_files` reads the bytes once (refusing FIFOs and devices, and files
resolving outside ``inside``), hashes them (BLAKE2b, 128 bits), checks the extension against the
format the bytes declare (a HEIC or AVIF photo named ``.jpg`` is a wrong extension), and decodes
the whole image — a JPEG at the smallest DCT scale keeping both sides at least
:data:`ANALYSIS_MIN_SIDE` pixels, other formats at full size — which finds truncated and corrupt
files. From that one decoded copy (shrunk to at most :data:`~torchloom.tools.doctor.quality.QUALITY_SIDE`
pixels when larger) it takes the perceptual hash, the per-channel mean and mean square, the quality
scores of :mod:`torchloom.tools.doctor.quality` and a colour thumbnail. Files run in a thread pool,
:data:`CHUNK` at a time (simplejpeg, OpenCV and hashlib release the GIL); the small copies of a
chunk's equal-sized images are measured together as one stack, so the Python work per file (which
holds the GIL) stays small next to the decoding. Results are columns of numpy arrays.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO

import cv2
import numpy as np
import simplejpeg
from PIL import Image

from torchloom.errors import DecodeError
from torchloom.io.file_errors import failure_reason
from torchloom.io.files import Inside
from torchloom.io.image import (
    CONTAINER_EXTENSIONS,
    JPEG_MAGIC,
    container_format,
    decode_image,
    probe_image,
    read_image_bytes,
)
from torchloom.io.threads import file_threads
from torchloom.tools.doctor.perceptual import (
    HASH_IMAGE_SIDE,
    THUMBNAIL_SIDE,
    hash_image,
    phashes,
    resize_stack,
)
from torchloom.tools.doctor.quality import PIXEL_SCORES, shrink, stack_quality
from torchloom.tools.terminal import Output

#: A JPEG is decoded at the smallest DCT scale whose sides are both at least this (pixels).
ANALYSIS_MIN_SIDE = 64
#: Files handed to a thread at a time.
CHUNK = 32
DIGEST_BYTES = 16

# Kinds of bad file, in the order they are reported.
EMPTY, TRUNCATED, CORRUPT = "empty", "truncated", "corrupt"
NOT_AN_IMAGE, UNSUPPORTED, UNREADABLE = "not_an_image", "unsupported", "unreadable"
BAD_FILE_KINDS = (EMPTY, TRUNCATED, CORRUPT, NOT_AN_IMAGE, UNSUPPORTED, UNREADABLE)

_MAGIC = (
    (JPEG_MAGIC, "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
EXTENSION_FORMATS = {
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".jpe": "JPEG",
    ".png": "PNG",
    ".gif": "GIF",
    ".bmp": "BMP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".webp": "WEBP",
}
_JPEG_MODES = {"Gray": "L", "RGB": "RGB", "YCbCr": "RGB", "CMYK": "CMYK", "YCCK": "CMYK"}


def sniff_format(data: bytes) -> str | None:
    """The image format ``data`` starts with (``"JPEG"``, ``"PNG"``, ...), or ``None``.

    Example:
        >>> sniff_format(b"\\x89PNG\\r\\n\\x1a\\n..."), sniff_format(b"hello")
        ('PNG', None)
    """
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return next((name for magic, name in _MAGIC if data.startswith(magic)), None) or container_format(data)


@dataclass
class Examination:
    """What one pass over ``paths`` found, one array element per file.

    ``problem`` is ``None`` for a readable image, else one of :data:`BAD_FILE_KINDS`, with the
    ``reason``. ``found_format`` is the format the bytes declare (``""`` if none);
    ``wrong_extension`` marks an image whose extension names another format: a readable one, or
    one in a format torchloom recognises but does not decode (HEIC, AVIF), whose extension is then
    all that is wrong with it. ``inside`` is the real folder every file must resolve into. Sizes
    are the displayed (EXIF-oriented) ones; ``mode`` is Pillow's name (``"RGB"``, ``"L"``,
    ``"RGBA"``, ``"CMYK"``, ``"I;16"``, ...). ``channel_mean`` and ``channel_square`` are the
    per-image means of ``x`` and ``x²`` (``x`` on the 0-1 scale) over the decoded copy.

    Example:
        >>> import os, tempfile
        >>> from torchloom.testing import write_class_folders
        >>> from torchloom.tools.doctor import diagnose
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = write_class_folders(root, [3], size=(24, 32), empty=1, progress=False)
        ...     facts = diagnose(root, progress=False).facts
        >>> problems = facts.problem.tolist()
        >>> problems.count(None), problems.count("empty"), sorted(set(facts.width.tolist()))
        (3, 1, [0, 32])
    """

    paths: Sequence[str]
    problem: np.ndarray
    reason: np.ndarray
    found_format: np.ndarray
    wrong_extension: np.ndarray
    digest: np.ndarray
    phash: np.ndarray
    height: np.ndarray
    width: np.ndarray
    mode: np.ndarray
    channel_mean: np.ndarray
    channel_square: np.ndarray
    scores: np.ndarray
    grayscale: np.ndarray
    thumbnail: np.ndarray
    inside: Inside = None

    @classmethod
    def empty(cls, paths: Sequence[str], inside: Inside = None) -> Examination:
        count = len(paths)
        return cls(
            paths=paths,
            problem=np.full(count, None, dtype=object),
            reason=np.full(count, None, dtype=object),
            found_format=np.full(count, "", dtype=object),
            wrong_extension=np.zeros(count, dtype=bool),
            digest=np.zeros(count, dtype=f"S{DIGEST_BYTES}"),
            phash=np.zeros(count, dtype=np.uint64),
            height=np.zeros(count, dtype=np.int64),
            width=np.zeros(count, dtype=np.int64),
            mode=np.full(count, "", dtype=object),
            channel_mean=np.zeros((count, 3), dtype=np.float64),
            channel_square=np.zeros((count, 3), dtype=np.float64),
            scores=np.full((count, len(PIXEL_SCORES)), np.nan, dtype=np.float32),
            grayscale=np.zeros(count, dtype=bool),
            thumbnail=np.zeros((count, THUMBNAIL_SIDE, THUMBNAIL_SIDE, 3), dtype=np.uint8),
            inside=inside,
        )

    @property
    def readable(self) -> np.ndarray:
        """Boolean mask of the files that decoded."""
        return np.asarray(self.problem == None)  # noqa: E711 - elementwise on an object array

    @property
    def hashed(self) -> np.ndarray:
        """Boolean mask of the files whose bytes were read (their ``digest`` is meaningful)."""
        return np.asarray(self.digest != b"")

    def examine(self, start: int, stop: int) -> None:
        """Examine files ``start`` to ``stop`` and fill their rows; data faults become a
        ``problem``, bugs propagate. Files are read and decoded one by one, then their small
        copies are measured together, a stack per size (:func:`stack_quality`)."""
        groups: dict[tuple[int, ...], list[tuple[int, np.ndarray, np.ndarray | None]]] = {}
        for i in range(start, stop):
            decoded = self._decode(i)
            if decoded is not None:
                groups.setdefault(decoded[0].shape, []).append((i, *decoded))
        for group in groups.values():
            rows = np.array([row for row, _, _ in group])
            self._measure(rows, np.stack([small for _, small, _ in group]), [grey for _, _, grey in group])

    def _decode(self, i: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        """Read, hash and decode file ``i``: its small copy and, when decoding gave more than the
        small copy, the image its perceptual hash is taken from (its moments are filled in here
        from the larger copy); ``None`` when the file is bad."""
        path = self.paths[i]
        try:
            data = read_image_bytes(path, inside=self.inside)
        except DecodeError as exc:
            self.problem[i], self.reason[i] = (EMPTY if "empty" in exc.reason else CORRUPT), exc.reason
            return None
        except OSError as exc:  # missing, unreadable, a FIFO or a device, outside the root
            self.problem[i], self.reason[i] = UNREADABLE, failure_reason(exc, path)
            return None
        self.digest[i] = hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()
        found = sniff_format(data)
        self.found_format[i] = found or ""
        expected = EXTENSION_FORMATS.get(os.path.splitext(path)[1].lower())
        try:
            header = probe_image(data, path)
            self.mode[i] = _mode(data)
            image = decode_image(data, path, min_size=ANALYSIS_MIN_SIDE)
        except DecodeError as exc:
            self.problem[i], self.reason[i] = _kind(data, found), exc.reason
            self.wrong_extension[i] = found in CONTAINER_EXTENSIONS and expected not in (None, found)
            return None
        self.height[i], self.width[i] = header.height, header.width
        self.found_format[i] = header.format
        self.wrong_extension[i] = expected is not None and expected != header.format
        small = shrink(image)
        if small is image:
            return small, None
        mean_255, std_255 = cv2.meanStdDev(image)
        mean, std = np.ravel(mean_255) / 255.0, np.ravel(std_255) / 255.0
        self.channel_mean[i], self.channel_square[i] = mean, std**2 + mean**2
        return small, hash_image(image)

    def _measure(self, rows: np.ndarray, stack: np.ndarray, hash_images: list[np.ndarray | None]) -> None:
        """Fill the columns of ``rows`` from the stack of their equal-sized small copies; hash
        those without a ``hash_images`` entry (and take their moments) from the small copy."""
        quality = stack_quality(stack)
        self.scores[rows] = quality.scores
        self.grayscale[rows] = quality.grayscale
        self.thumbnail[rows] = resize_stack(stack, THUMBNAIL_SIDE)
        own = np.array([grey is None for grey in hash_images])
        self.channel_mean[rows[own]] = quality.channel_mean[own]
        self.channel_square[rows[own]] = quality.channel_square[own]
        from_small = iter(resize_stack(quality.grey[own], HASH_IMAGE_SIDE) if own.any() else [])
        greys = [next(from_small) if grey is None else grey for grey in hash_images]
        self.phash[rows] = phashes(np.stack(greys))


def examine_files(
    paths: Sequence[str],
    *,
    num_threads: int | None = None,
    progress: bool = False,
    inside: Inside = None,
) -> Examination:
    """Examine every file of ``paths`` once, in ``num_threads`` threads (default
    :func:`~torchloom.io.threads.file_threads`);
    ``inside``: the real folder every file must resolve into (checked on the opened file).

    ``progress`` shows a bar on stderr (after a second) when stderr is a terminal.

    Example:
        >>> import numpy as np, os, simplejpeg, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> good, text = os.path.join(folder, "a.jpg"), os.path.join(folder, "b.jpg")
        >>> _ = open(good, "wb").write(simplejpeg.encode_jpeg(np.zeros((80, 80, 3), np.uint8)))
        >>> _ = open(text, "wb").write(b"hello")
        >>> facts = examine_files([good, text], num_threads=1)
        >>> facts.problem.tolist(), facts.width.tolist(), facts.mode.tolist()
        ([None, 'not_an_image'], [80, 0], ['RGB', ''])
    """
    facts = Examination.empty(paths, inside)
    count = len(paths)
    num_threads = file_threads(num_threads)

    def run_chunk(start: int) -> int:
        stop = min(start + CHUNK, count)
        facts.examine(start, stop)
        return stop - start

    with ThreadPoolExecutor(max_workers=num_threads) as pool:
        done = pool.map(run_chunk, range(0, count, CHUNK))
        files = _one_per_file(done)
        for _ in Output().progress(files, total=count, description="examining") if progress else files:
            pass
    return facts


def _one_per_file(chunk_sizes: Iterable[int]) -> Iterator[int]:
    for size in chunk_sizes:
        yield from range(size)


def _mode(data: bytes) -> str:
    if data.startswith(JPEG_MAGIC):
        colorspace = simplejpeg.decode_jpeg_header(data)[2]
        return _JPEG_MODES.get(str(colorspace), str(colorspace))
    with Image.open(BytesIO(data)) as image:
        return str(image.mode)


def _kind(data: bytes, found: str | None) -> str:
    """Why a file with these bytes failed to decode: truncated when its end marker is missing."""
    if found is None:
        return NOT_AN_IMAGE
    if found in CONTAINER_EXTENSIONS:
        return UNSUPPORTED
    tail = data.rstrip(b"\x00")[-16:]
    if found == "JPEG" and not tail.endswith(b"\xff\xd9"):
        return TRUNCATED
    if found == "PNG" and b"IEND" not in tail:
        return TRUNCATED
    return CORRUPT
