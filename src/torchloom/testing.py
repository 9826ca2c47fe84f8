"""Synthetic but realistic image data for the demo, the benchmarks and the tests.

Images are smooth gradients with textured noise and class-specific shapes (circles, boxes,
lines, ...), so they compress like photographs and a small CNN can learn the classes.

Example:
    >>> import numpy as np
    >>> from torchloom.testing import synthetic_image
    >>> image = synthetic_image(np.random.default_rng(0), 64, 80, label=1)
    >>> image.shape, image.dtype
    ((64, 80, 3), dtype('uint8'))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import cv2
import numpy as np
import simplejpeg
from tqdm.auto import tqdm

from torchloom.errors import ConfigError
from torchloom.io.threads import file_threads

__all__ = [
    "PlantedFaults",
    "synthetic_image",
    "write_class_folders",
]

SHAPES = ("circle", "box", "line", "triangle", "ring")
JPEG_QUALITY = 90


def synthetic_image(rng: np.random.Generator, height: int, width: int, label: int) -> np.ndarray:
    """An RGB ``uint8`` image whose dominant shape is chosen by ``label``.

    Example:
        >>> import numpy as np
        >>> from torchloom.testing import synthetic_image
        >>> first, again = (synthetic_image(np.random.default_rng(0), 32, 48, label=2) for _ in range(2))
        >>> first.shape, first.dtype, bool((first == again).all())  # the same generator, the same image
        ((32, 48, 3), dtype('uint8'), True)
    """
    ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
    start, direction = rng.uniform(30, 200, 3), rng.uniform(-80, 80, (2, 3))
    base = start + direction[0] * ys + direction[1] * xs
    small = rng.normal(0, 18, (max(2, height // 8), max(2, width // 8), 3)).astype(np.float32)
    texture = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    image = np.clip(base + texture + rng.normal(0, 4, (height, width, 3)), 0, 255).astype(np.uint8)
    shape = SHAPES[label % len(SHAPES)]
    scale = min(height, width)
    for _ in range(int(rng.integers(1, 4))):
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        center = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        size = int(rng.uniform(0.1, 0.3) * scale) + 1
        thickness = max(1, scale // 40)
        if shape == "circle":
            cv2.circle(image, center, size, color, -1)
        elif shape == "box":
            cv2.rectangle(image, center, (center[0] + size, center[1] + size), color, -1)
        elif shape == "line":
            end = (int(rng.integers(0, width)), int(rng.integers(0, height)))
            cv2.line(image, center, end, color, thickness * 3)
        elif shape == "triangle":
            points = np.array([center, (center[0] + size, center[1]), (center[0], center[1] + size)])
            cv2.fillPoly(image, [points.astype(np.int32)], color)
        else:
            cv2.circle(image, center, size, color, thickness * 2)
    return image


@dataclass
class PlantedFaults:
    """Paths of the broken files planted in a generated dataset, by kind.

    Example:
        >>> import os, tempfile
        >>> from torchloom.testing import write_class_folders
        >>> with tempfile.TemporaryDirectory() as root:
        ...     planted = write_class_folders(root, [2], size=(8, 8), empty=1, not_an_image=2, progress=False)
        ...     print(len(planted.all), [os.path.basename(path) for path in planted.empty])
        3 ['broken_empty_0.jpg']
    """

    truncated: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    not_an_image: list[str] = field(default_factory=list)

    @property
    def all(self) -> list[str]:
        return self.truncated + self.empty + self.not_an_image


def write_class_folders(
    root: str | os.PathLike[str],
    counts: Sequence[int],
    *,
    size: tuple[int, int] = (256, 256),
    seed: int = 0,
    class_names: Sequence[str] | None = None,
    truncated: int = 0,
    empty: int = 0,
    not_an_image: int = 0,
    progress: bool = True,
) -> PlantedFaults:
    """Write ``counts[c]`` JPEGs into ``root/<class c>/`` and plant broken files among them.

    Truncated files pass a header check and fail when decoded; empty and text files fail the
    header check. Returns where the faults were planted.

    Example:
        >>> import tempfile
        >>> from torchloom import FolderDataset
        >>> from torchloom.testing import write_class_folders
        >>> with tempfile.TemporaryDirectory() as root:
        ...     planted = write_class_folders(root, [3, 2], size=(16, 16), truncated=1, progress=False)
        ...     dataset = FolderDataset(root, validate="exists", progress=False)
        ...     print(dataset.classes, len(dataset), len(planted.truncated))
        ['class_0', 'class_1'] 6 1
    """
    names = list(class_names) if class_names is not None else [f"class_{i}" for i in range(len(counts))]
    if len(names) != len(counts):
        raise ConfigError(f"{len(counts)} counts but {len(names)} class names")
    jobs = [(label, i) for label, count in enumerate(counts) for i in range(count)]
    height, width = size

    def write(job: tuple[int, int]) -> None:
        label, i = job
        rng = np.random.default_rng([seed, label, i])
        data = simplejpeg.encode_jpeg(synthetic_image(rng, height, width, label), quality=JPEG_QUALITY)
        with open(os.path.join(root, names[label], f"{i:06d}.jpg"), "wb") as handle:
            handle.write(data)

    for name in names:
        os.makedirs(os.path.join(root, name), exist_ok=True)
    with ThreadPoolExecutor(max_workers=file_threads()) as pool:
        list(tqdm(pool.map(write, jobs), total=len(jobs), desc="writing images", disable=not progress))
    faults = PlantedFaults()
    rng = np.random.default_rng(seed)
    for kind, number in (("truncated", truncated), ("empty", empty), ("not_an_image", not_an_image)):
        for i in range(number):
            folder = os.path.join(root, names[int(rng.integers(len(names)))])
            path = os.path.join(folder, f"broken_{kind}_{i}.jpg")
            if kind == "truncated":
                source = synthetic_image(rng, height, width, 0)
                data = simplejpeg.encode_jpeg(source, quality=JPEG_QUALITY)
                data = data[: len(data) // 3]
            else:
                data = b"" if kind == "empty" else b"this is a text file, not a JPEG\n"
            with open(path, "wb") as handle:
                handle.write(data)
            getattr(faults, kind).append(path)
    return faults
