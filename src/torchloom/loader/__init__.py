"""Loader tools: the thread :class:`Loader`, the :class:`LoaderProfiler` and :func:`tune`."""

from torchloom.errors import StateMismatchError
from torchloom.loader.autotune import Trial, TuneResult, tune
from torchloom.loader.loader import Loader
from torchloom.loader.profiler import LoaderProfiler
from torchloom.loader.ranks import RankTimes
from torchloom.loader.report import ProfileReport
from torchloom.timing import StageClock

__all__ = [
    "Loader",
    "LoaderProfiler",
    "ProfileReport",
    "RankTimes",
    "StageClock",
    "StateMismatchError",
    "Trial",
    "TuneResult",
    "tune",
]
