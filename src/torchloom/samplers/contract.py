"""What the thread Loader needs of a sampler, beyond ``iter`` and ``len``.

Each capability is optional and checked once, when a :class:`torchloom.Loader` is built: a plain
torch sampler (``SequentialSampler``) has none of them, torch's ``DistributedSampler`` has epochs
(:class:`torchloom.resume.epochs.HasEpoch`) and a split (:class:`SplitSampler`), torchdata's
stateful samplers have a state (:class:`torchloom.resume.state.Stateful`), torch's random samplers
draw a new order every pass (:class:`RandomOrder`); torchloom's samplers
(:class:`~torchloom.samplers.KeySampler`) declare what they have, so mypy checks that they keep it.
The values behind an attribute are checked where they are read (a user's sampler may hold
``epoch = None`` or ``unit = None``).

Example:
    >>> from torch.utils.data import DistributedSampler, SequentialSampler
    >>> from torchloom.resume import HasEpoch
    >>> from torchloom.samplers import IndexSampler, UnitSampler
    >>> isinstance(IndexSampler(8), UnitSampler), isinstance(SequentialSampler(range(8)), UnitSampler)
    (True, False)
    >>> isinstance(DistributedSampler(range(8), num_replicas=1, rank=0), HasEpoch)
    True
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class UnitSampler(Protocol):
    """Yields whole units of ``unit`` keys (a batch of :class:`~torchloom.samplers.MixtureSampler`
    with ``batch_size``): a batch must hold whole units for the composition promised per unit.

    Example:
        >>> from torchloom.samplers import IndexSampler, MixtureSampler, UnitSampler
        >>> mixture = MixtureSampler([60, 40], [0.5, 0.5], batch_size=8, world_size=1, rank=0)
        >>> isinstance(mixture, UnitSampler), mixture.unit, IndexSampler(8).unit
        (True, 8, 1)
    """

    unit: int


@runtime_checkable
class SplitSampler(Protocol):
    """Splits its order across ``num_replicas`` ranks (torch's ``DistributedSampler``, torchdata's
    ``StatefulDistributedSampler``, torchloom's samplers)."""

    num_replicas: int
    rank: int


@runtime_checkable
class SeededShuffle(Protocol):
    """Shuffles (``shuffle``) from a ``seed``, as torch's ``DistributedSampler`` does."""

    seed: int
    shuffle: bool


@runtime_checkable
class RandomOrder(Protocol):
    """Draws a new order from a torch ``generator`` every pass (``RandomSampler``,
    ``WeightedRandomSampler``, ``SubsetRandomSampler``): a pass cannot be replayed, so a position
    inside it cannot be resumed by skipping what was delivered.

    Example:
        >>> from torch.utils.data import RandomSampler
        >>> from torchloom.samplers import IndexSampler
        >>> isinstance(RandomSampler(range(8)), RandomOrder), isinstance(IndexSampler(8), RandomOrder)
        (True, False)
    """

    generator: object
