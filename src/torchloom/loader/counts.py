"""The one check of the loader tools' whole-number settings (batch sizes, threads, workers).

Example:
    >>> check_count("batch_size", 8, least=1)
    8
    >>> try:
    ...     check_count("num_threads", 0, least=1)
    ... except ConfigError as error:
    ...     print(error)
    num_threads must be an integer >= 1, got 0
"""

from __future__ import annotations

from torchloom.errors import ConfigError


def check_count(name: str, value: object, *, least: int, fix: str = "") -> int:
    """``value`` when it is an int (not a bool) of at least ``least``; else a :class:`ConfigError`
    naming the setting, the value and, with ``fix``, what to do instead."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        advice = f"; {fix}" if fix else ""
        raise ConfigError(f"{name} must be an integer >= {least}, got {value!r}{advice}")
    return value
