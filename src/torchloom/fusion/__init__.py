"""Multi-source fusion: per-sample joins of sources, and time alignment of streams (sync/)."""

from torchloom.fusion.joined import JoinedDataset, JoinError, JoinReport
from torchloom.fusion.recordings import SyncedRecordings
from torchloom.fusion.sync import SyncReport, TimestampError, TimeSync
from torchloom.fusion.table import TableDataset

__all__ = [
    "JoinError",
    "JoinReport",
    "JoinedDataset",
    "SyncReport",
    "SyncedRecordings",
    "TableDataset",
    "TimeSync",
    "TimestampError",
]
