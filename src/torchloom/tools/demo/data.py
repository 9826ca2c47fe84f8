"""The demo's synthetic multi-source data: what a messy real project hands you.

- ``given/{train,val}/<class>/<id>.jpg``: imbalanced JPEG classes, split by a colleague who
  copied files around: some validation images are copies of training images (byte-identical or
  re-encoded and resized), and a few files are broken (truncated, empty, text named ``.jpg``);
- ``measurements.csv``: a table keyed by the image id (missing rows for some ids);
- ``sensors/temperature_10hz.parquet`` and ``sensors/vibration_30hz.parquet``: two streams per id
  at 10 Hz and 30 Hz with clock jitter, int64 nanosecond timestamps since the epoch.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import simplejpeg

from torchloom.errors import ConfigError
from torchloom.testing import write_class_folders
from torchloom.tools.output_files import write_csv

DEMO_CLASSES = ("scratch", "dent", "stain", "crack")
#: Timestamps start here: nanoseconds since the epoch, beyond float64's exact integers.
EPOCH_NS = 1_700_000_000_000_000_000
TEMPERATURE_HZ = 10
VIBRATION_HZ = 30
VALIDATION_SHARE = 0.2
#: Each class needs a training and a validation image.
MIN_IMAGES_PER_CLASS = 2


@dataclass
class PlantedData:
    """Where the demo planted what a data check should find (paths relative to the data root).

    Example:
        >>> import os, tempfile
        >>> from torchloom.tools.demo import write_demo_data
        >>> with tempfile.TemporaryDirectory() as root:
        ...     planted = write_demo_data(root, counts=(12, 6), image_size=48, progress=False)
        ...     print(len(planted.ids), os.path.exists(os.path.join(root, planted.leaks[0][1])))
        18 True
    """

    root: str
    ids: list[str]
    leaks: list[tuple[str, str]] = field(default_factory=list)  # (train copy source, val copy)
    broken: list[str] = field(default_factory=list)
    missing_measurements: list[str] = field(default_factory=list)


def write_demo_data(
    root: str | os.PathLike[str],
    *,
    counts: Sequence[int],
    image_size: int = 128,
    seed: int = 0,
    progress: bool = True,
) -> PlantedData:
    """Write the demo's files under ``root`` and say what was planted: class folders split into
    ``given/train`` and ``given/val`` with leaks and broken files, ``measurements.csv`` and two
    sensor streams (the layout: :mod:`torchloom.tools.demo.data`'s notes).

    Example:
        >>> import tempfile
        >>> from torchloom.tools.demo import write_demo_data
        >>> with tempfile.TemporaryDirectory() as root:
        ...     planted = write_demo_data(root, counts=(12, 6), image_size=48, progress=False)
        >>> len(planted.leaks), len(planted.broken)
        (2, 3)"""
    if not 0 < len(counts) <= len(DEMO_CLASSES) or min(counts) < MIN_IMAGES_PER_CLASS:
        raise ConfigError(
            f"counts: 1 to {len(DEMO_CLASSES)} classes of at least {MIN_IMAGES_PER_CLASS} images each, "
            f"got {counts}"
        )
    root = os.fspath(root)
    names = list(DEMO_CLASSES[: len(counts)])
    pool = os.path.join(root, "pool")
    write_class_folders(
        pool, counts, size=(image_size, image_size), seed=seed, class_names=names, progress=progress
    )
    rng = np.random.default_rng(seed)
    ids: list[str] = []
    for name in names:
        files = sorted(os.listdir(os.path.join(pool, name)))
        validation = set(rng.choice(len(files), max(1, round(len(files) * VALIDATION_SHARE)), replace=False))
        for position, file in enumerate(files):
            image_id = f"{name}-{os.path.splitext(file)[0]}"
            split = "val" if position in validation else "train"
            os.makedirs(os.path.join(root, "given", split, name), exist_ok=True)
            os.replace(
                os.path.join(pool, name, file), os.path.join(root, "given", split, name, f"{image_id}.jpg")
            )
            ids.append(image_id)
    shutil.rmtree(pool)
    planted = PlantedData(root, ids)
    _plant_leaks(root, names[0], planted)
    _plant_broken(root, names, planted)
    _write_measurements(root, ids, rng, planted)
    _write_sensors(root, ids, rng)
    return planted


def _plant_leaks(root: str, name: str, planted: PlantedData) -> None:
    """One byte-identical copy and one re-encoded, resized copy of training images in val."""
    train = os.path.join("given", "train", name)
    sources = sorted(os.listdir(os.path.join(root, train)))[:2]
    for number, file in enumerate(sources):
        source = os.path.join(train, file)
        copy = os.path.join("given", "val", name, f"copy-of-{file}")
        with open(os.path.join(root, source), "rb") as handle:
            data = handle.read()
        if number == 1:
            image = simplejpeg.decode_jpeg(data)
            height, width = image.shape[:2]
            smaller = cv2.resize(image, (width * 4 // 5, height * 4 // 5), interpolation=cv2.INTER_AREA)
            data = simplejpeg.encode_jpeg(np.ascontiguousarray(smaller), quality=60)
        with open(os.path.join(root, copy), "wb") as handle:
            handle.write(data)
        planted.leaks.append((source, copy))


def _plant_broken(root: str, names: list[str], planted: PlantedData) -> None:
    """A truncated JPEG, an empty file and a text file named .jpg."""
    folder = os.path.join("given", "train", names[-1])
    some = sorted(os.listdir(os.path.join(root, folder)))[0]
    with open(os.path.join(root, folder, some), "rb") as handle:
        head = handle.read()[:600]
    for file, data in (("truncated.jpg", head), ("empty.jpg", b""), ("notes.jpg", b"camera 3 was dirty\n")):
        with open(os.path.join(root, folder, file), "wb") as handle:
            handle.write(data)
        planted.broken.append(os.path.join(folder, file))


def _write_measurements(root: str, ids: list[str], rng: np.random.Generator, planted: PlantedData) -> None:
    """Line speed and temperature per id; every 9th id has no row."""
    kept = [image_id for number, image_id in enumerate(ids) if number % 9 != 4]
    planted.missing_measurements = sorted(set(ids) - set(kept))
    table = pa.table(
        {
            "id": kept,
            "line_speed": np.round(rng.uniform(0.5, 2.0, len(kept)), 3),
            "oven_c": np.round(rng.normal(180.0, 6.0, len(kept)), 1),
        }
    )
    with open(os.path.join(root, "measurements.csv"), "wb") as handle:  # every CSV: spreadsheet-safe
        write_csv(table, handle)


def _write_sensors(root: str, ids: list[str], rng: np.random.Generator) -> None:
    """Per id, 1.5-4 s of temperature at 10 Hz and vibration at 30 Hz, jittered, on one clock."""
    columns: dict[str, dict[str, list[np.ndarray]]] = {
        "temperature": {"id": [], "t_ns": [], "value": []},
        "vibration": {"id": [], "t_ns": [], "value": []},
    }
    for number, image_id in enumerate(ids):
        start = EPOCH_NS + number * 10_000_000_000
        seconds = float(rng.uniform(1.5, 4.0))
        for stream, hz in (("temperature", TEMPERATURE_HZ), ("vibration", VIBRATION_HZ)):
            ticks = int(seconds * hz)
            jitter = rng.integers(-2_000_000, 2_000_000, ticks)
            times = start + np.arange(ticks, dtype=np.int64) * (1_000_000_000 // hz) + jitter
            base = 20.0 if stream == "temperature" else 0.0
            values = base + np.cumsum(rng.normal(0, 0.1, ticks))
            columns[stream]["id"].append(np.full(ticks, image_id, dtype=object))
            columns[stream]["t_ns"].append(np.sort(times))
            columns[stream]["value"].append(values.astype(np.float32))
    os.makedirs(os.path.join(root, "sensors"), exist_ok=True)
    for stream, hz in (("temperature", TEMPERATURE_HZ), ("vibration", VIBRATION_HZ)):
        table = pa.table({name: np.concatenate(parts) for name, parts in columns[stream].items()})
        pq.write_table(table, os.path.join(root, "sensors", f"{stream}_{hz}hz.parquet"))
