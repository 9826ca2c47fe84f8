"""Bad files: left out at construction, raised or skipped when loaded, and a bug that always surfaces."""

import tempfile

from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.errors import TransformError, ValidationFailedError
from torchloom.testing import write_class_folders


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        broken = {"truncated": 1, "empty": 1, "not_an_image": 1}
        write_class_folders(root, [10, 10], size=(96, 96), progress=False, **broken)

        # Construction: validate="header" (the default) reads every header once and leaves out
        # what cannot be an image, listed in .report; strict=True refuses the dataset instead.
        dataset = tl.FolderDataset(root, progress=False)
        print(len(dataset), len(dataset.report.invalid))  # 21 2: the empty and the text file are out
        try:
            tl.FolderDataset(root, strict=True, progress=False)
        except ValidationFailedError as error:
            print(len(error.problems), "invalid sample(s) listed")  # 2 invalid sample(s) listed

        # Loading: a truncated JPEG passes the header check and fails to decode.
        truncated = next(i for i, path in enumerate(dataset.index.paths.to_list()) if "truncated" in path)
        try:
            dataset[truncated]
        except tl.SampleError as error:  # on_error="raise" (the default): index, path, cause chained
            print(error.index == truncated, type(error.__cause__).__name__)  # True DecodeError

        skipping = tl.FolderDataset(root, on_error="skip", progress=False)
        report = tl.FaultReport()
        loader = DataLoader(skipping, batch_size=8, num_workers=2, collate_fn=tl.collate)
        trained = sum(len(batch["label"]) for batch in report.watch(loader))
        print(trained, len(report.skipped))  # 20 1: every worker's skips gathered in one report

        # A bug in user code is not a data fault: no policy skips it.
        buggy = tl.FolderDataset(root, transform=lambda image, rng: None, on_error="skip", progress=False)
        try:
            buggy[0]
        except TransformError as error:
            print(type(error).__name__, "no fault policy skips it" in str(error))  # TransformError True


if __name__ == "__main__":
    main()
