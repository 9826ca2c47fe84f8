"""Collate functions: the automatic ``collate`` and per-field rules with ``Collate``."""

from torchloom.collate.auto import collate, collate_values, stack_tensors
from torchloom.collate.rules import (
    AsList,
    Collate,
    CollateRule,
    CropOrPadVolumes,
    PadImages,
    PadSequences,
    Stack,
)
from torchloom.errors import CollateError

__all__ = [
    "AsList",
    "Collate",
    "CollateError",
    "CollateRule",
    "CropOrPadVolumes",
    "PadImages",
    "PadSequences",
    "Stack",
    "collate",
    "collate_values",
    "stack_tensors",
]
