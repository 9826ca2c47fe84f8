"""Product photo + title text + numeric fields + label, joined per product and batched with masks.

A shop's data usually lives in several files: photos listed in a manifest with their category,
prices and weights in a CSV, titles in a JSONL export. Some products lack a title or a price.
This example generates such files, joins them on the product id, and batches them with
variable-size photos padded (not resized) and titles tokenised and padded, with masks, using
DataLoader(num_workers=2).

Run: ``python examples/multimodal_products.py``
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import simplejpeg
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.collation import AsList
from torchloom.datasets import JoinKey
from torchloom.fusion import JoinedDataset
from torchloom.testing import synthetic_image

CATEGORIES = ("bolt", "nut", "washer")


def write_shop(root: str, products: int = 48, seed: int = 0) -> None:
    """Photos of varying sizes, a photo manifest, a price CSV and a title JSONL, with gaps."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "photos"), exist_ok=True)
    manifest, prices, titles = [], [], []
    for product in range(products):
        category = int(rng.integers(len(CATEGORIES)))
        height, width = int(rng.integers(48, 97)), int(rng.integers(48, 97))
        photo = f"photos/{product:04d}.jpg"
        image = synthetic_image(rng, height, width, category)
        with open(os.path.join(root, photo), "wb") as handle:
            handle.write(simplejpeg.encode_jpeg(image))
        manifest.append({"id": product, "photo": photo, "category": CATEGORIES[category]})
        if product % 7 != 3:  # some products have no price row
            prices.append(
                {
                    "id": product,
                    "price": round(float(rng.uniform(0.1, 20)), 2),
                    "weight": round(float(rng.uniform(1, 500)), 1),
                }
            )
        if product % 5 != 2:  # and some have no title
            titles.append(
                {
                    "id": product,
                    "title": f"{CATEGORIES[category]} M{product % 12 + 3} steel " * (product % 3 + 1),
                }
            )
    pa_csv.write_csv(pa.Table.from_pylist(manifest), os.path.join(root, "photos.csv"))
    pa_csv.write_csv(pa.Table.from_pylist(prices), os.path.join(root, "prices.csv"))
    with open(os.path.join(root, "titles.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in titles)


class TokenizeThenPad:
    """A custom collate rule: byte-level token ids for raw text, then PadSequences."""

    def __init__(self, max_length: int = 32) -> None:
        self.pad = tl.PadSequences(pad_value=0, max_length=max_length)

    def __call__(self, field: str, values: list[Any], samples: list[Mapping[str, Any]]) -> dict[str, Any]:
        tokens = [[byte + 1 for byte in text.encode("utf-8")] for text in values]  # 0 is padding
        return self.pad(field, tokens, samples)


def build_loader(
    root: str, batch_size: int = 8, num_workers: int = 2
) -> tuple[JoinedDataset, DataLoader[Any]]:
    photos = tl.ManifestDataset(
        os.path.join(root, "photos.csv"),
        fields=[JoinKey("id"), tl.Image("photo"), tl.Label("category", classes=list(CATEGORIES))],
        progress=False,
    )
    joined = JoinedDataset(
        {
            "photo": photos,
            "prices": os.path.join(root, "prices.csv"),
            "text": os.path.join(root, "titles.jsonl"),
        },
        on="id",
        how="left",
        missing="mask",
    )
    collate = tl.Collate(
        {"image": tl.PadImages(multiple_of=32), "title": TokenizeThenPad(), "path": AsList()}
    )
    keys = [tl.SampleKey(i, epoch=0) for i in range(len(joined))]
    loader = DataLoader(
        joined, sampler=keys, batch_size=batch_size, num_workers=num_workers, collate_fn=collate
    )
    return joined, loader


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="torchloom-shop-") as root:
        write_shop(root)
        joined, loader = build_loader(root)
        batch = next(iter(loader))
        print(joined)
        for name in (
            "image",
            "image_mask",
            "image_size",
            "label",
            "price",
            "prices_present",
            "title",
            "title_mask",
            "title_length",
            "text_present",
        ):
            value = batch[name]
            print(f"{name:15s} {tuple(value.shape)} {value.dtype}")
        print("batches:", sum(1 for _ in loader))


if __name__ == "__main__":
    main()
