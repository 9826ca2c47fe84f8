"""Exact resume: the one state protocol, the rank and world of the reading process, consumer streams."""

from torchloom.errors import StateMismatchError
from torchloom.resume.state import Resumable

__all__ = ["Resumable", "StateMismatchError"]
