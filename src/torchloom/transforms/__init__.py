"""Per-sample transforms with an explicit rng, and batch normalisation."""

from torchloom.transforms.base import (
    Compose,
    DecodePlan,
    Lambda,
    PlannedTransform,
    Transform,
    plan_transform,
)
from torchloom.transforms.geometry import (
    CenterCrop,
    HorizontalFlip,
    RandomResizedCrop,
    Resize,
    TransformError,
)
from torchloom.transforms.tensor import Normalize, ToTensor, to_chw_tensor

__all__ = [
    "CenterCrop",
    "Compose",
    "DecodePlan",
    "HorizontalFlip",
    "Lambda",
    "Normalize",
    "PlannedTransform",
    "RandomResizedCrop",
    "Resize",
    "ToTensor",
    "Transform",
    "TransformError",
    "plan_transform",
    "to_chw_tensor",
]
