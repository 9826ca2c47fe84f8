"""Loader tools: the thread :class:`Loader`."""

from torchloom.loader.loader import Loader, default_threads

__all__ = ["Loader", "default_threads"]
