"""BalancedSampler: class-balanced sampling with replacement, with exact per-class expectations."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from torchloom.errors import ConfigError
from torchloom.resume.state import fingerprint
from torchloom.samplers.base import KeySampler, epoch_rng

Mode = Literal["inverse", "sqrt", "effective"]
MODES = ("inverse", "sqrt", "effective")


def class_probabilities(counts: np.ndarray, mode: Mode, beta: float = 0.999) -> np.ndarray:
    """The probability of drawing each class (0 for classes with no samples).

    - ``"inverse"``: every present class equally often (``1 / K``);
    - ``"sqrt"``: proportional to ``sqrt(n_c)`` — between natural and balanced;
    - ``"effective"``: proportional to ``(1 - beta) / (1 - beta ** n_c)`` (Cui et al., 2019).

    Example:
        >>> class_probabilities(np.array([90, 10, 0]), "inverse").tolist()
        [0.5, 0.5, 0.0]
    """
    present = counts > 0
    if mode == "inverse":
        weights = present.astype(np.float64)
    elif mode == "sqrt":
        weights = np.sqrt(counts.astype(np.float64))
    elif mode == "effective":
        if not 0 < beta < 1:
            raise ConfigError(f"effective mode needs 0 < beta < 1, got {beta=}")
        with np.errstate(divide="ignore"):
            weights = np.where(present, (1 - beta) / (1 - np.power(beta, counts.astype(np.float64))), 0.0)
    else:
        raise ConfigError(f"Invalid mode={mode!r}; must be one of {MODES}")
    return weights / weights.sum()


class BalancedSampler(KeySampler):
    """Draw ``num_samples`` indices with replacement so that classes appear at set frequencies.

    Each draw picks a class with probability :func:`class_probabilities` (``mode``), then a
    sample of that class uniformly, so the expected count of class ``c`` in an epoch is exactly
    ``num_samples * p_c`` (for ``"inverse"``: ``num_samples / K``). Vectorised; any size.

    ``labels`` must hold at least one sample. A single class gives uniform sampling. Classes
    ``0..num_classes-1`` with no sample get probability 0 and a warning.

    Args:
        labels: one integer label per sample (e.g. ``dataset.targets``).
        mode: ``"inverse"``, ``"sqrt"`` or ``"effective"`` (with ``beta``).
        num_samples: draws per epoch (all ranks together); default ``len(labels)``.
        num_classes: the number of classes, when some may have no sample.
        seed, rank, world_size, drop_last: see :class:`torchloom.samplers.base.KeySampler`.

    Example:
        >>> sampler = BalancedSampler([0, 0, 0, 1], seed=0)
        >>> [int(key) for key in sampler]
        [0, 2, 3, 2]
    """

    def __init__(
        self,
        labels: Sequence[int] | np.ndarray,
        *,
        mode: Mode = "inverse",
        num_samples: int | None = None,
        num_classes: int | None = None,
        beta: float = 0.999,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size, drop_last=drop_last)
        self.labels = np.asarray(labels, dtype=np.int64)
        if self.labels.ndim != 1 or len(self.labels) == 0:
            raise ConfigError("BalancedSampler needs a non-empty 1-D array of labels")
        if self.labels.min() < 0:
            raise ConfigError(f"labels must be >= 0, found {int(self.labels.min())}")
        classes = int(self.labels.max()) + 1 if num_classes is None else num_classes
        if classes <= int(self.labels.max()):
            raise ConfigError(f"num_classes={num_classes} but labels go up to {int(self.labels.max())}")
        self.counts = np.bincount(self.labels, minlength=classes)
        empty = np.flatnonzero(self.counts == 0)
        if len(empty):
            warnings.warn(
                f"BalancedSampler: classes {empty.tolist()} have no samples and are never drawn", stacklevel=2
            )
        self.probabilities = class_probabilities(self.counts, mode, beta)
        self.num_samples = len(self.labels) if num_samples is None else int(num_samples)
        if self.num_samples <= 0:
            raise ConfigError(f"num_samples must be positive, got {num_samples}")
        self.mode, self.beta = mode, beta
        self._by_class = np.argsort(self.labels, kind="stable")
        self._class_start = np.concatenate([[0], np.cumsum(self.counts)[:-1]])

    def _config(self) -> dict[str, Any]:
        return {
            "labels": fingerprint(self.labels),
            "mode": self.mode,
            "num_samples": self.num_samples,
            "num_classes": len(self.counts),
            "beta": self.beta,
        }

    def expected_counts(self) -> np.ndarray:
        """Expected draws of each class per epoch (all ranks together)."""
        return self.num_samples * self.probabilities

    def _global_order(self, epoch: int) -> np.ndarray:
        rng = epoch_rng(self.seed, epoch)
        classes = rng.choice(len(self.counts), size=self.num_samples, p=self.probabilities)
        offsets = (rng.random(self.num_samples) * self.counts[classes]).astype(np.int64)
        return self._by_class[self._class_start[classes] + offsets]
