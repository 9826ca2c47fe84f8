"""Multi-source fusion: per-sample joins of sources."""

from torchloom.fusion.joined import JoinedDataset, JoinError, JoinReport
from torchloom.fusion.recordings import SyncedRecordings
from torchloom.fusion.table import TableDataset
from torchloom.fusion.timesync import SyncReport, TimestampError, TimeSync

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
