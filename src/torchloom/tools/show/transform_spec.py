"""Parse a transform written on the command line, safely: no ``eval``.

A spec is a comma-separated list of calls, ``"RandomResizedCrop(224),HorizontalFlip()"``. One
linear scan splits it at the commas outside brackets and strings, refusing unbalanced brackets,
nesting deeper than :data:`MAX_NESTING` and a call longer than :data:`MAX_PART_CHARS` (so no part
can take the parser's recursion deep or make the whole quadratic); each call is then parsed on its
own with :mod:`ast`. Each call must name one of :data:`ALLOWED_TRANSFORMS` and pass only
literals (numbers, strings, tuples, lists, ``None``, ``True``/``False``), positionally or by
keyword. Anything else (attribute access, names, arithmetic, other functions) is refused with a
:class:`ConfigError` that quotes the offending part and lists the allowed names.

Example:
    >>> from torchloom.errors import ConfigError
    >>> from torchloom.tools.show import parse_transform_spec
    >>> transform = parse_transform_spec("Resize((32, 48)), HorizontalFlip(p=1.0)")
    >>> import numpy as np
    >>> transform(np.zeros((10, 10, 3), np.uint8), np.random.default_rng(0)).shape
    (32, 48, 3)
    >>> try:
    ...     parse_transform_spec("Resize(224), __import__('os')")
    ... except ConfigError as error:
    ...     print(str(error).split(";")[0])
    transform spec part "__import__('os')": '__import__' is not an allowed transform
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from torchloom.errors import ConfigError
from torchloom.transforms import CenterCrop, Compose, HorizontalFlip, RandomResizedCrop, Resize

#: The transforms a spec may name: per-sample image transforms taking only literal settings.
ALLOWED_TRANSFORMS: dict[str, Callable[..., Any]] = {
    "CenterCrop": CenterCrop,
    "HorizontalFlip": HorizontalFlip,
    "RandomResizedCrop": RandomResizedCrop,
    "Resize": Resize,
}

#: Largest output side a spec may ask for (a grid of previews, not a training pipeline).
MAX_OUTPUT_SIDE = 4096
#: Longest call a spec may hold (the longest an allowed transform needs is about 110 characters).
MAX_PART_CHARS = 256
#: Deepest nesting of brackets a spec may hold (a call's arguments hold a tuple at most: 2).
MAX_NESTING = 8
#: The values a literal argument may hold, alone or as the items of a flat tuple or list.
_SCALARS = (int, float, str, type(None))
_OPENING = {"(": ")", "[": "]", "{": "}"}
_EXAMPLE = "'RandomResizedCrop(224),HorizontalFlip()'"


def parse_transform_spec(spec: str) -> Compose | None:
    """The :class:`torchloom.transforms.Compose` a spec describes (``None`` for an empty spec).

    Example:
        >>> from torchloom.tools.show import parse_transform_spec
        >>> parse_transform_spec("Resize(64), HorizontalFlip(p=1.0)")
        Compose([Resize(size=64), HorizontalFlip(p=1.0)])
        >>> parse_transform_spec("  ") is None
        True
    """
    if not spec.strip():
        return None
    return Compose([_build(_parse_part(spec, offset, part), part) for offset, part in split_parts(spec)])


def split_parts(spec: str) -> list[tuple[int, str]]:
    """The calls of ``spec`` with the column each starts at: split at the commas outside brackets and
    strings, in one pass (a trailing comma is allowed, as in a Python list).

    Example:
        >>> split_parts("Resize((4, 5)), CenterCrop(3),")
        [(0, 'Resize((4, 5))'), (16, 'CenterCrop(3)')]
    """
    parts: list[tuple[int, str]] = []
    closing: list[str] = []  # the brackets still open, as the characters that close them
    start = position = 0
    while position < len(spec):
        char = spec[position]
        if char in "'\"":
            position = _string_end(spec, position)
        elif char in _OPENING:
            closing.append(_OPENING[char])
            if len(closing) > MAX_NESTING:
                raise ConfigError(
                    f"transform spec nests brackets deeper than {MAX_NESTING} at column {position}; a call "
                    f"takes numbers, strings or a flat tuple of them, e.g. {_EXAMPLE}"
                )
        elif char in ")]}":
            if not closing or closing.pop() != char:
                raise _not_a_list(spec, f"unmatched {char!r} at column {position}")
        elif char == "," and not closing:
            parts.append((start, spec[start:position]))
            start = position + 1
        position += 1
    if closing:
        raise _not_a_list(spec, f"{len(closing)} bracket(s) left open")
    if spec[start:].strip() or not parts:
        parts.append((start, spec[start:]))
    return [_stripped(spec, offset, part) for offset, part in parts]


def _string_end(spec: str, position: int) -> int:
    """The position of the quote closing the string opened at ``position`` (the end if none does)."""
    quote, position = spec[position], position + 1
    while position < len(spec) and spec[position] != quote:
        position += 2 if spec[position] == "\\" else 1
    return min(position, len(spec))


def _stripped(spec: str, offset: int, part: str) -> tuple[int, str]:
    text = part.strip()
    if not text:
        raise _not_a_list(spec, f"an empty call at column {offset}")
    if len(text) > MAX_PART_CHARS:
        raise ConfigError(
            f'transform spec part "{text[:40]}..." is longer than {MAX_PART_CHARS} characters; a call takes '
            f"a few literal settings, e.g. {_EXAMPLE}"
        )
    return offset + part.index(text[0]), text


def _not_a_list(spec: str, why: str) -> ConfigError:
    shown = spec if len(spec) <= 80 else spec[:77] + "..."
    return ConfigError(
        f"transform spec {shown!r} is not a comma-separated list of calls like {_EXAMPLE} ({why})"
    )


def _parse_part(spec: str, offset: int, part: str) -> ast.expr:
    try:
        return ast.parse(part, mode="eval").body
    except SyntaxError as exc:
        raise _not_a_list(spec, f"{exc.msg} at column {offset + max(0, (exc.offset or 1) - 1)}") from None


def _build(node: ast.expr, source: str) -> Any:
    part = source
    allowed = ", ".join(ALLOWED_TRANSFORMS)
    if not isinstance(node, ast.Call):
        raise ConfigError(
            f'transform spec part "{part}" is not a call; write e.g. Resize(224); allowed: {allowed}'
        )
    if not isinstance(node.func, ast.Name) or node.func.id not in ALLOWED_TRANSFORMS:
        name = node.func.id if isinstance(node.func, ast.Name) else ast.get_source_segment(source, node.func)
        raise ConfigError(
            f'transform spec part "{part}": {name!r} is not an allowed transform; allowed: {allowed}'
        )
    args = [_literal(argument, part, source) for argument in node.args]
    kwargs = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ConfigError(f'transform spec part "{part}": **kwargs are not allowed; name each argument')
        if keyword.arg in kwargs:
            raise ConfigError(f'transform spec part "{part}": {keyword.arg}= is given twice')
        kwargs[keyword.arg] = _literal(keyword.value, part, source)
    if node.func.id != "HorizontalFlip" and (args or "size" in kwargs):
        _check_size(args[0] if args else kwargs["size"], part)
    try:
        return ALLOWED_TRANSFORMS[node.func.id](*args, **kwargs)
    except (TypeError, ValueError, LookupError) as exc:
        raise ConfigError(f'transform spec part "{part}": {exc}') from None


def _check_size(size: Any, part: str) -> None:
    """Refuse a size that is not whole pixels (one side or ``(height, width)``) up to ``MAX_OUTPUT_SIDE``."""
    sides = size if isinstance(size, tuple) else (size,)
    whole = all(isinstance(side, int) and not isinstance(side, bool) for side in sides)
    if not whole or len(sides) not in (1, 2) or (isinstance(size, tuple) and len(sides) != 2):
        raise ConfigError(
            f'transform spec part "{part}": size {size!r} must be a whole number of pixels or a '
            "(height, width) pair of them, e.g. 224 or (224, 160)"
        )
    if max(sides) > MAX_OUTPUT_SIDE:  # sizes below 1 are refused by the transform itself
        raise ConfigError(f'transform spec part "{part}": sizes above {MAX_OUTPUT_SIDE} px are refused here')


def _literal(node: ast.expr, part: str, source: str) -> Any:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        text = ast.get_source_segment(source, node)
        raise ConfigError(
            f'transform spec part "{part}": argument {text!r} is not a literal (a number, string, tuple, '
            "list, True/False or None)"
        ) from None
    items = value if isinstance(value, (tuple, list)) else (value,)
    finite = all(not isinstance(item, float) or math.isfinite(item) for item in items)
    if not finite or not all(isinstance(item, _SCALARS) for item in items):
        text = ast.get_source_segment(source, node)
        raise ConfigError(
            f'transform spec part "{part}": argument {text!r} must be a finite number, a string, True/False, '
            "None, or a flat tuple or list of those"
        )
    # literal_eval gives tuples for "(1, 2)" and lists for "[1, 2]"; transforms take tuples
    return tuple(value) if isinstance(value, list) else value
