"""Multi-source fusion: per-sample joins of sources, and time alignment of streams."""

from torchloom.errors import JoinError
from torchloom.fusion.joined import JoinedDataset, JoinReport
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
