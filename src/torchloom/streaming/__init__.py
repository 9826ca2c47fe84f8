"""Streaming datasets over sharded files."""

from torchloom.streaming.dataset import StreamDataset, assignment
from torchloom.streaming.readers import read_csv, read_jsonl, read_parquet, reader_for

__all__ = ["StreamDataset", "assignment", "read_csv", "read_jsonl", "read_parquet", "reader_for"]
