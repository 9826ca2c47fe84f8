"""Per-sample randomness that depends only on ``(seed, epoch, index)``.

Samplers yield :class:`SampleKey` (an ``int`` that also carries the epoch); datasets turn it into
a generator with :func:`sample_rng`, so augmentation is the same for any number of workers and
after a resume, yet differs between epochs.

Example:
    >>> key = SampleKey(7, epoch=2)
    >>> int(key), key.epoch
    (7, 2)
    >>> a = sample_rng(0, 2, 7).integers(1000)
    >>> b = sample_rng(0, 2, 7).integers(1000)
    >>> bool(a == b)
    True
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from torchloom.errors import ConfigError

# Upper bound of the draw from torch's generator used when a plain int index arrives.
_TORCH_DRAW_BOUND = (1 << 62) - 1


class SampleKey(int):
    """A sample index that also carries the epoch it was drawn in.

    It is an ``int`` subclass, so it works anywhere an index does (``dataset[key]``,
    ``list[key]``), and pickles across DataLoader worker processes. (Each epoch has its own
    subclass holding ``epoch`` as a class attribute, so a key costs no more than an int to make.)

    Example:
        >>> keys = [SampleKey(i, epoch=1) for i in range(3)]
        >>> [k.epoch for k in keys], isinstance(keys[0], SampleKey)
        ([1, 1, 1], True)
    """

    __slots__ = ()
    epoch: int = 0

    def __new__(cls, index: int, epoch: int = 0) -> SampleKey:
        if epoch < 0:
            raise ConfigError(f"SampleKey epoch must be >= 0, got epoch={epoch}")
        return int.__new__(key_class(int(epoch)), index)

    def __reduce__(self) -> tuple[type[SampleKey], tuple[int, int]]:
        return (SampleKey, (int(self), self.epoch))

    def __repr__(self) -> str:
        return f"SampleKey(index={int(self)}, epoch={self.epoch})"


@functools.cache
def key_class(epoch: int) -> type[SampleKey]:
    """The SampleKey subclass of one epoch (memoised; ``int.__new__(key_class(e), i)`` makes a key fast)."""
    return type("SampleKey", (SampleKey,), {"__slots__": (), "epoch": epoch})


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """Return the random generator of one sample in one epoch.

    Example:
        >>> float(sample_rng(0, 0, 1).random()) != float(sample_rng(0, 1, 1).random())
        True
    """
    if seed < 0 or epoch < 0 or index < 0:
        raise ConfigError(
            f"sample_rng needs non-negative seed, epoch and index, got {seed=}, {epoch=}, {index=}"
        )
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, index])))


def rng_for_key(seed: int, key: int) -> np.random.Generator:
    """The generator for a dataset key.

    A :class:`SampleKey` gives ``sample_rng(seed, key.epoch, key)``. A plain ``int`` (from a
    plain sampler) falls back to a draw from torch's generator of the current process, which
    DataLoader seeds per worker and per epoch: random and different every epoch, but not
    reproducible across worker counts.

    Example:
        >>> rng = rng_for_key(0, SampleKey(3, epoch=1))
        >>> bool(rng.integers(10**9) == sample_rng(0, 1, 3).integers(10**9))
        True
    """
    if isinstance(key, SampleKey):
        return sample_rng(seed, key.epoch, int(key))
    torch_draw = int(torch.randint(0, _TORCH_DRAW_BOUND, (1,)).item())
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([torch_draw, int(key)])))
