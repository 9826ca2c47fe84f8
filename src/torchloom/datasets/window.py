"""WindowDataset: fixed-length windows of consecutive steps that never cross a sequence boundary.

The dataset assembles a window (not the collate function, which would bypass the sampler and the
workers). :class:`WindowIndex` maps a window number to its sequence and first step; the
:class:`torchloom.samplers.WindowSampler` draws window numbers from the same index.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchloom.collation import collate
from torchloom.datasets.options import takes_no_sample_options
from torchloom.errors import ConfigError, SampleIndexError, UsageError
from torchloom.faults import Skipped
from torchloom.seeding import SampleKey


class WindowIndex:
    """Window number -> (sequence, first step), for windows of ``window`` steps every ``stride``.

    Example:
        >>> index = WindowIndex([5, 2, 4], window=3, stride=1)
        >>> len(index), index.locate(3)
        (5, (2, 0))
    """

    def __init__(self, sequence_lengths: Sequence[int] | np.ndarray, window: int, stride: int = 1) -> None:
        lengths = np.asarray(sequence_lengths, dtype=np.int64)
        if lengths.ndim != 1 or len(lengths) == 0 or lengths.min() < 0:
            raise ConfigError("sequence_lengths must be a non-empty list of lengths >= 0")
        if window < 1 or stride < 1:
            raise ConfigError(f"window and stride must be >= 1, got {window=}, {stride=}")
        if window > lengths.max():
            raise ConfigError(
                f"window={window} is longer than the longest sequence ({int(lengths.max())}); "
                "use a smaller window"
            )
        short = int(np.count_nonzero(lengths < window))
        if short:
            warnings.warn(f"{short} sequence(s) shorter than window={window} give no windows", stacklevel=3)
        self.lengths, self.window, self.stride = lengths, window, stride
        self.per_sequence = np.where(lengths >= window, (lengths - window) // stride + 1, 0)
        self.window_offsets = np.concatenate([[0], np.cumsum(self.per_sequence)]).astype(np.int64)
        self.step_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.window_offsets[-1])

    def locate(self, window_index: int) -> tuple[int, int]:
        if not 0 <= window_index < len(self):
            raise SampleIndexError(f"window {window_index} out of range for {len(self)} windows")
        sequence = int(np.searchsorted(self.window_offsets, window_index, side="right")) - 1
        return sequence, int(window_index - self.window_offsets[sequence]) * self.stride


class WindowDataset(Dataset["dict[str, Any] | Skipped"]):
    """Windows of consecutive steps, assembled here (not in collate).

    ``steps`` holds every step of every sequence back to back: an array or tensor (a window is
    a ``(window, ...)`` tensor under ``"window"``), or a map-style dataset of dict steps (a
    window stacks each field over its steps). Samples also carry ``"sequence"``, ``"start"``
    and ``"index"`` (the window number, with the epoch of a :class:`SampleKey`).

    Example:
        >>> import numpy as np
        >>> windows = WindowDataset(np.arange(7.0), [4, 3], window=3)
        >>> windows[2]["window"].tolist(), windows[2]["sequence"]
        ([4.0, 5.0, 6.0], 1)
    """

    @takes_no_sample_options("its windows are made of steps: give the options to the dataset of steps")
    def __init__(
        self,
        steps: Dataset[Any] | np.ndarray | torch.Tensor,
        sequence_lengths: Sequence[int] | np.ndarray,
        window: int,
        *,
        stride: int = 1,
    ) -> None:
        self.windows = WindowIndex(sequence_lengths, window, stride)
        total = int(self.windows.step_offsets[-1])
        self.steps = torch.as_tensor(steps) if isinstance(steps, np.ndarray) else steps
        if len(self.steps) != total:  # type: ignore[arg-type]
            raise ConfigError(f"steps has {len(self.steps)} entries but sequence_lengths sum to {total}")  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: int) -> dict[str, Any] | Skipped:
        sequence, start = self.windows.locate(int(key))
        first = int(self.windows.step_offsets[sequence]) + start
        stop = first + self.windows.window
        if isinstance(self.steps, torch.Tensor):
            window: Any = self.steps[first:stop]
            sample: dict[str, Any] = {"window": window}
        else:
            epoch = key.epoch if isinstance(key, SampleKey) else None
            parts = [self.steps[SampleKey(i, epoch) if epoch is not None else i] for i in range(first, stop)]
            broken = next((part for part in parts if isinstance(part, Skipped)), None)
            if broken is not None:  # a window with a step missing cannot be assembled: skip it whole
                reason = f"step {broken.index} of the window was skipped: {broken.reason}"
                return Skipped(int(key), broken.path, broken.error, reason, broken.attempts, "WindowDataset")
            if not all(isinstance(part, dict) for part in parts):
                kinds = sorted({type(part).__name__ for part in parts})
                raise UsageError(f"WindowDataset needs dict steps from a dataset, or an array; got {kinds}")
            sample = dict(collate(parts))
        sample.update({"sequence": sequence, "start": start, "index": key})
        return sample
