"""Replaying a random sampler's pass from its ``torch.Generator``, as ``StatefulDataLoader`` does.

A sampler that draws a new order every pass (``RandomSampler``, ``WeightedRandomSampler``,
``SubsetRandomSampler``, torchdata's ``RandomSampler``) draws it from its ``generator``. When that
is a ``torch.Generator`` (public ``get_state`` / ``set_state``), the state it had as a pass began
is enough to draw the same order again: a position is that state and the batches delivered, and a
resume restores the state and skips those batches. Without one (torch's ``RandomSampler`` with
``generator=None`` seeds a private generator from the global RNG each pass) the order is out of
reach and a position inside a pass cannot be resumed.

Example:
    >>> import torch
    >>> from torch.utils.data import RandomSampler
    >>> sampler = RandomSampler(range(6), generator=torch.Generator().manual_seed(0))
    >>> replay = GeneratorReplay.of(sampler)
    >>> replay.mark()
    >>> first, state = list(sampler), replay.state()
    >>> replay.restore(state, owner="Loader"); list(sampler) == first
    True
    >>> GeneratorReplay.of(RandomSampler(range(6))) is None
    True
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import torch

from torchloom.errors import StateMismatchError

KEY_GENERATOR = "generator"


class GeneratorReplay:
    """The generator of a random sampler and its state as the current pass began."""

    def __init__(self, generator: torch.Generator) -> None:
        self._generator = generator
        self._start = self._now()

    @classmethod
    def of(cls, sampler: object) -> GeneratorReplay | None:
        """The replay of ``sampler``'s order, or ``None`` when its generator is not a public one."""
        generator = getattr(sampler, "generator", None)
        return cls(generator) if isinstance(generator, torch.Generator) else None

    def _now(self) -> str:
        # ASCII text, so that a checkpoint stays plain (JSON, torch.load(weights_only=True)).
        return base64.b64encode(self._generator.get_state().numpy().tobytes()).decode("ascii")

    def mark(self) -> None:
        """A pass begins: its order is drawn from the generator's state now."""
        self._start = self._now()

    def state(self, *, now: bool = False) -> dict[str, Any]:
        """The sampler's part of a position: the state the current pass began with (``now``: the
        state now, where the next pass begins)."""
        return {KEY_GENERATOR: self._now() if now else self._start}

    def check(self, state: dict[str, Any], *, owner: str) -> bytes:
        """The generator state inside ``state``, refused (naming the fix) when it cannot be this
        generator's."""
        encoded = state.get(KEY_GENERATOR)
        try:
            raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except (binascii.Error, ValueError):
            raw = b""
        expected = self._generator.get_state().numel()
        if len(raw) != expected:
            raise StateMismatchError(
                f"{owner}.load_state_dict: the checkpoint's sampler state is not the state of a "
                f"{self._generator.device} torch.Generator ({len(raw)} bytes, not {expected}); build the "
                "Loader with the sampler and generator the checkpoint was written with"
            )
        return raw

    def restore(self, state: dict[str, Any], *, owner: str) -> None:
        """Set the generator to the state a saved pass began with: the pass draws its order again."""
        raw = self.check(state, owner=owner)
        self._generator.set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
        self._start = self._now()
