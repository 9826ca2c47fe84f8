"""Exact resume: the one state protocol, the epoch rules, the rank and world of the reading process,
consumer streams, and :func:`check_resume`, which proves a pipeline resumes exactly."""

from torchloom.errors import DistributedSetupError, StateMismatchError
from torchloom.resume.check import check_resume
from torchloom.resume.check_report import Mismatch, ResumeCase, ResumeReport
from torchloom.resume.epochs import Epochs, HasEpoch, SetsEpoch
from torchloom.resume.state import Resumable, Stateful

__all__ = [
    "DistributedSetupError",
    "Epochs",
    "HasEpoch",
    "Mismatch",
    "Resumable",
    "ResumeCase",
    "ResumeReport",
    "SetsEpoch",
    "StateMismatchError",
    "Stateful",
    "check_resume",
]
