"""Multi-source fusion: per-sample joins of sources, and time alignment of streams (sync/)."""

from torchloom.fusion.joined import JoinedDataset, JoinError, JoinReport
from torchloom.fusion.recordings import SyncedRecordings
from torchloom.fusion.sync import SyncReport, TimestampError, TimeSync

__all__ = [
    "JoinError",
    "JoinReport",
    "JoinedDataset",
    "SyncReport",
    "SyncedRecordings",
    "TimeSync",
    "TimestampError",
]
