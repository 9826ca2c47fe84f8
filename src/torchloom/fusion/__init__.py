"""Multi-source fusion: per-sample joins of sources."""

from torchloom.fusion.joined import JoinedDataset, JoinError, JoinReport
from torchloom.fusion.table import TableDataset

__all__ = ["JoinError", "JoinReport", "JoinedDataset", "TableDataset"]
