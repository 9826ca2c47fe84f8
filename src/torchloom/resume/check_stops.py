"""Where :func:`~torchloom.resume.check_resume` interrupts a run: the seams of the first epoch, chosen
and random steps.

Example:
    >>> [(stop.batch, label) for stop, label in plan_stops({0: 4, 1: 4}, 2, [], 0, 0)][:3]
    [(0, 'before the first batch'), (1, 'after the first batch'), (2, 'mid-epoch')]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torchloom.errors import ConfigError


@dataclass(frozen=True)
class Stop:
    """Where a pass is interrupted: after ``batch`` steps of ``epoch`` in that pass, or at the
    epoch's end (``exhausted``: every rank's iterator was read to ``StopIteration``)."""

    epoch: int
    batch: int
    exhausted: bool = False


def plan_stops(
    steps: dict[int, int], epochs: int, chosen: Sequence[int], random_stops: int, seed: int
) -> list[tuple[Stop, str]]:
    first = steps[0]
    total = sum(steps.values())
    plan = [
        (Stop(0, 0), "before the first batch"),
        (Stop(0, 1), "after the first batch"),
        (Stop(0, first // 2), "mid-epoch"),
        (Stop(0, first - 1), "before the last batch"),
        (Stop(0, first), "after the last batch"),
        (Stop(0, first, exhausted=True), "at the epoch's end"),
    ]
    for step in chosen:
        if step > total:
            raise ConfigError(f"stops: step {step} is past the run's {total} steps; pass steps 0 to {total}")
        plan.append((step_stop(step, steps, epochs), "chosen"))
    rng = np.random.default_rng(seed)
    drawn = rng.choice(total + 1, size=min(random_stops, total + 1), replace=False)
    plan += [(step_stop(int(step), steps, epochs), "random") for step in sorted(drawn)]
    unique: dict[Stop, str] = {}
    for stop, label in plan:
        unique.setdefault(stop, label)
    return list(unique.items())


def step_stop(step: int, steps: dict[int, int], epochs: int) -> Stop:
    for epoch in range(epochs):
        if step < steps[epoch]:
            return Stop(epoch, step)
        step -= steps[epoch]
    return Stop(epochs - 1, steps[epochs - 1])


def describe(stop: Stop, steps: int, label: str) -> str:
    suffix = f" ({label})" if label else ""
    if stop.exhausted:
        return f"epoch {stop.epoch} at its end, after all {steps} batches{suffix}"
    return f"epoch {stop.epoch} after batch {stop.batch} of {steps}{suffix}"
