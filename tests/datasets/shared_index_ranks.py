"""A rank of tests/datasets/test_shared_index.py's torchrun test: builds a FolderDataset on a bucket
through its rank's proxy, reads sample 0 and writes what it indexed to ``OUT/rank<rank>.json``.

Usage: ``torchrun --nproc-per-node 2 shared_index_ranks.py URL STORAGE_OPTIONS_JSON OUT``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(url: str, storage_options: str, out: str) -> None:
    import torch.distributed as dist

    from torchloom import FolderDataset
    from torchloom.io import ObjectStore

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        store = ObjectStore(json.loads(storage_options)[rank], backoff=0.01)
        dataset = FolderDataset(url, storage_options=store, progress=False)
        dataset[0]
        Path(out, f"rank{rank}.json").write_text(json.dumps({"paths": dataset.index.paths.to_list()}))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
