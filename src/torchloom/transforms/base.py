"""The transform protocol: ``transform(image, rng)`` with an explicit random generator.

A transform may also offer ``plan(height, width, rng)``: it draws its random parameters from the
image's declared size before decoding, so the decoder can use DCT scaling (a JPEG decoded at 1/4
size when a crop of it will be shrunk anyway). Planned or not, the random draws happen in the
same order, so the output is the same either way up to resampling.

Example:
    >>> import numpy as np
    >>> from torchloom.transforms import Compose, HorizontalFlip
    >>> flip = Compose([HorizontalFlip(p=1.0)])
    >>> flip(np.arange(6, dtype=np.uint8).reshape(1, 2, 3), np.random.default_rng(0))[0, 0].tolist()
    [3, 4, 5]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from torchloom.errors import TransformError


@runtime_checkable
class Transform(Protocol):
    """A per-sample transform: ``(image, rng) -> image``.

    Any callable of that signature satisfies it; random choices draw from ``rng``, the sample's own
    generator, so that they repeat for the same sample, epoch and seed whatever the workers.

    Example:
        >>> import numpy as np
        >>> from torchloom.transforms import Compose, Transform
        >>> def maybe_invert(image, rng):
        ...     return 255 - image if rng.random() < 0.5 else image
        >>> pipeline: Transform = Compose([maybe_invert])
        >>> image = np.zeros((2, 2, 3), np.uint8)
        >>> a, b = (pipeline(image, np.random.default_rng(7)) for _ in range(2))
        >>> isinstance(maybe_invert, Transform), bool((a == b).all())
        (True, True)
    """

    def __call__(self, image: Any, rng: np.random.Generator) -> Any: ...


@runtime_checkable
class PlannedTransform(Protocol):
    """A transform that can draw its parameters before the image is decoded.

    A dataset asks its :meth:`plan` for the image's header size, decodes no larger than the plan's
    ``min_size`` (a JPEG at a reduced scale) and finishes with ``plan.finish``.

    Example:
        >>> import numpy as np
        >>> from torchloom.transforms import PlannedTransform, RandomResizedCrop
        >>> crop = RandomResizedCrop(32)
        >>> plan = crop.plan(1200, 1600, np.random.default_rng(0))
        >>> isinstance(crop, PlannedTransform), plan.min_size is not None
        (True, True)
    """

    def plan(self, height: int, width: int, rng: np.random.Generator) -> DecodePlan: ...


@dataclass(frozen=True)
class DecodePlan:
    """The smallest decoded size a transform needs, and how to finish on the decoded image.

    Example:
        >>> import numpy as np
        >>> from torchloom.transforms import Resize
        >>> plan = Resize((24, 32)).plan(480, 640, np.random.default_rng(0))
        >>> plan.min_size, plan.finish(np.zeros((60, 80, 3), np.uint8)).shape
        ((60, 80), (24, 32, 3))
    """

    min_size: tuple[int, int] | None
    finish: Callable[[np.ndarray], Any]


def check_transform(transform: Any) -> None:
    """Refuse, with the fix, a transform that cannot be called as ``transform(image, rng)``.

    The first mistake of a torchvision user is a one-argument transform (``image -> image``).

    Example:
        >>> try:
        ...     check_transform(lambda image: image)
        ... except TransformError as error:
        ...     print("Lambda(" in str(error))
        True
    """
    if transform is None:
        return
    if not callable(transform):
        raise TransformError(f"transform={transform!r} is not callable; pass a callable (image, rng)")
    try:
        parameters = list(inspect.signature(transform).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) < 2:
        raise TransformError(
            f"transform {transform!r} takes {len(positional)} argument(s), but torchloom calls "
            "transform(image, rng) with the sample's random generator (so augmentation depends only on "
            "(seed, epoch, index)). For a one-argument (torchvision-style) callable, wrap it: "
            "torchloom.transforms.Lambda(your_transform); or use torchloom's transforms, which take the rng"
        )


def leaves_input_intact(transform: Any) -> bool:
    """Whether ``transform`` never writes into the array it is given.

    A cache may then hand it a read-only view of its memory map instead of a private copy.
    Transforms declare it with a class attribute ``leaves_input_intact = True``; a
    :class:`Compose` when all of its transforms do; anything else (a :class:`Lambda`, a user's
    callable) is assumed to write in place.

    Example:
        >>> from torchloom.transforms import HorizontalFlip
        >>> leaves_input_intact(Compose([HorizontalFlip()])), leaves_input_intact(Lambda(abs))
        (True, False)
    """
    return bool(getattr(transform, "leaves_input_intact", False))


def plan_transform(transform: Transform, height: int, width: int, rng: np.random.Generator) -> DecodePlan:
    """The transform's plan, or a plan that decodes at full size and calls it.

    Example:
        >>> import numpy as np
        >>> plan = plan_transform(Lambda(lambda image: image), 10, 10, np.random.default_rng(0))
        >>> plan.min_size is None
        True
    """
    plan = getattr(transform, "plan", None)  # not isinstance(): a runtime Protocol check is slow
    if plan is not None:
        result: DecodePlan = plan(height, width, rng)
        return result
    return DecodePlan(None, lambda image: transform(image, rng))


class Compose:
    """Apply transforms in order, passing the same rng to each.

    Example:
        >>> import numpy as np
        >>> from torchloom.transforms import Resize
        >>> Compose([Resize((4, 4))])(np.zeros((8, 8, 3), np.uint8), np.random.default_rng(0)).shape
        (4, 4, 3)
    """

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = list(transforms)

    @property
    def leaves_input_intact(self) -> bool:
        """True when every transform leaves its input intact (see :func:`leaves_input_intact`)."""
        return all(leaves_input_intact(transform) for transform in self.transforms)

    def __call__(self, image: Any, rng: np.random.Generator) -> Any:
        for transform in self.transforms:
            image = transform(image, rng)
        return image

    def plan(self, height: int, width: int, rng: np.random.Generator) -> DecodePlan:
        if not self.transforms:
            return DecodePlan(None, lambda image: image)
        first = plan_transform(self.transforms[0], height, width, rng)
        rest = self.transforms[1:]

        def finish(image: np.ndarray) -> Any:
            result = first.finish(image)
            for transform in rest:
                result = transform(result, rng)
            return result

        return DecodePlan(first.min_size, finish)

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


class Lambda:
    """Wrap a one-argument callable (``image -> image``) as a transform that ignores the rng.

    Example:
        >>> import numpy as np
        >>> Lambda(lambda image: image * 2)(np.ones(2), np.random.default_rng(0)).tolist()
        [2.0, 2.0]
    """

    def __init__(self, function: Callable[[Any], Any]) -> None:
        self.function = function

    def __call__(self, image: Any, rng: np.random.Generator) -> Any:
        return self.function(image)
