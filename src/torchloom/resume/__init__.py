"""Exact resume: the one state protocol, the epoch rules, the rank and world of the reading process,
consumer streams."""

from torchloom.errors import DistributedSetupError, StateMismatchError
from torchloom.resume.epochs import Epochs, HasEpoch, SetsEpoch
from torchloom.resume.state import Resumable, Stateful

__all__ = [
    "DistributedSetupError",
    "Epochs",
    "HasEpoch",
    "Resumable",
    "SetsEpoch",
    "StateMismatchError",
    "Stateful",
]
