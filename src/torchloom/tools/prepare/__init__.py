"""A labelled, reproducible train/val(/test) split of a raw image folder, written as a manifest."""

from torchloom.tools.prepare.pipeline import PrepareResult, prepare_dataset
from torchloom.tools.prepare.split import stratified_split

__all__ = ["PrepareResult", "prepare_dataset", "stratified_split"]
