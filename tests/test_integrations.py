"""Distributed by default, wherever the sampler was built: plain torchrun, PyTorch Lightning and
Hugging Face Accelerate, each with 2 CPU processes (gloo), asserting what every rank saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from distributed import run_ranks
from torchloom import BalancedSampler, StreamDataset
from torchloom.samplers import BatchKeySampler

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
LABELS = np.repeat([0, 1, 2], [60, 20, 10])  # as examples/distributed_common.py
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def run_example(command: list[str], out: Path, results: Path | None = None) -> list[dict[str, Any]]:
    """Run an example writing into ``out``; what each rank recorded in ``results`` (default ``out``)."""
    env = {key: value for key, value in os.environ.items() if key not in DISTRIBUTED_ENV}
    done = subprocess.run(
        [*command, str(out)], env=env, capture_output=True, text=True, timeout=240, cwd=EXAMPLES.parent
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    folder = results or out
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(2)]


def torchrun(script: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script]


def assert_each_epoch_split_once(ranks: list[dict[str, Any]], extra_allowed: int = 0) -> None:
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    for epoch in (0, 1):
        order = Counter(BalancedSampler(LABELS, seed=0).global_order(epoch).tolist())
        seen = [r["seen"][str(epoch)] for r in ranks]
        assert len(seen[0]) == len(seen[1]), f"epoch {epoch}: ranks saw {len(seen[0])} and {len(seen[1])}"
        delivered = Counter(seen[0] + seen[1])
        assert order - delivered == Counter(), f"epoch {epoch}: samples lost"
        assert sum((delivered - order).values()) == extra_allowed, f"epoch {epoch}: samples repeated"


def test_lightning_ddp_defaults_give_each_rank_its_share_once(tmp_path: Path) -> None:
    ranks = run_example([sys.executable, str(EXAMPLES / "lightning_ddp.py")], tmp_path)
    assert_each_epoch_split_once(ranks, extra_allowed=ranks[0]["padded"])
    assert len(ranks[0]["seen"]["0"]) == 45


def test_accelerate_prepare_gives_each_rank_its_share_once(tmp_path: Path) -> None:
    ranks = run_example(torchrun(str(EXAMPLES / "accelerate_ddp.py")), tmp_path)
    # 90 samples in batches of 4 on 2 processes: Accelerate's even_batches loops 6 from the start.
    assert_each_epoch_split_once(ranks, extra_allowed=6)
    assert len(ranks[0]["seen"]["0"]) == 48


def test_torchrun_resume_and_streams_with_workers(tmp_path: Path) -> None:
    ranks = run_example(torchrun(str(EXAMPLES / "torchrun_ddp.py")), tmp_path)
    assert_each_epoch_split_once(ranks, extra_allowed=ranks[0]["padded"])
    records = ranks[0]["stream"] + ranks[1]["stream"]
    assert sorted(records) == sorted(part * 10 + i for part in range(6) for i in range(part + 1))


def _built_before_the_process_group(rank: int, world_size: int, folder: str) -> dict[str, Any]:
    for key in ("RANK", "WORLD_SIZE"):  # only the process group can tell
        os.environ.pop(key)
    sampler = BalancedSampler(LABELS, seed=0)
    stream = StreamDataset([str(Path(folder) / f"{part}.jsonl") for part in range(4)])
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    sampler.set_epoch(1)
    stream.set_epoch(1)  # in the main process, after the group exists: the workers learn the rank
    keys = [int(k) for batch in DataLoader(list(range(90)), sampler=sampler, batch_size=8) for k in batch]
    records = [int(r) for batch in DataLoader(stream, batch_size=2, num_workers=2) for r in batch["id"]]
    return {"keys": keys, "records": records, "rank": sampler.rank, "world": sampler.world_size}


def test_objects_built_before_the_process_group_follow_it(tmp_path: Path) -> None:
    for part in range(4):
        (tmp_path / f"{part}.jsonl").write_text("".join(f'{{"id": {part * 10 + i}}}\n' for i in range(3)))
    results = run_ranks(_built_before_the_process_group, 2, str(tmp_path), initialise=False)
    assert [(r["rank"], r["world"]) for r in results] == [(0, 2), (1, 2)]
    order = BalancedSampler(LABELS, seed=0).global_order(1).tolist()
    keys = results[0]["keys"] + results[1]["keys"]
    assert len(results[0]["keys"]) == 45 and sorted(keys) == sorted(order)
    records = results[0]["records"] + results[1]["records"]
    assert sorted(records) == [part * 10 + i for part in range(4) for i in range(3)]


def test_lightning_style_replacement_of_a_batch_sampler_fails_naming_the_setting() -> None:
    replaced = DistributedSampler(list(range(10)), num_replicas=2, rank=0)
    with pytest.raises(TypeError, match="use_distributed_sampler=False"):
        BatchKeySampler(replaced, batch_size=4)  # type: ignore[arg-type]


def test_a_worker_that_cannot_know_its_rank_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.jsonl").write_text('{"id": 1}\n')
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")  # as Lightning's launcher leaves it, with no process group seen
    stream = StreamDataset([str(tmp_path / "a.jsonl")])
    with pytest.raises(RuntimeError, match="cannot tell its rank inside a DataLoader worker"):
        list(DataLoader(stream, num_workers=1))


def test_under_accelerates_batch_shard_the_sampler_yields_the_global_order() -> None:
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    shares = []
    for process in range(2):
        sampler = BalancedSampler(LABELS, seed=0)
        shard = BatchSamplerShard(BatchSampler(sampler, 4, False), num_processes=2, process_index=process)
        shares.append([int(key) for batch in shard for key in batch])
    order = BalancedSampler(LABELS, seed=0).global_order(0).tolist()
    assert len(shares[0]) == len(shares[1]) == 48
    assert Counter(order) - Counter(shares[0] + shares[1]) == Counter()
    plain = BalancedSampler(LABELS, seed=0, rank=0, world_size=2)  # not under a shard: splits itself
    assert len(list(plain)) == 45


def test_lightning_resumes_the_thread_loader_at_an_epoch_end_and_inside_an_epoch(tmp_path: Path) -> None:
    """Lightning saves the Loader's position in its checkpoints and loads it on resume (it calls
    ``iter`` before ``sampler.set_epoch`` then: the Loader draws nothing until the first batch)."""

    def phase(name: str) -> list[dict[str, Any]]:
        command = [sys.executable, str(EXAMPLES / "lightning_loader.py"), name]
        return run_example(command, tmp_path, results=tmp_path / name)

    def share(rank: int, epoch: int) -> list[int]:
        sampler = BalancedSampler(LABELS, seed=0, rank=rank, world_size=2)
        sampler.set_epoch(epoch)
        return [int(key) for key in sampler]

    first, resumed = phase("first"), phase("resume")
    part, rest = phase("part"), phase("rest")
    for rank in range(2):
        assert first[rank]["seen"] == {"0": share(rank, 0)}
        assert resumed[rank]["seen"] == {"1": share(rank, 1)}, "epoch-end checkpoint: the next epoch, whole"
        assert part[rank]["seen"]["0"] + rest[rank]["seen"]["0"] == share(rank, 0), "mid-epoch checkpoint"
        assert len(part[rank]["seen"]["0"]) == 5 * 4
