"""Exact resume: the one state protocol, the rank and world of the reading process, consumer streams."""

from torchloom.resume.state import Resumable, StateMismatchError

__all__ = ["Resumable", "StateMismatchError"]
