"""``.. doctor-schema::``: the keys of doctor's ``report.json``, read from ``REPORT_SCHEMA`` at build
time, so the page cannot drift from what doctor writes and its tests validate."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from generated_rst import GeneratedRst
from sphinx.application import Sphinx

from torchloom.tools.doctor.schema import REPORT_SCHEMA, SCHEMA_VERSION


def _kind(schema: dict[str, Any]) -> str:
    """A schema node in words: its type, its allowed values, its bound."""
    kind = str(schema.get("type", "any"))
    if kind == "array" and "items" in schema:
        kind = f"array of {_kind(schema['items'])}"
    elif kind == "object" and "additionalProperties" in schema and "properties" not in schema:
        kind = f"object: name → {_kind(schema['additionalProperties'])}"
    if "enum" in schema:
        kind += " (" + ", ".join(f"``{value!r}``" for value in schema["enum"]) + ")"
    if "minimum" in schema:
        kind += f" ≥ {schema['minimum']}"
    return kind


def schema_rows(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, str, bool]]:
    """``(key path, kind, required)`` for every key, depth first; ``[]`` stands for each item."""
    required = set(schema.get("required", ()))
    for name, child in schema.get("properties", {}).items():
        key = f"{path}.{name}" if path else name
        yield key, _kind(child), name in required
        inner = child.get("items", child) if child.get("type") == "array" else child
        yield from schema_rows(inner, f"{key}[]" if inner is not child else key)


class DoctorSchema(GeneratedRst):
    source = "torchloom.tools.doctor.schema.REPORT_SCHEMA"

    def lines(self) -> list[str]:
        lines = [
            f"Schema version {SCHEMA_VERSION}. ``a[]`` is each item of the array ``a``; a key not",
            "marked required may be absent.",
            "",
            ".. list-table::",
            "   :header-rows: 1",
            "   :widths: 40 50 10",
            "",
            "   * - key",
            "     - value",
            "     - required",
        ]
        for key, kind, required in schema_rows(REPORT_SCHEMA):
            lines += [f"   * - ``{key}``", f"     - {kind}", f"     - {'yes' if required else ''}"]
        return [*lines, ""]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("doctor-schema", DoctorSchema)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
