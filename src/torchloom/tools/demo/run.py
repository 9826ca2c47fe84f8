"""The end-to-end demo: messy multi-source data -> doctor -> prepare -> one training epoch -> report.

Run it with ``torchloom demo`` (or ``make demo``). In a temporary folder it writes what a real
project hands you (:mod:`torchloom.tools.demo.data`: imbalanced JPEG classes split into train/val by
hand, with copies leaking across the split and broken files; a measurements table keyed by image
id; temperature at 10 Hz and vibration at 30 Hz per id). Then it

1. runs ``doctor`` on the given split: it names the broken files and each train/val leak;
2. runs ``prepare`` on the same files: a reproducible, stratified split that keeps duplicates in
   one split and leaves broken files out, and ``doctor`` again on the result (no leaks);
3. trains a tiny model for one epoch on CPU: images joined per id with the table and the two
   streams (synchronised on the 10 Hz clock, padded per batch with masks), a balanced sampler,
   ``DataLoader`` workers, under ``LoaderProfiler``;
4. writes ``report.json``, the doctor's plots and a grid of the batch the model saw into the
   output folder it names.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from torchloom.collation import Collate, PadSequences
from torchloom.datasets import Image, JoinKey, Label, ManifestDataset
from torchloom.errors import ConfigError
from torchloom.faults import FaultReport
from torchloom.fusion import JoinedDataset, TimeSync
from torchloom.loader import LoaderProfiler
from torchloom.samplers import BalancedSampler
from torchloom.tools.demo.data import DEMO_CLASSES, EPOCH_NS, PlantedData, write_demo_data
from torchloom.tools.doctor import DoctorReport, diagnose
from torchloom.tools.doctor.plots import plots_available
from torchloom.tools.prepare.labels import parse_rules
from torchloom.tools.prepare.pipeline import PrepareResult, prepare_dataset
from torchloom.tools.show.grid import Tile, draw_grid
from torchloom.transforms import Compose, HorizontalFlip, Normalize, RandomResizedCrop

DEMO_COUNTS = (1500, 700, 300, 100)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DEFAULT_OUT = "torchloom-demo"
#: Vibration readings count at a temperature tick when they lie within this many nanoseconds.
SYNC_TOLERANCE_NS = 40_000_000
GRID_SAMPLES = 16


@dataclass
class DemoResult:
    """What the demo found and measured (:func:`run_demo` returns one and writes it as
    ``report.json``).

    Example:
        >>> import dataclasses
        >>> from torchloom.tools.demo import DemoResult
        >>> [field.name for field in dataclasses.fields(DemoResult)][1:4]
        ['leaks_planted', 'leaks_found_before', 'leaks_found_after']
    """

    out: str
    leaks_planted: int
    leaks_found_before: int
    leaks_found_after: int
    broken_planted: int
    broken_found: int
    split_counts: dict[str, dict[str, int]]
    samples_trained: int
    seconds: float
    images_per_second: float
    wait_share: float
    final_loss: float
    skipped: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)


class SensorClips(Dataset[dict[str, Any]]):
    """Per id, the 30 Hz vibration stream synchronised onto the 10 Hz temperature clock.

    A join source for :class:`torchloom.fusion.JoinedDataset` (it lists its keys with ``join_keys``):
    sample ``i`` is ``{"id", "sensor": (T, 2) float32 [temperature, vibration], "sensor_valid":
    (T,) bool}`` where ``T`` varies per id and a tick without vibration within the tolerance is
    masked, not invented.
    """

    def __init__(self, temperature: pa.Table, vibration: pa.Table) -> None:
        self.ids, self._temperature = _by_id(temperature)
        vibration_ids, self._vibration = _by_id(vibration)
        if vibration_ids != self.ids:
            raise ConfigError("the temperature and vibration tables cover different ids")

    def join_keys(self, on: str) -> pa.Array:
        if on != "id":
            raise KeyError(on)
        return pa.array(self.ids, type=pa.large_string())

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        streams = {"temperature": self._temperature[index], "vibration": self._vibration[index]}
        sync = TimeSync(
            streams, reference="temperature", tolerance=SYNC_TOLERANCE_NS, policy="interpolate", on_gap="mask"
        )
        ticks = [sync[i] for i in range(len(sync))]
        values = [
            [tick["temperature"], tick["vibration"] if tick["vibration_valid"] else 0.0] for tick in ticks
        ]
        return {
            "id": self.ids[index],
            "sensor": torch.tensor(values, dtype=torch.float32),
            "sensor_valid": torch.tensor([tick["vibration_valid"] for tick in ticks]),
        }


def _by_id(table: pa.Table) -> tuple[list[str], list[tuple[np.ndarray, np.ndarray]]]:
    table = table.sort_by([("id", "ascending"), ("t_ns", "ascending")])
    ids = table.column("id").to_numpy(zero_copy_only=False)
    times = table.column("t_ns").to_numpy()
    values = table.column("value").to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    stops = np.r_[starts[1:], len(ids)]
    return [str(ids[s]) for s in starts], [
        (times[a:b], values[a:b]) for a, b in zip(starts, stops, strict=True)
    ]


IMAGE_FEATURES = 64


def tiny_image_trunk() -> nn.Sequential:
    """Three strided convolutions and global pooling: ``(B, 3, H, W)`` -> ``(B, 64)`` features."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, IMAGE_FEATURES, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


class TinyFusionNet(nn.Module):
    """A small CNN for the image, a linear layer for the table, a masked mean of the streams."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.image = tiny_image_trunk()
        self.table = nn.Linear(3, 16)
        self.head = nn.Linear(IMAGE_FEATURES + 16 + 2, num_classes)

    def forward(self, batch: dict[str, torch.Tensor], normalize: Normalize) -> torch.Tensor:
        image = self.image(normalize(batch["image"]))
        present = batch["measurements_present"].float()
        table = torch.stack([batch["line_speed"].float(), batch["oven_c"].float() / 100, present], dim=1)
        mask = (batch["sensor_mask"] & batch["sensor_valid"]).unsqueeze(-1).float()
        sensor = (batch["sensor"] * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.head(torch.cat([image, torch.relu(self.table(table)), sensor], dim=1))


def run_demo(
    *,
    counts: Sequence[int] = DEMO_COUNTS,
    image_size: int = 128,
    crop_size: int = 96,
    batch_size: int = 64,
    num_workers: int = 2,
    seed: int = 0,
    out: str | os.PathLike[str] = DEFAULT_OUT,
    quiet: bool = False,
) -> DemoResult:
    """Generate the data, check it (``doctor``), split it (``prepare``), train one epoch and write
    the report to ``out`` (the steps: :mod:`torchloom.tools.demo.run`'s notes).

    Example:
        >>> import tempfile
        >>> from torchloom.tools.demo import run_demo
        >>> with tempfile.TemporaryDirectory() as out:
        ...     result = run_demo(counts=(24, 12), image_size=64, crop_size=48, batch_size=8,
        ...                       num_workers=0, out=out, quiet=True)
        >>> result.leaks_found_before, result.leaks_found_after, result.samples_trained > 0
        (2, 0, True)
    """
    console = Console(quiet=quiet, highlight=False)
    out = os.path.abspath(os.fspath(out))
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torchloom-demo-") as root:
        console.rule("[bold]torchloom demo")
        _say(
            console,
            f"1/4 Writing a messy project into {root}: {sum(counts)} JPEGs in a hand-made "
            "train/val split, a measurements table, two sensor streams (10 Hz, 30 Hz)",
        )
        planted = write_demo_data(root, counts=counts, image_size=image_size, seed=seed, progress=not quiet)
        given = os.path.join(root, "given")
        console.print("2/4 [bold]doctor[/bold] on the given split")
        before = diagnose(given, progress=not quiet)
        written = before.write(os.path.join(out, "doctor-given"))
        _print_doctor(console, before, planted)
        console.print("3/4 [bold]prepare[/bold]: a reproducible stratified split, duplicates kept together")
        prepared = prepare_dataset(
            given,
            os.path.join(root, "prepared"),
            rules=parse_rules([f"{name}:/{name}/" for name in DEMO_CLASSES[: len(counts)]]),
            fractions=(0.8, 0.2),
            seed=seed,
            materialize="link",
            group_duplicates=True,
            progress=not quiet,
        )
        after = diagnose(os.path.join(root, "prepared"), progress=not quiet)
        written += after.write(os.path.join(out, "doctor-prepared"))
        _print_prepare(console, prepared, after, root)
        console.print("4/4 One training epoch on the prepared train split, joined with the table and streams")
        joined = _joined_train_split(root, prepared, crop_size, seed)
        result = _train_one_epoch(joined, batch_size, num_workers, seed, quiet, out)
    result.leaks_planted = len(planted.leaks)
    result.leaks_found_before = _leaks(before)
    result.leaks_found_after = _leaks(after)
    result.broken_planted = len(planted.broken)
    result.broken_found = len(before.document["bad_files"]) + len(before.document["wrong_extension"])
    result.split_counts = _split_counts(prepared)
    result.written = written + result.written
    report_path = os.path.join(out, "report.json")
    with open(report_path, "w", encoding="utf-8") as handle:
        json.dump(asdict(result), handle, indent=2)
    result.written.insert(0, report_path)
    _print_result(console, result)
    return result


def _leaks(report: DoctorReport) -> int:
    return sum(1 for pair in report.document["duplicates"]["pairs"] if pair["leak"])


def _split_counts(prepared: PrepareResult) -> dict[str, dict[str, int]]:
    counts = prepared.counts()
    return {
        split: {label: int(counts[row, column]) for row, label in enumerate(prepared.classes)}
        for column, split in enumerate(prepared.split_names)
    }


def _joined_train_split(root: str, prepared: PrepareResult, crop_size: int, seed: int) -> JoinedDataset:
    manifest = prepared.manifest.filter(pc.equal(prepared.manifest.column("split"), "train"))
    stems = [os.path.splitext(os.path.basename(path))[0] for path in manifest.column("image").to_pylist()]
    manifest = manifest.append_column("id", pa.array(stems, type=pa.large_string()))
    manifest_path = os.path.join(root, "prepared", "train.parquet")
    pq.write_table(manifest, manifest_path)
    photos = ManifestDataset(
        manifest_path,
        fields=[JoinKey("id"), Image("image"), Label("label", classes=prepared.classes)],
        transform=Compose([RandomResizedCrop(crop_size, scale=(0.5, 1.0)), HorizontalFlip()]),
        on_error="skip",
        seed=seed,
        progress=False,
    )
    sensors = SensorClips(
        pq.read_table(os.path.join(root, "sensors", "temperature_10hz.parquet")),
        pq.read_table(os.path.join(root, "sensors", "vibration_30hz.parquet")),
    )
    return JoinedDataset(
        {"photo": photos, "measurements": os.path.join(root, "measurements.csv"), "sensors": sensors},
        on="id",
        how="left",
        missing="mask",
    )


def _train_one_epoch(
    joined: JoinedDataset, batch_size: int, num_workers: int, seed: int, quiet: bool, out: str
) -> DemoResult:
    torch.manual_seed(seed)
    photos: ManifestDataset = joined.sources["photo"]  # type: ignore[assignment]
    model = TinyFusionNet(len(photos.classes or []))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    normalize = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    sampler = BalancedSampler(photos.targets, seed=seed)
    loader = DataLoader(
        joined,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=Collate({"sensor": PadSequences(), "sensor_valid": PadSequences()}),
    )
    faults, profiler = FaultReport(), LoaderProfiler()
    trained, loss_value, first_batch = 0, float("nan"), None
    start = time.perf_counter()
    with tqdm(total=len(sampler), desc="training 1 epoch", unit="img", disable=quiet) as bar:
        for batch in faults.watch(profiler(loader)):
            logits = model(batch, normalize)
            loss = nn.functional.cross_entropy(logits, batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_value = float(loss.item())
            trained += len(batch["label"])
            first_batch = batch if first_batch is None else first_batch
            bar.update(len(batch["label"]) + len(batch.get("skipped", [])))
            bar.set_postfix(loss=f"{loss_value:.3f}")
    seconds = time.perf_counter() - start
    written = []
    if first_batch is not None and plots_available():
        written.append(_batch_grid(first_batch, list(photos.classes or []), out))
    return DemoResult(
        out=out,
        leaks_planted=0,
        leaks_found_before=0,
        leaks_found_after=0,
        broken_planted=0,
        broken_found=0,
        split_counts={},
        samples_trained=trained,
        seconds=seconds,
        images_per_second=trained / seconds,
        wait_share=profiler.report().wait_share,
        final_loss=loss_value,
        skipped=[f"{event.path}: {event.reason}" for event in faults.skipped],
        written=written,
    )


def _batch_grid(batch: dict[str, Any], classes: list[str], out: str) -> str:
    path = os.path.join(out, "first-batch.png")
    images = batch["image"][:GRID_SAMPLES]
    tiles = [
        Tile(
            image=images[i].permute(1, 2, 0).numpy(),
            title=f"{classes[int(batch['label'][i])]} · {batch['id'][i]}",
        )
        for i in range(len(images))
    ]
    draw_grid(tiles, path, title="The first training batch, as the model sees it (balanced sampler)")
    return path


def _say(console: Console, text: str) -> None:
    """Print a line that holds file names and reasons: no rich markup is read from it."""
    console.print(text, markup=False, highlight=False)


def _print_doctor(console: Console, report: DoctorReport, planted: PlantedData) -> None:
    document = report.document

    def short(path: str) -> str:
        return os.path.relpath(path, planted.root)

    for item in document["bad_files"]:
        _say(console, f"   bad file: {short(item['path'])} ({item['reason']})")
    for item in document["wrong_extension"]:
        _say(console, f"   wrong extension: {short(item['path'])} is {item['format']}")
    for pair in document["duplicates"]["pairs"]:
        if pair["leak"]:
            kind = "identical" if pair["exact"] else f"near duplicate, {pair['distance']} bits apart"
            _say(console, f"   LEAK: {short(pair['a']['path'])} = {short(pair['b']['path'])} ({kind})")
    ratio = document["classes"]["imbalance_ratio"]
    if ratio:
        _say(console, f"   classes imbalanced {ratio:.1f}:1 -> {document['classes']['sampler']}")
    _say(
        console,
        f"   {len(report.problems)} problem(s); planted: {len(planted.broken)} broken files, "
        f"{len(planted.leaks)} leaks",
    )


def _print_prepare(console: Console, prepared: PrepareResult, after: DoctorReport, root: str) -> None:
    for kind, items in prepared.problems.items():
        for path, reason in items:
            _say(console, f"   left out ({kind}): {path}: {reason}")
    for message in after.problems:
        _say(console, f"   doctor: {message.replace(root + os.sep, '')}")
    for split, labels in _split_counts(prepared).items():
        _say(console, f"   {split}: " + ", ".join(f"{label} {count}" for label, count in labels.items()))
    _say(
        console,
        f"   {prepared.duplicate_groups} duplicate group(s) kept in one split; doctor on the result: "
        f"{_leaks(after)} leak(s), {len(after.problems)} problem(s) (a duplicate within one split is "
        "still reported, but no longer leaks)",
    )


def _print_result(console: Console, result: DemoResult) -> None:
    _say(
        console,
        f"Trained on {result.samples_trained} joined samples in {result.seconds:.1f} s "
        f"({result.images_per_second:,.0f}/s), {result.wait_share:.0%} of the time waiting for data; "
        f"final loss {result.final_loss:.3f}; {len(result.skipped)} sample(s) skipped by the fault policy",
    )
    for line in result.skipped:
        _say(console, f"   skipped: {line}")
    _say(console, f"Report and plots in {result.out}:")
    for path in result.written:
        _say(console, f"   {os.path.relpath(path, result.out)}")


__all__ = [
    "DEMO_CLASSES",
    "DEMO_COUNTS",
    "EPOCH_NS",
    "DemoResult",
    "SensorClips",
    "TinyFusionNet",
    "run_demo",
    "tiny_image_trunk",
]
