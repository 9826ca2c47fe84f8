"""Streaming datasets over sharded files."""

from torchloom.errors import DistributedSetupError
from torchloom.streaming.dataset import StreamDataset
from torchloom.streaming.readers import BuiltinReader, read_csv, read_jsonl, read_parquet, reader_for

__all__ = [
    "BuiltinReader",
    "DistributedSetupError",
    "StreamDataset",
    "read_csv",
    "read_jsonl",
    "read_parquet",
    "reader_for",
]
