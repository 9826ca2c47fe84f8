"""Photos, prices and token lists joined per product; images padded with masks, a missing title masked."""

import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.datasets import JoinKey
from torchloom.fusion import JoinedDataset
from torchloom.testing import write_class_folders


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(root, [1, 1], size=(96, 96), progress=False)
        files = ["class_0/000000.jpg", "class_1/000000.jpg"]
        photos = pa.table({"photo": files, "defect": ["scratch", "ok"]})
        pq.write_table(photos, f"{root}/photos.parquet")

        fields = [JoinKey("photo", name="sku"), tl.Image("photo"), tl.Label("defect")]
        images = tl.ManifestDataset(f"{root}/photos.parquet", fields=fields, progress=False)
        prices = pa.table({"sku": files[::-1], "price": [4.5, 2.0]})  # in another order
        titles = pa.table({"sku": files[:1], "tokens": [[17, 4, 9]]})  # the second product has none
        shop = JoinedDataset(
            {"photo": images, "prices": prices, "text": titles}, on="sku", how="left", missing="mask"
        )
        to_batch = tl.Collate({"image": tl.PadImages(multiple_of=32), "tokens": tl.PadSequences(pad_value=0)})
        batch = next(iter(DataLoader(shop, batch_size=2, num_workers=2, collate_fn=to_batch)))
        print(batch["image"].shape, batch["image_mask"].shape, batch["price"].tolist())
        # torch.Size([2, 3, 96, 96]) torch.Size([2, 96, 96]) [2.0, 4.5]: prices joined by key, not by row
        print(batch["tokens"].tolist(), batch["text_present"].tolist())
        # [[17, 4, 9], [0, 0, 0]] [True, False]: the missing title padded and flagged


if __name__ == "__main__":
    main()
