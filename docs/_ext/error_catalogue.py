"""``.. error-catalogue::``: every error of :mod:`torchloom.errors`, data faults apart from the rest.

Generated from ``torchloom.errors.__all__`` and the class hierarchy at build time: a new error type
appears in the right table with no edit to the page.
"""

from __future__ import annotations

import builtins
import inspect
from typing import Any

from generated_rst import GeneratedRst
from sphinx.application import Sphinx

import torchloom.errors


def _builtin_bases(error: type[BaseException]) -> str:
    """The built-in exceptions it can also be caught as (``ValueError``, ``OSError``, ...)."""
    bases = [
        base.__name__
        for base in error.__mro__[1:]
        if vars(builtins).get(base.__name__) is base and base not in (Exception, BaseException, object)
    ]
    return ", ".join(f"``{name}``" for name in bases) or " "


def _summary(error: type[BaseException]) -> str:
    doc = inspect.getdoc(error) or ""
    return doc.split("\n\n")[0].replace("\n", " ") or " "


def _table(errors: list[type[BaseException]]) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 25 20 55", ""]
    lines += ["   * - error", "     - also a", "     - meaning"]
    for error in errors:
        lines += [
            f"   * - :py:exc:`~torchloom.errors.{error.__name__}`",
            f"     - {_builtin_bases(error)}",
            f"     - {_summary(error)}",
        ]
    return [*lines, ""]


def catalogue() -> tuple[list[type[BaseException]], list[type[BaseException]]]:
    """The exported errors: ``(data faults, the others)``, each sorted by name."""
    errors = [getattr(torchloom.errors, name) for name in sorted(torchloom.errors.__all__)]
    data = [error for error in errors if issubclass(error, torchloom.errors.DataError)]
    return data, [error for error in errors if error not in data]


class ErrorCatalogue(GeneratedRst):
    """Two tables: the errors a fault policy may skip, and those that always propagate."""

    source = "torchloom.errors"

    def lines(self) -> list[str]:
        data, others = catalogue()
        lines = ["Data faults", "-----------", ""]
        lines += [
            'Subclasses of :py:exc:`~torchloom.errors.DataError`: bad input. With ``on_error="skip"`` '
            "a dataset skips and reports the sample (as it does for an ``OSError`` while reading).",
            "",
            *_table(data),
        ]
        lines += ["Always raised", "-------------", ""]
        lines += ["Settings, misuse and bugs: no fault policy skips them.", "", *_table(others)]
        return lines


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("error-catalogue", ErrorCatalogue)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
