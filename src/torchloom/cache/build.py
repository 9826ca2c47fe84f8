"""Building a decoded cache: probe every header, lay the files out, decode into place in threads.

Two passes keep memory flat whatever the dataset's size: the first reads only headers (a bounded
prefix of each file) to learn every image's final shape, which decides the layout and every
image's place; the second decodes each image (DCT-scaled for JPEGs when ``max_side`` shrinks
it, then ``cv2.INTER_AREA``) straight into the memory-mapped file. libjpeg-turbo, Pillow and
OpenCV release the GIL, so threads decode in parallel. Each sample runs under its dataset's
fault policy: with ``on_error="skip"`` a sample that fails is recorded (index, path, error,
reason) and its row stays empty; with ``"raise"`` the build stops with the
:class:`torchloom.errors.SampleError` naming it.

Example:
    >>> scaled_size(1080, 1920, 128), scaled_size(64, 48, 128)
    ((72, 128), (64, 48))
"""

from __future__ import annotations

import datetime
import os
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import cv2
import numpy as np
from tqdm.auto import tqdm

from torchloom.cache.fingerprint import FORMAT_VERSION, InputStats
from torchloom.cache.integrity import checksums
from torchloom.cache.storage import CHANNELS, INPUTS_FILE, MARKER, ImageWriter, fsync_path, write_meta
from torchloom.datasets.contract import CacheableDataset
from torchloom.errors import DecodeError, EmptyDatasetError
from torchloom.faults import Skipped
from torchloom.io.image import decode_image, probe_file
from torchloom.io.threads import file_threads

#: Most samples handed to one thread task (fewer when there are few samples per thread).
MAX_CHUNK = 64


def scaled_size(height: int, width: int, max_side: int | None) -> tuple[int, int]:
    """``(height, width)`` shrunk, aspect kept, so that the longer side is at most ``max_side``."""
    longer = max(height, width)
    if max_side is None or longer <= max_side:
        return height, width
    scale = max_side / longer
    return max(1, round(height * scale)), max(1, round(width * scale))


def build_cache(
    folder: str,
    source: CacheableDataset,
    *,
    cache_path: str,
    settings: dict[str, Any],
    inputs: InputStats,
    max_side: int | None,
    num_threads: int | None,
    progress: bool,
) -> dict[str, Any]:
    """Decode every sample of ``source`` into the empty ``folder`` (a staging folder renamed onto
    ``cache_path`` once complete: progress bars name ``cache_path``); return the cache's metadata."""
    paths = source.index.paths
    count = len(paths)
    num_threads = file_threads(num_threads)
    name = source.fault_name
    failures: dict[int, Skipped] = {}
    shapes = np.zeros((count, CHANNELS), np.int32)

    def probe(i: int) -> None:
        result = source.policy.run(i, paths[i], lambda: _final_shape(source, paths[i], max_side), name)
        if isinstance(result, Skipped):
            failures[i] = result
        else:
            shapes[i] = result

    _run_parallel(range(count), probe, num_threads, progress, "reading image headers")
    _check_some_usable(failures, count, name, "read")
    writer = ImageWriter(folder, shapes)

    def decode(i: int) -> None:
        shape = (int(shapes[i, 0]), int(shapes[i, 1]), CHANNELS)
        result = source.policy.run(
            i, paths[i], lambda: writer.write(i, _decode(source, paths[i], shape, max_side)), name
        )
        if isinstance(result, Skipped):
            failures[i] = result

    todo = [i for i in range(count) if i not in failures]
    _run_parallel(todo, decode, num_threads, progress, f"decoding into {os.path.basename(cache_path)}")
    files = writer.close()
    _check_some_usable(failures, count, name, "decoded")
    inputs.save(os.path.join(folder, INPUTS_FILE))
    fsync_path(os.path.join(folder, INPUTS_FILE))
    files.append(INPUTS_FILE)
    meta = {
        "format": MARKER,
        "version": FORMAT_VERSION,
        "build_id": uuid.uuid4().hex,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        "count": count,
        "layout": writer.layout,
        "shape": writer.shape,
        "dtype": "uint8",
        "skipped": [_record(failures[i]) for i in sorted(failures)],
        "files": {file: checksums(os.path.join(folder, file)) for file in files},
    }
    write_meta(folder, meta)
    return meta


def _check_some_usable(failures: dict[int, Skipped], count: int, name: str, done: str) -> None:
    """Refuse to cache a dataset none of whose ``count`` samples could be ``done`` (read, decoded)."""
    if len(failures) == count:
        first = failures[min(failures)]
        raise EmptyDatasetError(
            f"no sample of {name} could be {done}, nothing to cache (e.g. {first.path!r}: {first.reason})"
        )


def _record(skipped: Skipped) -> dict[str, Any]:
    return {
        "index": skipped.index,
        "path": skipped.path,
        "error": skipped.error,
        "reason": skipped.reason,
        "attempts": skipped.attempts,
    }


def _final_shape(source: CacheableDataset, path: str, max_side: int | None) -> tuple[int, int, int]:
    """The shape sample ``path`` will have in the cache, from its header alone."""
    header = probe_file(
        path, max_pixels=source.max_pixels, exif_orientation=source.exif_orientation, inside=source.read_root
    )
    return (*scaled_size(header.height, header.width, max_side), CHANNELS)


def _decode(
    source: CacheableDataset, path: str, shape: tuple[int, int, int], max_side: int | None
) -> np.ndarray:
    """Decode ``path`` as ``source`` does (root and size checks, orientation, pixel guard), shrunk
    to ``shape``."""
    data = source.read_file(path)
    height, width = shape[:2]
    image = decode_image(
        data,
        path,
        min_size=(height, width) if max_side is not None else None,
        max_pixels=source.max_pixels,
        exif_orientation=source.exif_orientation,
    )
    shrinks = image.shape[0] >= height and image.shape[1] >= width
    if max_side is not None and image.shape[:2] != (height, width) and shrinks:
        image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
    if image.shape != shape:
        raise DecodeError(path, f"decoded to shape {image.shape}, but its header declares {shape}")
    return image


def _run_parallel(
    indices: Sequence[int], task: Callable[[int], None], num_threads: int, progress: bool, description: str
) -> None:
    """Run ``task(i)`` for every index in threads, in chunks, with a progress bar."""
    if not indices:
        return
    chunk = max(1, min(MAX_CHUNK, len(indices) // (4 * num_threads)))
    parts = [indices[start : start + chunk] for start in range(0, len(indices), chunk)]

    def run(part: Sequence[int]) -> int:
        for i in part:
            task(i)
        return len(part)

    with (
        ThreadPoolExecutor(max_workers=num_threads) as pool,
        tqdm(total=len(indices), desc=description, unit="img", disable=not progress, leave=False) as bar,
    ):
        futures = [pool.submit(run, part) for part in parts]
        try:
            for future in as_completed(futures):
                bar.update(future.result())
        except BaseException:
            for future in futures:  # stop soon: the build failed (or was interrupted)
                future.cancel()
            raise
