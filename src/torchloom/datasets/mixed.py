"""MixedDataset: datasets end to end (like ConcatDataset), every sample tagged with its source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from torchloom.datasets.options import takes_no_sample_options
from torchloom.errors import ConfigError, SampleIndexError
from torchloom.faults import Skipped
from torchloom.seeding import SampleKey


class MixedDataset(Dataset[Any]):
    """Datasets end to end (like ConcatDataset); dict samples gain ``"source"`` (the dataset's number).

    A :class:`SampleKey` is passed on to the source dataset with its own index and the same epoch.

    Example:
        >>> from torchloom.datasets import TableDataset
        >>> import pyarrow as pa
        >>> mixed = MixedDataset([TableDataset(pa.table({"x": [1, 2]})), TableDataset(pa.table({"x": [9]}))])
        >>> len(mixed), mixed[2], mixed.sizes
        (3, {'x': 9, 'source': 1}, [2, 1])
    """

    @takes_no_sample_options("its samples are its datasets' samples: give the options to each of them")
    def __init__(self, datasets: Sequence[Dataset[Any]]) -> None:
        if not datasets:
            raise ConfigError("MixedDataset needs at least one dataset")
        self.datasets = list(datasets)
        self.sizes = [len(dataset) for dataset in self.datasets]  # type: ignore[arg-type]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def locate(self, index: int) -> tuple[int, int]:
        """(source, index within the source) of a global index."""
        if not 0 <= index < len(self):
            raise SampleIndexError(f"index {index} out of range for MixedDataset of {len(self)} samples")
        source = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return source, index - int(self.offsets[source])

    def __getitem__(self, key: int) -> Any:
        source, local = self.locate(int(key))
        sample = self.datasets[source][SampleKey(local, key.epoch) if isinstance(key, SampleKey) else local]
        if isinstance(sample, dict):
            sample = dict(sample)
            sample["source"] = source
        elif isinstance(sample, Skipped):
            reason = f"source {source}: {sample.reason}"
            return Skipped(int(key), sample.path, sample.error, reason, sample.attempts, "MixedDataset")
        return sample
