"""Samplers: balanced, weighted, mixed and windowed; distributed and resumable."""

from torchloom.errors import DistributedSetupError, StateMismatchError
from torchloom.samplers.balanced import BalancedSampler, class_probabilities
from torchloom.samplers.base import KeySampler
from torchloom.samplers.batches import BatchKeySampler
from torchloom.samplers.contract import UnitSampler
from torchloom.samplers.index import IndexSampler
from torchloom.samplers.mixture import MixtureSampler, batch_composition
from torchloom.samplers.weighted import WeightedSampler
from torchloom.samplers.window import WindowSampler

__all__ = [
    "BalancedSampler",
    "BatchKeySampler",
    "DistributedSetupError",
    "IndexSampler",
    "KeySampler",
    "MixtureSampler",
    "StateMismatchError",
    "UnitSampler",
    "WeightedSampler",
    "WindowSampler",
    "batch_composition",
    "class_probabilities",
]
