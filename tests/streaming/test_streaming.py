"""StreamDataset: every record exactly once across ranks and workers; fsspec shards; shuffling."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from distributed import run_ranks
from subjects import write_shards
from torchloom import StreamDataset
from torchloom.errors import ManifestError
from torchloom.resume.distributed import assignment


def ids(dataset: StreamDataset, num_workers: int) -> list[int]:
    loader = DataLoader(dataset, batch_size=None, num_workers=num_workers)
    return [int(record["id"]) for record in loader]


@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("sizes", [[5, 7, 0, 9, 4, 6], [13, 0], [20]])
def test_exactly_once_single_rank(tmp_path: Path, num_workers: int, sizes: list[int]) -> None:
    shards = write_shards(tmp_path, sizes)
    assert Counter(ids(StreamDataset(shards), num_workers)) == Counter(range(sum(sizes)))


@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("sizes", [[5, 7, 0, 9, 4, 6], [13, 0, 4]])
def test_exactly_once_across_two_simulated_ranks(tmp_path: Path, num_workers: int, sizes: list[int]) -> None:
    shards = write_shards(tmp_path, sizes)
    seen = [i for rank in range(2) for i in ids(StreamDataset(shards, rank=rank, world_size=2), num_workers)]
    assert Counter(seen) == Counter(range(sum(sizes)))


def _rank_ids(rank: int, world_size: int, shards: list[str], num_workers: int) -> list[int]:
    return ids(StreamDataset(shards), num_workers)


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_exactly_once_under_gloo_ranks(tmp_path: Path, num_workers: int) -> None:
    shards = write_shards(tmp_path, [6, 0, 3])
    results = run_ranks(_rank_ids, 2, shards, num_workers)
    assert Counter(results[0] + results[1]) == Counter(range(9))


def test_assignment_covers_every_record_position() -> None:
    for shards in range(1, 6):
        for consumers in range(1, 8):
            cells = Counter()
            for consumer in range(consumers):
                for shard, group, position in assignment(shards, consumers, consumer):
                    for record in range(position, 30, group):
                        cells[(shard, record)] += 1
            assert set(cells.values()) == {1} and len(cells) == shards * 30


def test_fsspec_memory_shards_and_other_formats(tmp_path: Path) -> None:
    with fsspec.open("memory://bucket/a.jsonl", "wt") as handle:
        handle.write('{"id": 0}\n\n{"id": 1}\n')
    table = pa.table({"id": [2, 3, 4]})
    pq.write_table(table, tmp_path / "b.parquet", row_group_size=2)
    (tmp_path / "c.csv").write_text("id\n5\n6\n")
    shards = ["memory://bucket/a.jsonl", str(tmp_path / "b.parquet"), str(tmp_path / "c.csv")]
    assert sorted(ids(StreamDataset(shards), 0)) == list(range(7))
    custom = StreamDataset(["x", "y"], reader=lambda shard: iter([{"id": shard}]))
    assert [r["id"] for r in custom] == ["x", "y"]


def test_shuffle_buffer_is_seeded_by_epoch_and_complete(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, [50, 50])
    dataset = StreamDataset(shards, shuffle_buffer=16, seed=1)
    first = ids(dataset, 0)
    assert sorted(first) == list(range(100)) and first != list(range(100))
    assert ids(dataset, 0) == first
    dataset.set_epoch(1)
    assert ids(dataset, 0) != first


def test_bad_shards(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no built-in reader"):
        StreamDataset([str(tmp_path / "a.xlsx")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n{oops\n')
    with pytest.raises(ManifestError, match="line 2"):
        list(StreamDataset([str(bad)]))
    with pytest.raises(ValueError, match="at least one shard"):
        StreamDataset([])


@pytest.mark.parametrize("shuffle_buffer", [0, 6])
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("stop", [0, 1, 5, 12])
def test_resume_through_stateful_dataloader(
    tmp_path: Path, num_workers: int, stop: int, shuffle_buffer: int
) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    shards = write_shards(tmp_path, [11, 0, 17, 9, 13])

    def loader() -> StatefulDataLoader:
        return StatefulDataLoader(
            StreamDataset(shards, shuffle_buffer=6, seed=2), batch_size=4, num_workers=num_workers
        )

    full = [i for batch in loader() for i in batch["id"].tolist()]
    first = loader()
    iterator = iter(first)
    seen = [i for _ in range(stop) for i in next(iterator)["id"].tolist()]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    seen += [i for batch in resumed for i in batch["id"].tolist()]
    assert seen == full and sorted(full) == list(range(50))


def test_resume_without_shuffle_starts_at_the_saved_shard() -> None:
    opened: list[str] = []

    def reader(shard: str) -> Iterator[dict[str, int]]:
        opened.append(shard)
        return iter([{"id": int(shard) * 10 + i} for i in range(3)])

    dataset = StreamDataset(["0", "1", "2", "3"], reader=reader)
    iterator = iter(dataset)
    first = [next(iterator)["id"] for _ in range(8)]
    state = dataset.state_dict()
    assert state["entry"] == 2 and state["offset"] == 2 and first[-1] == 21
    resumed = StreamDataset(["0", "1", "2", "3"], reader=reader)
    resumed.load_state_dict(state)
    opened.clear()
    assert [r["id"] for r in resumed] == [22, 30, 31, 32] and opened == ["2", "3"]


def test_a_rollback_load_after_a_later_epoch_warns_and_set_epoch_rolls_back(tmp_path: Path) -> None:
    """A stream's workers cannot tell an old set_epoch from a new one: the last one keeps competing
    with a load; the load that loses says so, and set_epoch(the checkpoint's epoch) resumes it."""
    shards = write_shards(tmp_path, [4, 4, 4])
    dataset = StreamDataset(shards, shuffle_buffer=3, seed=1)
    dataset.set_epoch(1)
    iterator = iter(dataset)
    taken = [next(iterator)["id"] for _ in range(5)]
    state = dataset.state_dict()
    epoch_one = taken + [record["id"] for record in iterator]
    dataset.set_epoch(2)
    epoch_two = [record["id"] for record in dataset]
    dataset.load_state_dict(state)
    with pytest.warns(UserWarning, match=r"epoch 1 \(5 records in\) was loaded but is not resumed") as caught:
        assert [record["id"] for record in dataset] == epoch_two
    assert "call set_epoch(1)" in str(caught[0].message)
    dataset.load_state_dict(state)
    dataset.set_epoch(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert taken + [record["id"] for record in dataset] == epoch_one
