"""What the thread Loader needs of a sampler, beyond ``iter`` and ``len``.

Each capability is optional and checked once, when a :class:`torchloom.Loader` is built: a plain
torch sampler (``RandomSampler``, ``SequentialSampler``) has none of them, torch's
``DistributedSampler`` has epochs (:class:`torchloom.resume.epochs.HasEpoch`), torchdata's stateful
samplers have a state (:class:`torchloom.resume.state.Stateful`); torchloom's samplers
(:class:`~torchloom.samplers.KeySampler`) declare them all, so mypy checks that they keep them.

Example:
    >>> from torch.utils.data import DistributedSampler, SequentialSampler
    >>> from torchloom.resume.epochs import HasEpoch
    >>> from torchloom.samplers import IndexSampler
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
    with ``batch_size``): a batch must hold whole units for the composition promised per unit."""

    unit: int
