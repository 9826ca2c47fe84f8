"""GPU benchmark: does the loader keep a real training step fed? Run on a machine with CUDA.

ResNet-18- and ResNet-50-shaped networks (plain torch, channels_last, bf16 autocast) train on
224 px crops. For each we measure the model alone on batches already on the GPU (the ceiling),
then the naive pipeline and torchloom's feeding it through ``DataLoader(pin_memory=True)``, the
thread ``Loader`` with as many threads, and a ``DecodedCache`` read by both, and report images/s
and the share of wall time the training loop spent waiting for data (ResNet-18 at several worker
counts, ResNet-50 at the largest). Batches arrive as uint8 and are normalised on the GPU. A last
table times one batch's host-to-GPU copy from pageable and from pinned memory. Without CUDA it
runs on the CPU as a smoke test of the script (the figures then mean nothing).

Usage: ``python -m benchmarks.gpu --out benchmarks/GPU.md`` (writes a Markdown section that
``benchmarks.run`` appends to BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from benchmarks.pipeline import CROP, NaiveDataset
from torchloom import DecodedCache, FolderDataset, Loader, collate
from torchloom.testing import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, Normalize, RandomResizedCrop

BATCH = 256
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def shortcut(channels_in: int, channels_out: int, stride: int) -> nn.Module:
    """A residual block's skip path: identity, or a strided 1×1 projection when the shape changes."""
    if stride == 1 and channels_in == channels_out:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, 1, stride, bias=False), nn.BatchNorm2d(channels_out)
    )


class Block(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False),
            nn.BatchNorm2d(channels_out),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False),
            nn.BatchNorm2d(channels_out),
        )
        self.skip = shortcut(channels_in, channels_out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


class Bottleneck(nn.Module):
    def __init__(self, channels_in: int, width: int, stride: int) -> None:
        super().__init__()
        channels_out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, channels_out, 1, bias=False),
            nn.BatchNorm2d(channels_out),
        )
        self.skip = shortcut(channels_in, channels_out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def stem() -> list[nn.Module]:
    return [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]


def resnet50_shaped(num_classes: int) -> nn.Module:
    layers = stem()
    channels = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            layers.append(Bottleneck(channels, width, stride if block == 0 else 1))
            channels = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    return nn.Sequential(*layers)


def resnet18_shaped(num_classes: int) -> nn.Module:
    layers = stem()
    channels = 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(channels, width, stride), Block(width, width, 1)]
        channels = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    return nn.Sequential(*layers)


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke run of this script only


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def make_step(model: nn.Module) -> Callable[[torch.Tensor, torch.Tensor], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def train_rate(
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]], step: Callable[..., None], steps: int
) -> tuple[float, float]:
    """(images/s, share of time waiting for the next batch) over ``steps`` steps after 3 warm-ups."""
    iterator = iter(batches)
    for _ in range(3):
        step(*next(iterator))
    synchronize()
    waiting, images = 0.0, 0
    start = time.perf_counter()
    for _ in range(steps):
        ready = time.perf_counter()
        try:
            images_batch, labels = next(iterator)
        except StopIteration:
            break
        waiting += time.perf_counter() - ready
        step(images_batch, labels)
        images += len(labels)
    synchronize()
    elapsed = time.perf_counter() - start
    return images / elapsed, waiting / elapsed


def naive_batches(loader: DataLoader[Any]) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    for images, labels in loader:
        yield (
            images.to(DEVICE, non_blocking=True).contiguous(memory_format=torch.channels_last),
            labels.to(DEVICE, non_blocking=True),
        )


def torchloom_batches(
    loader: Iterable[Any], normalize: Normalize
) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    for batch in loader:
        images = batch["image"].to(DEVICE, non_blocking=True)
        yield (
            normalize(images).contiguous(memory_format=torch.channels_last),
            batch["label"].to(DEVICE, non_blocking=True),
        )


def forever(make: Callable[[], Iterable[Any]]) -> Iterable[Any]:
    while True:
        yield from make()


MODELS: dict[str, Callable[[int], nn.Module]] = {"ResNet-18": resnet18_shaped, "ResNet-50": resnet50_shaped}
RESNET50_WAIT_GOAL = 0.05
RESNET18_CACHE_GOAL = 0.9
Row = tuple[str, str, str, float, float, float]  # model, pipeline, workers, img/s, waiting, vs ceiling


def copy_rates(batch: int, repeats: int = 20) -> list[tuple[str, float]]:
    """GB/s of one uint8 batch's host-to-device copy, from pageable and from pinned memory."""
    pageable = torch.randint(0, 255, (batch, 3, CROP, CROP), dtype=torch.uint8)
    sources = {"pageable": pageable}
    if DEVICE == "cuda":
        sources["pinned"] = pageable.pin_memory()
    rates = []
    for name, host in sources.items():
        host.to(DEVICE, non_blocking=True)
        synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            host.to(DEVICE, non_blocking=True)
        synchronize()
        rates.append((name, host.numel() * repeats / (time.perf_counter() - start) / 1e9))
    return rates


def measure_model(
    name: str, root: str, args: argparse.Namespace, worker_counts: list[int], normalize: Normalize
) -> list[Row]:
    model = MODELS[name](4).to(DEVICE).to(memory_format=torch.channels_last)
    step = make_step(model)
    fixed = torch.randint(0, 255, (args.batch, 3, CROP, CROP), dtype=torch.uint8, device=DEVICE)
    labels = torch.randint(0, 4, (args.batch,), device=DEVICE)
    ceiling, _ = train_rate(
        forever(lambda: [(normalize(fixed).contiguous(memory_format=torch.channels_last), labels)] * 10),
        step,
        args.steps,
    )
    rows: list[Row] = [(name, "model alone (batches already on the GPU)", "-", ceiling, 0.0, 1.0)]
    print(f"{name} ceiling {ceiling:,.0f} img/s", flush=True)
    dataset = FolderDataset(
        os.path.join(root, "data"),
        transform=Compose([RandomResizedCrop(CROP), HorizontalFlip()]),
        progress=False,
    )
    naive = NaiveDataset(dataset.index.paths.to_list(), dataset.targets.tolist())
    cache = DecodedCache(dataset, os.path.join(root, "cache"), progress=False)  # 256 px: no max_side
    for workers in worker_counts:
        options: dict[str, Any] = dict(
            batch_size=args.batch,
            shuffle=True,
            num_workers=workers,
            pin_memory=DEVICE == "cuda",
            persistent_workers=True,
            prefetch_factor=4,
            drop_last=True,
        )

        def threads(source: Any, workers: int = workers) -> Loader:
            return Loader(
                source,
                batch_size=args.batch,
                shuffle=True,
                num_threads=workers,
                pin_memory=DEVICE == "cuda",
                drop_last=True,
            )

        naive_loader = DataLoader(naive, **options)
        rate, wait = train_rate(forever(lambda loader=naive_loader: naive_batches(loader)), step, args.steps)
        rows.append((name, "naive (PIL, float32 in workers)", str(workers), rate, wait, rate / ceiling))
        print(rows[-1], flush=True)
        for pipeline, loader in (
            ("torchloom (uint8, normalise on GPU)", DataLoader(dataset, collate_fn=collate, **options)),
            ("torchloom Loader (threads in the training process)", threads(dataset)),
            ("torchloom DecodedCache, DataLoader workers", DataLoader(cache, collate_fn=collate, **options)),
            ("torchloom DecodedCache, Loader threads", threads(cache)),
        ):
            rate, wait = train_rate(
                forever(lambda loader=loader: torchloom_batches(loader, normalize)), step, args.steps
            )
            rows.append((name, pipeline, str(workers), rate, wait, rate / ceiling))
            print(rows[-1], flush=True)
    cache.close()
    return rows


def goal_lines(rows: list[Row]) -> list[str]:
    torchloom_rows = [row for row in rows if row[1].startswith("torchloom")]
    resnet50 = [row for row in torchloom_rows if row[0] == "ResNet-50"]
    resnet18_cache = [row for row in torchloom_rows if row[0] == "ResNet-18" and "DecodedCache" in row[1]]
    lines = ["| goal | measured | met |", "|---|---|---|"]
    if resnet50:
        wait = min(row[4] for row in resnet50)
        lines.append(
            f"| ResNet-50: data-wait < {RESNET50_WAIT_GOAL:.0%} (best torchloom pipeline) | {wait:.1%} | "
            f"{'yes' if wait < RESNET50_WAIT_GOAL else 'no'} |"
        )
    if resnet18_cache:
        share = max(row[5] for row in resnet18_cache)
        lines.append(
            f"| ResNet-18 from the cache: ≥ {RESNET18_CACHE_GOAL}× model alone | {share:.2f}× | "
            f"{'yes' if share >= RESNET18_CACHE_GOAL else 'no'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/GPU.md")
    parser.add_argument("--images", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--workers", type=int, nargs="*", default=None, help="ResNet-18 worker counts")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    device_name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "CPU (smoke run)"
    cpus = len(os.sched_getaffinity(0))
    torch.backends.cudnn.benchmark = True
    normalize = Normalize(MEAN, STD)
    most = max(1, cpus - 1)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="torchloom-gpu-") as root:
        write_class_folders(
            os.path.join(root, "data"), [args.images // 4] * 4, size=(256, 256), progress=False
        )
        for name in args.models:
            counts = (args.workers or sorted({4, 8, most})) if name == "ResNet-18" else [most]
            rows += measure_model(name, root, args, counts, normalize)
    copies = copy_rates(args.batch)
    lines = [
        f"## GPU: feeding a training step on {device_name}",
        "",
        f"`python -m benchmarks.gpu` on a lent machine: {device_name}, {cpus} CPUs, "
        f"torch {torch.__version__}. ResNet-18- and ResNet-50-shaped networks (channels_last, bf16 "
        f"autocast, SGD) on {CROP} px RandomResizedCrop + flip of {args.images} generated 256 px JPEGs, "
        f"batches of {args.batch} as uint8 normalised on the GPU, `pin_memory=True`, {args.steps} timed "
        "steps after 3 warm-ups.",
        "",
        "| model | pipeline | workers | img/s | waiting for data | vs model alone |",
        "|---|---|---|---|---|---|",
    ]
    for model, pipeline, workers, rate, wait, share in rows:
        lines.append(f"| {model} | {pipeline} | {workers} | {rate:,.0f} | {wait:.0%} | {share:.2f}× |")
    lines += [
        "",
        f"Host-to-GPU copy of one uint8 batch ({args.batch}×3×{CROP}×{CROP}, "
        f"{args.batch * 3 * CROP * CROP / 1e6:.0f} MB): "
        + ", ".join(f"{name} {rate:.1f} GB/s" for name, rate in copies)
        + ".",
        "",
        *goal_lines(rows),
    ]
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
