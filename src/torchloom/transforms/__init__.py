"""Per-sample transforms with an explicit rng, and batch normalisation."""

from torchloom.transforms.bands import RandomBands, SelectBands, WavelengthBands
from torchloom.transforms.base import (
    Compose,
    DecodePlan,
    Lambda,
    PlannedTransform,
    Transform,
    plan_transform,
)
from torchloom.transforms.geometry import (
    Box,
    CenterCrop,
    HorizontalFlip,
    RandomResizedCrop,
    Resize,
    TransformError,
)
from torchloom.transforms.pca import PCA, PixelSource
from torchloom.transforms.tensor import Normalize, ToTensor, to_chw_tensor

__all__ = [
    "PCA",
    "Box",
    "CenterCrop",
    "Compose",
    "DecodePlan",
    "HorizontalFlip",
    "Lambda",
    "Normalize",
    "PixelSource",
    "PlannedTransform",
    "RandomBands",
    "RandomResizedCrop",
    "Resize",
    "SelectBands",
    "ToTensor",
    "Transform",
    "TransformError",
    "WavelengthBands",
    "plan_transform",
    "to_chw_tensor",
]
