"""BatchKeySampler: any torchloom sampler as a ``batch_sampler=`` that yields lists of keys."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from torchloom.errors import ConfigError, UsageError
from torchloom.samplers.base import STATE_YIELDED, KeySampler
from torchloom.seeding import SampleKey


class BatchKeySampler(Sampler[list[SampleKey]]):
    """Group a :class:`KeySampler`'s keys into batches (for ``DataLoader(batch_sampler=...)``).

    A :class:`MixtureSampler` built with the same ``batch_size`` gives batches of exactly its
    composition. ``set_epoch``, ``state_dict`` and ``load_state_dict`` pass through, counted in
    keys, so a checkpoint taken between batches resumes at the next batch.

    Example:
        >>> from torchloom.samplers import WindowSampler
        >>> batches = BatchKeySampler(WindowSampler([5], window=1, shuffle=False), batch_size=2)
        >>> [[int(k) for k in batch] for batch in batches]
        [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler: KeySampler, batch_size: int, *, drop_last: bool = False) -> None:
        if not isinstance(sampler, KeySampler):
            raise UsageError(
                f"BatchKeySampler needs a torchloom sampler (BalancedSampler, MixtureSampler, ...), got "
                f"{type(sampler).__name__}. Under PyTorch Lightning this means the Trainer tried to put its "
                "own distributed sampler inside: torchloom samplers split ranks themselves, so build the "
                "Trainer with use_distributed_sampler=False"
            )
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if sampler.unit > 1 and batch_size % sampler.unit:
            raise ConfigError(
                f"batch_size={batch_size} must be a multiple of the sampler's unit {sampler.unit}"
            )
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __len__(self) -> int:
        count = len(self.sampler)
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)

    def __iter__(self) -> Iterator[list[SampleKey]]:
        batch: list[SampleKey] = []
        for key in self.sampler:
            batch.append(key)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state[STATE_YIELDED] % self.batch_size and state[STATE_YIELDED] < len(self.sampler):
            raise ConfigError(
                f"checkpoint at {state[STATE_YIELDED]} keys is not on a batch boundary of {self.batch_size}"
            )
        self.sampler.load_state_dict(state)
