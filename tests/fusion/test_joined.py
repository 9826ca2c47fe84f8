"""JoinedDataset: inner and left joins, missing modalities, duplicate keys, key types, workers."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import write_jpeg
from torchloom import Collate, Image, Label, ManifestDataset, PadImages, SampleKey, TableDataset
from torchloom.datasets import JoinKey
from torchloom.errors import JoinError
from torchloom.fusion import JoinedDataset

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multimodal_products.py"


@pytest.fixture
def photos(tmp_path: Path) -> ManifestDataset:
    for product in (10, 11, 12, 13):
        write_jpeg(tmp_path / f"{product}.jpg", height=20 + product, width=30, seed=product)
    (tmp_path / "photos.csv").write_text(
        "id,file,kind\n10,10.jpg,bolt\n11,11.jpg,nut\n12,12.jpg,bolt\n13,13.jpg,nut\n"
    )
    return ManifestDataset(
        tmp_path / "photos.csv", fields=[JoinKey("id"), Image("file"), Label("kind")], progress=False
    )


PRICES = pa.table({"id": [13, 10, 12, 99], "price": [1.5, 2.0, 3.25, 7.0], "label": ["x", "y", "z", "w"]})


def test_inner_join_keeps_keys_in_every_source_in_reference_order(photos: ManifestDataset) -> None:
    joined = JoinedDataset({"photo": photos, "prices": PRICES}, on="id")
    assert len(joined) == 3 and [joined[i]["id"] for i in range(3)] == [10, 12, 13]
    sample = joined[2]
    assert sample["price"] == 1.5 and sample["photo_label"] == 1 and sample["prices_label"] == "x"
    assert sample["image"].shape == (3, 33, 30) and sample["path"].endswith("13.jpg")
    assert "index" in sample and sample["index"] == 2
    assert joined.report.dropped == {
        "keys only in 'prices' (not in 'photo')": 1,
        "keys of 'photo' missing from 'prices'": 1,
    }
    assert joined.report.examples["keys of 'photo' missing from 'prices'"] == [11]


def test_a_join_key_field_gives_the_ids_under_its_name(tmp_path: Path) -> None:
    write_jpeg(tmp_path / "7.jpg")
    (tmp_path / "photos.csv").write_text("photo,kind\n7.jpg,bolt\n")
    photos = ManifestDataset(
        tmp_path / "photos.csv", fields=[JoinKey("photo", name="sku"), Image("photo")], progress=False
    )
    prices = pa.table({"sku": ["7.jpg"], "price": [2.5]})
    joined = JoinedDataset({"photo": photos, "prices": prices}, on="sku")
    assert len(joined) == 1 and joined[0]["sku"] == "7.jpg" and joined[0]["price"] == 2.5
    with pytest.raises(JoinError, match=r"a JoinKey\('id'\) field"):
        JoinedDataset({"photo": _Unlisted(), "prices": PRICES}, on="id")


class _Unlisted(torch.utils.data.Dataset[dict[str, int]]):
    """A dataset that cannot list its keys."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> dict[str, int]:
        return {"id": index}


def test_left_join_drop_and_mask(photos: ManifestDataset) -> None:
    dropped = JoinedDataset({"photo": photos, "prices": PRICES}, on="id", how="left", missing="drop")
    assert len(dropped) == 3
    masked = JoinedDataset({"photo": photos, "prices": PRICES}, on="id", how="left", missing="mask")
    assert len(masked) == 4
    lacking = masked[1]
    assert lacking["id"] == 11 and lacking["prices_present"] is False and lacking["photo_present"] is True
    assert lacking["price"] == 0.0 and lacking["prices_label"] == ""
    assert masked[0]["prices_present"] is True and masked[0]["price"] == 2.0


def test_missing_image_modality_is_zero_filled_with_the_right_shape(photos: ManifestDataset) -> None:
    table = pa.table({"id": [10, 11, 50], "price": [1.0, 2.0, 3.0]})
    joined = JoinedDataset({"prices": table, "photo": photos}, on="id", how="left", missing="mask")
    sample = joined[2]
    assert sample["photo_present"] is False and sample["image"].shape == (3, 30, 30)
    assert sample["image"].dtype == torch.uint8 and int(sample["image"].sum()) == 0 and sample["path"] == ""


def test_duplicate_keys_and_key_type_mismatch(photos: ManifestDataset) -> None:
    duplicated = pa.table({"id": [10, 10, 12, 12, 13], "price": [1.0] * 5})
    with pytest.raises(JoinError, match=r"duplicate 'id' keys: \[10, 12\]"):
        JoinedDataset({"photo": photos, "prices": duplicated}, on="id")
    as_strings = pa.table({"id": ["A10", "A12"], "price": [1.0, 2.0]})
    with pytest.raises(JoinError, match="different types"):
        JoinedDataset({"photo": photos, "prices": as_strings}, on="id")
    canonical = pa.table({"id": ["10", "12"], "price": [1.0, 2.0]})  # ids as text, as CSV gives them
    assert len(JoinedDataset({"photo": photos, "prices": canonical}, on="id")) == 2
    with pytest.raises(JoinError, match="no key column 'sku'"):
        JoinedDataset({"photo": photos, "prices": PRICES}, on="sku")
    with pytest.raises(JoinError, match="cannot list its keys"):
        JoinedDataset({"photo": photos, "plain": torch.utils.data.TensorDataset(torch.zeros(2))}, on="id")
    with pytest.raises(ValueError, match="how"):
        JoinedDataset({"photo": photos, "prices": PRICES}, on="id", how="outer")  # type: ignore[arg-type]


def test_string_keys_and_table_files(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("sku,price\nA-1,3\nB-2,4\n")
    (tmp_path / "b.jsonl").write_text('{"sku": "B-2", "title": "nut"}\n{"sku": "A-1", "title": "bolt"}\n')
    joined = JoinedDataset({"a": str(tmp_path / "a.csv"), "b": tmp_path / "b.jsonl"}, on="sku")
    assert [joined[i] for i in range(2)] == [
        {"sku": "A-1", "index": 0, "price": 3, "title": "bolt"},
        {"sku": "B-2", "index": 1, "price": 4, "title": "nut"},
    ]
    assert TableDataset(tmp_path / "a.csv")[-1] == {"sku": "B-2", "price": 4}


def test_id_edge_cases(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,x\n007,1\n7,2\n")
    (tmp_path / "b.csv").write_text("id,y\n007,10\n8,20\n")
    joined = JoinedDataset({"a": tmp_path / "a.csv", "b": tmp_path / "b.csv"}, on="id")
    assert [joined[i] for i in range(len(joined))] == [{"id": "007", "index": 0, "x": 1, "y": 10}]
    with pytest.raises(JoinError, match="empty 'id'"):
        JoinedDataset({"a": pa.table({"id": ["a", None]}), "b": pa.table({"id": ["a", ""]})}, on="id")
    with pytest.raises(JoinError, match="empty 'id'"):
        JoinedDataset({"a": pa.table({"id": [1, None]}), "b": pa.table({"id": [1, 2]})}, on="id")
    with pytest.raises(JoinError, match="would be named 'b_title'"):
        JoinedDataset(
            {
                "a": pa.table({"id": [1], "title": ["x"], "b_title": ["y"]}),
                "b": pa.table({"id": [1], "title": ["z"]}),
            },
            on="id",
        )


def test_masked_values_are_fresh_per_sample(photos: ManifestDataset) -> None:
    table = pa.table({"id": [10, 50, 51], "price": [1.0, 2.0, 3.0]})
    joined = JoinedDataset({"prices": table, "photo": photos}, on="id", how="left", missing="mask")
    joined[1]["image"].add_(5)
    assert int(joined[2]["image"].sum()) == 0


def test_sample_keys_reach_sources_and_workers_batch_it(photos: ManifestDataset) -> None:
    joined = JoinedDataset({"photo": photos, "prices": PRICES}, on="id", how="left", missing="mask")
    assert joined[SampleKey(1, epoch=4)]["index"].epoch == 4
    loader = DataLoader(
        joined, batch_size=2, num_workers=2, collate_fn=Collate({"image": PadImages(multiple_of=8)})
    )
    batches = list(loader)
    assert [b["id"].tolist() for b in batches] == [[10, 11], [12, 13]]
    assert batches[0]["image"].shape == (2, 3, 32, 32) and batches[0]["image_size"].tolist() == [
        [30, 30],
        [31, 30],
    ]
    assert batches[0]["prices_present"].tolist() == [True, False]


def test_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(os.fspath(EXAMPLE), run_name="__main__")
    printed = capsys.readouterr().out
    assert "image_mask      (8, 96, 96) torch.bool" in printed
    assert "title_length    (8,) torch.int64" in printed
    assert "batches: 6" in printed
