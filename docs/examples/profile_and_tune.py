"""Is the training loop waiting for data? Measure it, then measure which loader settings are fastest."""

import tempfile

from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.testing import write_class_folders


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(root, [40, 40], size=(96, 96), progress=False)
        dataset = tl.FolderDataset(root, progress=False)

        profiler = tl.LoaderProfiler(DataLoader(dataset, batch_size=16, num_workers=2, collate_fn=tl.collate))
        for _batch in profiler:
            pass  # your training step
        report = profiler.report()
        print(report.verdict)  # "data-bound: ...% of step time waiting for data; ..."

        result = tl.tune(dataset, batch_size=16, budget_s=5, progress=False)
        print(result.best)  # DataLoader keyword arguments, or {'loader': 'threads', ...} for tl.Loader
        print(len(result.table) > 1, result.best["batch_size"])  # True 16: every trial is in result.table


if __name__ == "__main__":
    main()
