"""Two sources mixed 3:1, the same composition in every batch; windows that never cross a sequence."""

import numpy as np
import pyarrow as pa
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.datasets import WindowDataset
from torchloom.samplers import BatchKeySampler, WindowSampler


def main() -> None:
    web = tl.TableDataset(pa.table({"text": [f"web {i}" for i in range(60)]}))
    books = tl.TableDataset(pa.table({"text": [f"book {i}" for i in range(12)]}))
    sources = tl.MixedDataset([web, books])  # samples gain "source": 0 or 1
    mixture = tl.MixtureSampler(sources.sizes, [0.75, 0.25], batch_size=8, stop="all_exhausted", seed=0)
    loader = DataLoader(sources, batch_sampler=BatchKeySampler(mixture, 8), collate_fn=tl.collate)
    batch = next(iter(loader))
    print(sorted(batch["source"].tolist()), len(loader))  # [0, 0, 0, 0, 0, 0, 1, 1] 10: 6 + 2 in every batch

    lengths = [40, 25]  # two recordings of 40 and 25 steps, back to back
    steps = np.arange(65.0)
    windows = WindowDataset(steps, lengths, window=8, stride=4)
    sampler = WindowSampler(lengths, window=8, stride=4, seed=0)
    loader = DataLoader(windows, sampler=sampler, batch_size=len(sampler), collate_fn=tl.collate)
    batch = next(iter(loader))
    crossing = [start for start in batch["window"][:, 0].tolist() if start < 40 < start + 8]
    print(len(windows), batch["window"].shape, crossing)  # 14 torch.Size([14, 8]) []: 9 + 5, none across


if __name__ == "__main__":
    main()
