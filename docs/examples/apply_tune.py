"""Build the loader tune() chose: a DataLoader, or the thread Loader."""

import tempfile
from typing import Any

from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.testing import write_class_folders


def loader_from(best: dict[str, Any], dataset: tl.FolderDataset, sampler: tl.IndexSampler) -> Any:
    """``tune().best`` holds every keyword but the dataset, the sampler and the collate function."""
    settings = dict(best)
    if settings.pop("loader", None) == "threads":  # {'loader': 'threads', 'num_threads': ..., ...}
        return tl.Loader(dataset, sampler=sampler, collate_fn=tl.collate, **settings)
    # DataLoader keywords; without collate_fn=tl.collate torch's default collate would get the
    # sample dicts and the Skipped markers of on_error="skip"
    return DataLoader(dataset, sampler=sampler, collate_fn=tl.collate, **settings)


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_class_folders(root, [40, 40], size=(96, 96), progress=False)
        dataset = tl.FolderDataset(root, transform=tl.RandomResizedCrop(64), progress=False)
        result = tl.tune(dataset, batch_size=16, budget_s=5, progress=False)
        loader = loader_from(result.best, dataset, tl.IndexSampler(len(dataset), seed=0))
        # The same for any trial: here the thread Loader's, whichever kind won on this machine.
        threads = next(trial.setting for trial in result.table if trial.setting.get("loader") == "threads")
        other = loader_from(threads, dataset, tl.IndexSampler(len(dataset), seed=0))
        batches = [next(iter(loader)), next(iter(other))]
        print([tuple(batch["image"].shape) for batch in batches])  # [(16, 3, 64, 64), (16, 3, 64, 64)]


if __name__ == "__main__":
    main()
