"""Collating samples into batches: the automatic ``collate`` and per-field rules with ``Collate``.

The package is ``collation`` so that ``torchloom.collate`` stays the function every
``DataLoader(collate_fn=torchloom.collate)`` names; the function is here too.
"""

from torchloom.collation.auto import collate
from torchloom.collation.rules import (
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
]
