"""The JSON Schema of ``report.json`` (written by ``torchloom doctor``) and a small validator.

:data:`REPORT_SCHEMA` is a JSON Schema (draft 2020-12 subset) dict; :func:`validate` checks a
document against the subset used here (``type``, ``properties``, ``required``, ``items``,
``additionalProperties``, ``enum``, ``minimum``) and returns the list of violations, each naming
where in the document it is. The schema changes only with :data:`SCHEMA_VERSION`.

Example:
    >>> validate({"a": 1}, {"type": "object", "required": ["b"]})
    ["$: missing required key 'b'"]
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1

_STRING = {"type": "string"}
_COUNT = {"type": "integer", "minimum": 0}
_NUMBER = {"type": "number"}
_TRIPLE = {"type": "array", "items": _NUMBER}
_COUNTS = {"type": "object", "additionalProperties": _COUNT}
_PAIR = {"type": "array", "items": _COUNT}
_FILE = {
    "type": "object",
    "required": ["path", "split"],
    "properties": {"path": _STRING, "split": _STRING},
}


def _object(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "required": sorted(properties), "properties": properties, **extra}


REPORT_SCHEMA: dict[str, Any] = _object(
    {
        "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
        "data": _object(
            {
                "source": _STRING,
                "layout": {"type": "string", "enum": ["classes", "splits", "files", "manifest"]},
                "files": _COUNT,
                "splits": {"type": "array", "items": _STRING},
                "classes": {"type": "array", "items": _STRING},
                "ignored": {"type": "array", "items": _object({"path": _STRING, "reason": _STRING})},
            }
        ),
        "problems": _object(
            {"count": _COUNT, "by_kind": _COUNTS, "messages": {"type": "array", "items": _STRING}}
        ),
        "bad_files": {
            "type": "array",
            "items": _object({"path": _STRING, "split": _STRING, "kind": _STRING, "reason": _STRING}),
        },
        "wrong_extension": {
            "type": "array",
            "items": {  # "reason" only for a format no reader decodes (a HEIC photo named .jpg)
                "type": "object",
                "required": ["extension", "format", "path", "split"],
                "properties": {
                    "path": _STRING,
                    "split": _STRING,
                    "extension": _STRING,
                    "format": _STRING,
                    "reason": _STRING,
                },
            },
        },
        "duplicates": _object(
            {
                "near_max_distance": _COUNT,
                "groups": {
                    "type": "array",
                    "items": _object(
                        {
                            "kind": {"type": "string", "enum": ["exact", "near"]},
                            "splits": {"type": "array", "items": _STRING},
                            "members": {"type": "array", "items": _FILE},
                        }
                    ),
                },
                "pairs": {
                    "type": "array",
                    "items": _object(
                        {
                            "a": _FILE,
                            "b": _FILE,
                            "exact": {"type": "boolean"},
                            "distance": _COUNT,
                            "leak": {"type": "boolean"},
                        }
                    ),
                },
            }
        ),
        "classes": _object(
            {
                "counts": {"type": "object", "additionalProperties": _COUNTS},
                "imbalance_ratio": {"type": ["number", "null"]},
                "sampler": {"type": ["string", "null"]},
            }
        ),
        "images": _object(
            {
                "readable": _COUNT,
                "height": _object({"min": _COUNT, "median": _NUMBER, "max": _COUNT}),
                "width": _object({"min": _COUNT, "median": _NUMBER, "max": _COUNT}),
                "distinct_sizes": _COUNT,
                "most_common_sizes": {"type": "array", "items": _object({"size": _PAIR, "count": _COUNT})},
                "modes": _COUNTS,
                "formats": _COUNTS,
            }
        ),
        "normalize": _object(
            {"over": _STRING, "mean": _TRIPLE, "std": _TRIPLE, "call": {"type": ["string", "null"]}}
        ),
        "quality": _object(
            {
                "thresholds": {"type": "object", "additionalProperties": _NUMBER},
                "counts": _COUNTS,
                "files": {"type": "object", "additionalProperties": {"type": "array", "items": _STRING}},
            }
        ),
        "plots": {"type": "array", "items": _STRING},
    }
)

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def validate(document: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Every way ``document`` breaks ``schema`` (empty when it conforms).

    Example:
        >>> validate([1, "x"], {"type": "array", "items": {"type": "integer"}})
        ['$[1]: expected integer, got str']
    """
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is(document, name) for name in names):
            return [f"{where}: expected {' or '.join(names)}, got {type(document).__name__}"]
    errors: list[str] = []
    if "enum" in schema and document not in schema["enum"]:
        errors.append(f"{where}: {document!r} is not one of {schema['enum']}")
    if "minimum" in schema and isinstance(document, int | float) and document < schema["minimum"]:
        errors.append(f"{where}: {document} is below the minimum {schema['minimum']}")
    if isinstance(document, dict):
        errors += [
            f"{where}: missing required key {key!r}"
            for key in schema.get("required", [])
            if key not in document
        ]
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in document.items():
            if key in properties:
                errors += validate(value, properties[key], f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                errors += validate(value, extra, f"{where}.{key}")
    if isinstance(document, list) and "items" in schema:
        for i, item in enumerate(document):
            errors += validate(item, schema["items"], f"{where}[{i}]")
    return errors


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[name])
