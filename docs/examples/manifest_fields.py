"""A Parquet manifest with declared fields; a path leaving the root is refused, naming the row."""

import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

import torchloom as tl
from torchloom.errors import PathOutsideRootError
from torchloom.testing import write_class_folders


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(root, [1, 1], size=(96, 96), progress=False)  # class_<c>/000000.jpg
        parts = pa.table(
            {
                "photo": ["class_0/000000.jpg", "class_1/000000.jpg"],
                "defect": ["scratch", "ok"],
                "age": [3.0, None],
                "title": ["划痕 part", "clean part"],
            }
        )
        pq.write_table(parts, f"{root}/parts.parquet")
        fields = [tl.Image("photo"), tl.Label("defect"), tl.Numeric(["age"], nan="mean"), tl.Text("title")]
        dataset = tl.ManifestDataset(f"{root}/parts.parquet", fields=fields, progress=False)
        sample = dataset[1]
        print(sample["image"].shape, sample["label"], sample["numeric"], sample["title"])
        # torch.Size([3, 96, 96]) 0 tensor([3.]) clean part: labels sorted (ok=0), the NaN filled by the mean

        escaping = parts.append_column("other", pa.array(["class_0/000000.jpg", "../../etc/passwd"]))
        try:
            tl.ManifestDataset(escaping, root=root, fields=[tl.Image("other")], progress=False)
        except PathOutsideRootError as error:
            print(type(error).__name__, "row", error.row)  # PathOutsideRootError row 1


if __name__ == "__main__":
    main()
