"""Per-sample randomness that depends only on ``(seed, epoch, index)``.

Samplers yield :class:`SampleKey` (an ``int`` that also carries the epoch); datasets turn it into
a generator with :func:`sample_rng`, so augmentation is the same for any number of workers and
after a resume, yet differs between epochs.

Example:
    >>> from torchloom import SampleKey, sample_rng
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
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torchloom._compat import register_seed_sequence
from torchloom.errors import ConfigError

__all__ = [
    "SampleKey",
    "rng_for_key",
    "sample_rng",
    "sample_rngs",
]

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


# --- one batch's generators, seeded together -------------------------------------------------------
# numpy's SeedSequence (O'Neill's seed_seq_fe: a 4-word pool, hashmix and mix over uint32) computed
# for a whole batch at once with array arithmetic: the states equal SeedSequence([seed, epoch,
# index]).generate_state(4, uint64) bit for bit (a brute-force test compares them), so each
# generator is sample_rng's, at ~1/7 of its cost (numpy's per-key SeedSequence is ~20 µs).
_WORD = 0xFFFFFFFF
_POOL_WORDS = 4
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R = 0xCA01F9DD, 0x4973F715
_XSHIFT = 16
_STATE_WORDS = 8  # PCG64 takes 4 uint64 = 8 uint32 words


def _uint32_words(value: int) -> list[int]:
    """``value`` as SeedSequence splits an int: little-endian 32-bit words, at least one."""
    words = [value & _WORD]
    value >>= 32
    while value:
        words.append(value & _WORD)
        value >>= 32
    return words


def _hash_constants(initial: int, multiplier: int, count: int) -> list[np.uint32]:
    """The constants hashmix xors with and multiplies by, in order: ``initial`` advanced by
    ``multiplier`` at each step (they do not depend on the data)."""
    constants, value = [np.uint32(initial)], initial
    for _ in range(count):
        value = value * multiplier & _WORD
        constants.append(np.uint32(value))
    return constants


# Enough hashmix constants for entropies of up to 12 words (seed, epoch and index of 4 words each).
_MAX_ENTROPY_WORDS = 12
_POOL_CONSTANTS = _hash_constants(
    _INIT_A, _MULT_A, _POOL_WORDS * _POOL_WORDS + (_MAX_ENTROPY_WORDS - _POOL_WORDS) * _POOL_WORDS
)
_STATE_CONSTANTS = _hash_constants(_INIT_B, _MULT_B, _STATE_WORDS)
_SHIFT = np.uint32(_XSHIFT)
_MIX_L, _MIX_R = np.uint32(_MIX_MULT_L), np.uint32(_MIX_MULT_R)


def _seed_states(entropy: np.ndarray) -> np.ndarray:
    """SeedSequence states of many entropies at once: ``entropy`` is (n, words) uint32, the result
    (n, 4) uint64, row i equal to ``SeedSequence(row i's words).generate_state(4, np.uint64)``."""
    rows, words = entropy.shape
    step = 0

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal step
        value = (value ^ _POOL_CONSTANTS[step]) * _POOL_CONSTANTS[step + 1]
        step += 1
        return value ^ (value >> _SHIFT)

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result: np.ndarray = _MIX_L * x - _MIX_R * y  # uint32 arithmetic, wrapping like C's
        return result ^ (result >> _SHIFT)

    zero = np.zeros(rows, np.uint32)
    pool = [hashmix(entropy[:, i] if i < words else zero) for i in range(_POOL_WORDS)]
    for source in range(_POOL_WORDS):
        for target in range(_POOL_WORDS):
            if source != target:
                pool[target] = mix(pool[target], hashmix(pool[source]))
    for source in range(_POOL_WORDS, words):
        for target in range(_POOL_WORDS):
            pool[target] = mix(pool[target], hashmix(entropy[:, source]))
    state = np.empty((rows, _STATE_WORDS), np.uint32)
    for word in range(_STATE_WORDS):
        value = (pool[word % _POOL_WORDS] ^ _STATE_CONSTANTS[word]) * _STATE_CONSTANTS[word + 1]
        state[:, word] = value ^ (value >> _SHIFT)
    # As SeedSequence does, for the same values on any byte order: pairs of words as little-endian.
    return state.astype("<u4", copy=False).view("<u8").astype(np.uint64, copy=False)


class _SeededState:
    """A seed sequence whose PCG64 state is already computed; anything else (``spawn``,
    ``entropy``, other state sizes) is answered by the equivalent numpy SeedSequence."""

    __slots__ = ("_entropy", "_sequence", "_state")

    def __init__(self, entropy: list[int], state: np.ndarray) -> None:
        self._entropy = entropy
        self._state = state
        self._sequence: np.random.SeedSequence | None = None

    def _equivalent(self) -> np.random.SeedSequence:
        if self._sequence is None:
            self._sequence = np.random.SeedSequence(self._entropy)
        return self._sequence

    def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:
        if n_words == self._state.size and dtype is np.uint64:
            return self._state.copy()  # PCG64 seeds from 4 native uint64 words
        return self._equivalent().generate_state(n_words, dtype)

    def spawn(self, n_children: int) -> list[np.random.SeedSequence]:
        return self._equivalent().spawn(n_children)

    def __reduce__(self) -> str | tuple[Any, ...]:
        # Pickled (a deep copy, a checkpointed generator) as the equivalent SeedSequence itself.
        return self._equivalent().__reduce__()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not set yet (e.g. mid-unpickling): never recurse into _equivalent
            raise AttributeError(name)
        return getattr(self._equivalent(), name)


# Where numpy takes no seed sequence of another class, every generator comes from its SeedSequence.
_BATCH_SEEDING = register_seed_sequence(_SeededState)


def sample_rngs(seed: int, keys: Sequence[SampleKey]) -> list[np.random.Generator]:
    """``[sample_rng(seed, key.epoch, key) for key in keys]``, seeded together (several times faster).

    Example:
        >>> keys = [SampleKey(i, epoch=2) for i in (5, 9)]
        >>> [int(g.integers(10**9)) for g in sample_rngs(0, keys)] == [
        ...     int(sample_rng(0, 2, i).integers(10**9)) for i in (5, 9)]
        True
    """
    if seed < 0 or any(key < 0 for key in keys):
        raise ConfigError(f"sample_rngs needs a non-negative seed and indices, got {seed=}")
    epochs = [key.epoch for key in keys]
    if not _BATCH_SEEDING:
        return [sample_rng(seed, epoch, int(key)) for key, epoch in zip(keys, epochs, strict=True)]
    if seed <= _WORD and max(keys, default=0) <= _WORD and max(epochs, default=0) <= _WORD:
        # The usual case: seed, epoch and index are one word each.
        entropy = np.empty((len(keys), 3), np.uint32)
        entropy[:, 0] = seed
        entropy[:, 1] = epochs
        entropy[:, 2] = keys
        groups = [(list(range(len(keys))), entropy)]
    else:
        words = [
            _uint32_words(seed) + _uint32_words(epoch) + _uint32_words(key)
            for key, epoch in zip(keys, epochs, strict=True)
        ]
        by_length: dict[int, list[int]] = {}
        for position, row in enumerate(words):
            if len(row) <= _MAX_ENTROPY_WORDS:  # longer (huge seeds) are seeded one by one below
                by_length.setdefault(len(row), []).append(position)
        groups = [
            (positions, np.array([words[p] for p in positions], np.uint32))
            for positions in by_length.values()
        ]
    generators: list[np.random.Generator | None] = [None] * len(keys)
    for positions, group in groups:
        for position, state in zip(positions, _seed_states(group), strict=True):
            sequence = _SeededState([seed, epochs[position], int(keys[position])], state)
            generators[position] = np.random.Generator(np.random.PCG64(sequence))
    return [
        generator if generator is not None else sample_rng(seed, epochs[position], int(keys[position]))
        for position, generator in enumerate(generators)
    ]
