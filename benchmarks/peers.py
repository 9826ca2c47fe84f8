"""The peers' side of the peer benchmark: the JPEG training pipeline written as Hugging Face
``datasets``, WebDataset and LitData document it, served to ``benchmarks.peers_bench`` by a process.

Pipeline: PIL decode -> RandomResizedCrop 224 (torchloom's box drawing, cropped and resized by PIL
in one ``resize(box=...)``) -> horizontal flip -> uint8 CHW tensor (as torchvision's
``PILToTensor``), batches of 64, 2 DataLoader workers (persistent, prefetch 4, as
``benchmarks.common.loader_rate`` sets them):

- ``hf-datasets``: ``Dataset.from_dict({"image": paths, "label": labels})`` +
  ``cast_column("image", Image())`` + ``set_transform``, through a ``DataLoader``;
- ``webdataset``: tar shards written by ``wds.ShardWriter``, read by
  ``wds.WebDataset(urls, shardshuffle=...).shuffle(1000).decode("pil")``, batched in the workers,
  through a ``wds.WebLoader``;
- ``litdata``: ``litdata.optimize`` storing each file's JPEG bytes as a ``bytes`` field (its image
  serializer decodes with torchvision, whose only build here does not load against the CPU torch),
  run in a child process because it forces the spawn start method on its process; then
  ``StreamingDataset(..., shuffle=True, transform=...)`` decoding with PIL, through a
  ``StreamingDataLoader``.

This module imports only the standard library, numpy, torch, PIL and the peer it serves, never
torchloom: it also runs in a separate virtualenv (``.venv-peers``) holding a peer whose
dependencies do not fit torchloom's.

Protocol (``python -m benchmarks.peers PEER MANIFEST WORKDIR``): the server reads the manifest (JSON:
``paths``, ``labels``), writes the peer's format under WORKDIR, runs a warm-up epoch and writes
``ready <seconds to prepare> <peer version>`` on its protocol stream (its stdout; anything the peer
prints goes to stderr). Then each ``epoch`` line on stdin runs one shuffled epoch and answers ``<images>
<seconds>``; ``quit`` or the end of input ends the server (``quit``: the parent's forked DataLoader
workers hold copies of the pipe, so its end of input may come late). A failure answers
``error <reason>`` and exits 1.
"""

from __future__ import annotations

import glob
import importlib.metadata
import io
import json
import math
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import numpy as np
import torch
from PIL import Image

CROP = 224
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
CROP_ATTEMPTS = 10
BATCH = 64
WORKERS = 2
PREFETCH = 4
WDS_SHARDS = 8
WDS_SHUFFLE_BUFFER = 1000
PEER_MODULES = {"hf-datasets": "datasets", "webdataset": "webdataset", "litdata": "litdata"}


def draw_box(height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """torchloom's RandomResizedCrop box, as PIL's (left, top, right, bottom).

    A copy of ``torchloom.transforms.geometry.RandomResizedCrop.draw_box``, because this module must
    not import torchloom; ``benchmarks.peers_bench.check_same_boxes`` checks that they agree.
    """
    area = height * width
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(CROP_ATTEMPTS):
        target_area = area * rng.uniform(SCALE[0], SCALE[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        box_width = round(math.sqrt(target_area * aspect))
        box_height = round(math.sqrt(target_area / aspect))
        if 0 < box_width <= width and 0 < box_height <= height:
            top = int(rng.integers(0, height - box_height + 1))
            left = int(rng.integers(0, width - box_width + 1))
            return left, top, left + box_width, top + box_height
    in_ratio = width / height
    if in_ratio < RATIO[0]:
        box_width, box_height = width, round(width / RATIO[0])
    elif in_ratio > RATIO[1]:
        box_height, box_width = height, round(height * RATIO[1])
    else:
        box_width, box_height = width, height
    top, left = (height - box_height) // 2, (width - box_width) // 2
    return left, top, left + box_width, top + box_height


class PilTrainTransform:
    """RandomResizedCrop 224 + horizontal flip on a PIL image, to a uint8 CHW tensor.

    Each process draws from its own generator (seeded from the OS when first used there), so
    forked DataLoader workers do not repeat each other's crops.
    """

    def __init__(self) -> None:
        self._rng: np.random.Generator | None = None
        self._pid = -1

    def rng(self) -> np.random.Generator:
        if self._rng is None or self._pid != os.getpid():
            self._rng, self._pid = np.random.default_rng(), os.getpid()
        return self._rng

    def __call__(self, image: Image.Image) -> torch.Tensor:
        rng = self.rng()
        if image.mode != "RGB":
            image = image.convert("RGB")
        box = draw_box(image.height, image.width, rng)
        image = image.resize((CROP, CROP), Image.Resampling.BILINEAR, box=box)
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(image)).permute(2, 0, 1)


TRANSFORM = PilTrainTransform()


def hf_transform(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {"image": [TRANSFORM(image) for image in batch["image"]], "label": batch["label"]}


def hf_loader(paths: list[str], labels: list[int], workdir: str) -> Iterable[Any]:
    import datasets  # the peer served; absent from the other peers' environments

    dataset = datasets.Dataset.from_dict({"image": paths, "label": labels}).cast_column(
        "image", datasets.Image()
    )
    dataset.set_transform(hf_transform)
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        num_workers=WORKERS,
        persistent_workers=True,
        prefetch_factor=PREFETCH,
    )


def wds_loader(paths: list[str], labels: list[int], workdir: str) -> Iterable[Any]:
    import webdataset as wds

    pattern = os.path.join(workdir, "shard-%04d.tar")
    with wds.ShardWriter(pattern, maxcount=math.ceil(len(paths) / WDS_SHARDS), verbose=0) as sink:
        for index, (path, label) in enumerate(zip(paths, labels, strict=True)):
            with open(path, "rb") as handle:
                sink.write({"__key__": f"{index:08d}", "jpg": handle.read(), "cls": label})
    urls = sorted(glob.glob(os.path.join(workdir, "shard-*.tar")))
    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls))
        .shuffle(WDS_SHUFFLE_BUFFER)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(TRANSFORM, int)
        .batched(BATCH)
    )
    return wds.WebLoader(
        dataset, batch_size=None, num_workers=WORKERS, persistent_workers=True, prefetch_factor=PREFETCH
    )


def litdata_sample(item: tuple[str, int]) -> dict[str, Any]:
    """One optimized sample: the file's JPEG bytes as they are, and its label."""
    path, label = item
    with open(path, "rb") as handle:
        return {"image": handle.read(), "label": label}


def litdata_optimize(items: list[tuple[str, int]], output_dir: str) -> None:
    import litdata

    litdata.optimize(
        fn=litdata_sample, inputs=items, output_dir=output_dir, chunk_bytes="64MB", num_workers=WORKERS
    )


def litdata_transform(sample: dict[str, Any]) -> dict[str, Any]:
    return {"image": TRANSFORM(Image.open(io.BytesIO(sample["image"]))), "label": sample["label"]}


def litdata_loader(paths: list[str], labels: list[int], workdir: str) -> Iterable[Any]:
    import litdata

    output_dir = os.path.join(workdir, "optimized")
    child = multiprocessing.get_context("spawn").Process(
        target=litdata_optimize, args=(list(zip(paths, labels, strict=True)), output_dir)
    )
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"litdata.optimize exited with {child.exitcode} (its output is on stderr)")
    dataset = litdata.StreamingDataset(
        output_dir, shuffle=True, transform=litdata_transform, cache_dir=os.path.join(workdir, "cache")
    )
    return litdata.StreamingDataLoader(
        dataset, batch_size=BATCH, num_workers=WORKERS, persistent_workers=True, prefetch_factor=PREFETCH
    )


LOADERS: dict[str, Callable[[list[str], list[int], str], Iterable[Any]]] = {
    "hf-datasets": hf_loader,
    "webdataset": wds_loader,
    "litdata": litdata_loader,
}


def count_images(batch: Any) -> int:
    return len(batch["image"]) if isinstance(batch, dict) else len(batch[0])


def run_epoch(loader: Iterable[Any]) -> tuple[int, float]:
    started = time.perf_counter()
    images = sum(count_images(batch) for batch in loader)
    return images, time.perf_counter() - started


def serve(peer: str, manifest: str, workdir: str, protocol: TextIO) -> None:
    """Prepare ``peer``'s loader over the manifest's files, then time an epoch per ``epoch`` line."""
    started = time.perf_counter()
    with open(manifest, encoding="utf-8") as handle:
        files = json.load(handle)
    loader = LOADERS[peer](files["paths"], files["labels"], workdir)
    images, _ = run_epoch(loader)
    if images != len(files["paths"]):
        raise RuntimeError(f"{peer}: an epoch gave {images} images for {len(files['paths'])} files")
    version = importlib.metadata.version(PEER_MODULES[peer])
    print(f"ready {time.perf_counter() - started:.3f} {version}", file=protocol, flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        images, seconds = run_epoch(loader)
        print(f"{images} {seconds:.6f}", file=protocol, flush=True)


def main() -> None:
    peer, manifest, workdir = sys.argv[1:4]
    # The protocol keeps the real stdout; everything else (the peers' progress output, their
    # workers') goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        serve(peer, manifest, workdir, protocol)
    except Exception as error:
        traceback.print_exc()
        reason = f"{type(error).__name__}: {error}".replace("\n", " ")
        print(f"error {reason}", file=protocol, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
