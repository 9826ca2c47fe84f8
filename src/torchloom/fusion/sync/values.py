"""Record values as samples hold them: plain scalars, zeros for masked gaps, interpolation.

Offline and online alignment take every value through these helpers, so both modes give the same
values of the same types: Python scalars for scalar records, numpy arrays otherwise, and float64
(a Python float, or a float64 array) wherever ``policy="interpolate"`` produced the value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchloom.errors import ConfigError

NUMERIC_KINDS = "biuf"


def plain(value: Any) -> Any:
    """A record value as the samples hold it: Python scalars, numpy arrays otherwise.

    Example:
        >>> plain(np.float32(0.5)), plain(3), plain(np.arange(2))
        (0.5, 3, array([0, 1]))
    """
    kind = type(value)
    if kind is float or kind is int or kind is bool or kind is str:
        return value
    if isinstance(value, np.generic):
        return value.item()
    array = np.asarray(value)
    if array.dtype == object:
        return value
    return array.item() if array.ndim == 0 else array


def as_float(value: Any) -> Any:
    """``value`` as float64: a Python float for a scalar, a float64 array otherwise.

    Example:
        >>> as_float(3), as_float(np.array([1, 2]))
        (3.0, array([1., 2.]))
    """
    if isinstance(value, (float, int, np.floating, np.integer)):
        return float(value)
    array = np.asarray(value, dtype=np.float64)
    return array.item() if array.ndim == 0 else array


def mix(low: Any, high: Any, weight: float) -> Any:
    """``low * (1 - weight) + high * weight`` in float64 (``weight`` a Python float).

    Example:
        >>> mix(1, 3, 0.25), mix(np.array([0.0, 4.0]), np.array([2.0, 8.0]), 0.5)
        (1.5, array([1., 6.]))
    """
    if isinstance(low, (float, int, np.floating, np.integer)) and isinstance(
        high, (float, int, np.floating, np.integer)
    ):
        return float(low) * (1.0 - weight) + float(high) * weight
    mixed = np.asarray(low, dtype=np.float64) * (1.0 - weight) + np.asarray(high, dtype=np.float64) * weight
    return mixed.item() if mixed.ndim == 0 else mixed


def zero_value(first: Any, *, interpolate: bool) -> Any:
    """What a masked (invalid) sample holds for a stream whose first record value is ``first``:
    zeros of its shape and dtype (float64 when interpolating); ``None`` for non-numeric values.

    Example:
        >>> zero_value(np.ones(2, dtype=np.float32), interpolate=False), zero_value(7, interpolate=True)
        (array([0., 0.], dtype=float32), 0.0)
    """
    array = np.asarray(first)
    if array.dtype.kind not in NUMERIC_KINDS:
        return None
    zero = np.zeros(array.shape, dtype=np.float64 if interpolate else array.dtype)
    return zero.item() if zero.ndim == 0 else zero


def check_interpolable(name: str, value: Any) -> None:
    """Raise ``TypeError`` when ``policy="interpolate"`` meets a stream of non-numeric values."""
    dtype = np.asarray(value).dtype
    if dtype.kind not in NUMERIC_KINDS:
        raise ConfigError(
            f"stream {name!r}: policy='interpolate' needs numeric values, got dtype {dtype}; "
            "use policy='nearest' or 'previous' for this stream's values"
        )


def as_values(name: str, values: Any, count: int) -> np.ndarray:
    """One stream's values as an array of ``count`` rows; names the stream when they do not fit.

    Example:
        >>> as_values("imu", [[1, 2], [3, 4]], 2).shape
        (2, 2)
    """
    try:
        array = np.asarray(values)
    except ValueError as exc:
        raise ConfigError(f"stream {name!r}: values have mismatched shapes ({exc})") from exc
    if array.dtype == object and count and isinstance(values, list) and any(np.ndim(v) for v in values):
        raise ConfigError(f"stream {name!r}: values have mismatched shapes; give every record the same shape")
    given = array.size if array.ndim == 0 else len(array)
    if array.ndim == 0 or given != count:
        raise ConfigError(
            f"stream {name!r}: {count} timestamps but {given} values; give one value per timestamp"
        )
    return array
