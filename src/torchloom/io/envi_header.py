"""ENVI ``.hdr`` headers: a small, strict parser that names the line or key of every fault.

A header is ``ENVI`` on its first line, then ``key = value`` lines; a value in braces
(``wavelength = { 400.0, 410.5 }``) may span lines and hold braces of its own, as instrument
software writes them in a ``description`` (``{Scan {run 3} of line 2}``): the value ends at the
brace that closes the first. Lines starting with ``;`` are comments, inside a value too (as
Spectral Python and GDAL read them); the lines of a value are stripped, as Spectral strips them. Keys
are matched case-insensitively. ``samples``, ``lines``, ``bands``, ``data type`` and ``interleave``
are required; ``byte order`` defaults to 0 (little-endian) and ``header offset`` to 0. Whatever the
bytes, parsing ends in an :class:`EnviHeader` or a :class:`HeaderError` naming the file and where
it went wrong: never another exception, a hang or a shape the header did not declare.

Example:
    >>> import os, tempfile
    >>> from torchloom.io import read_header
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "x.hdr")
    ...     _ = open(path, "w").write("ENVI\\nsamples = 4\\nlines = 3\\nbands = 2\\ndata type = 2\\n"
    ...                           "interleave = bil\\nwavelength = {400, 500.5}\\n")
    ...     header = read_header(path)
    >>> header.shape, header.dtype.str, header.wavelengths.tolist()
    ((3, 4, 2), '<i2', [400.0, 500.5])
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from torchloom.errors import HeaderError

#: ENVI ``data type`` codes and the numpy types they store (byte order set by ``byte order``).
ENVI_DTYPES = {
    1: "u1",
    2: "i2",
    3: "i4",
    4: "f4",
    5: "f8",
    6: "c8",
    9: "c16",
    12: "u2",
    13: "u4",
    14: "i8",
    15: "u8",
}
INTERLEAVES = ("bsq", "bil", "bip")
#: Keys whose value the reader relies on: a header giving one twice is refused as ambiguous.
STRUCTURAL_KEYS = (
    "samples",
    "lines",
    "bands",
    "data type",
    "interleave",
    "byte order",
    "header offset",
    "data file",
    "wavelength",
    "band names",
)
#: More digits than this in a dimension or offset is not a real file (and keeps int() cheap).
MAX_DIGITS = 15
_INTEGER = re.compile(rf"\+?[0-9]{{1,{MAX_DIGITS}}}")
_BRACES = re.compile(r"[{}]")


@dataclass(frozen=True)
class EnviHeader:
    """What an ENVI header declares. ``fields`` holds every key's raw text (lower-cased keys).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io import read_header, write_envi
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_envi(os.path.join(folder, "a.img"), np.zeros((2, 3, 4), np.uint16))
        ...     header = read_header(os.path.join(folder, "a.hdr"))
        >>> header.shape, header.interleave, header.fields["data type"]
        ((2, 3, 4), 'bsq', '12')
    """

    path: str
    lines: int
    samples: int
    bands: int
    data_type: int
    interleave: str
    byte_order: int
    header_offset: int
    data_file: str | None
    wavelengths: np.ndarray | None
    wavelength_units: str | None
    band_names: tuple[str, ...] | None
    fields: dict[str, str] = field(repr=False)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(lines, samples, bands)``."""
        return self.lines, self.samples, self.bands

    @property
    def dtype(self) -> np.dtype:
        """The stored values' numpy type, in the file's byte order."""
        return np.dtype(("<" if self.byte_order == 0 else ">") + ENVI_DTYPES[self.data_type])

    @property
    def data_bytes(self) -> int:
        """The size the data file must have, the offset plus every value."""
        return self.header_offset + self.lines * self.samples * self.bands * self.dtype.itemsize


def parse_header(data: bytes, path: str | os.PathLike[str]) -> EnviHeader:
    """Parse a header's bytes (``path`` names it in errors).

    Example:
        >>> try:
        ...     parse_header(b"ENVI\\nsamples = -1\\n", "bad.hdr")
        ... except HeaderError as error:
        ...     print(error.reason)
        line 2: samples = '-1' is not a whole number >= 1
    """
    path = os.fspath(path)
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    fields, where = _split_fields(text, path)
    return _typed_header(fields, where, path)


def _split_fields(text: str, path: str) -> tuple[dict[str, str], dict[str, int]]:
    """Every ``key = value`` of the header, and the line each key starts on."""
    lines = text.splitlines()
    first = next((number for number, line in enumerate(lines) if line.strip()), None)
    if first is None or lines[first].strip() != "ENVI":
        raise HeaderError(path, "not an ENVI header: its first line must be 'ENVI'")
    fields: dict[str, str] = {}
    where: dict[str, int] = {}
    number = first + 1
    while number < len(lines):
        start = number
        line = lines[number].strip()
        number += 1
        if not line or line.startswith(";"):
            continue
        key, equals, value = line.partition("=")
        key = " ".join(key.split()).lower()
        if not equals or not key:
            raise HeaderError(path, f"line {start + 1}: expected 'key = value', got {line[:80]!r}")
        value = value.strip()
        if value.startswith("{"):
            value, number = _braced(lines, start, key, path)
        if key in fields and key in STRUCTURAL_KEYS:
            raise HeaderError(path, f"line {start + 1}: {key!r} is given twice (first on line {where[key]})")
        fields[key], where[key] = value, start + 1
    return fields, where


def _braced(lines: list[str], start: int, key: str, path: str) -> tuple[str, int]:
    """The text inside the braces of the value of ``key`` opening on line ``start`` (0-based), its
    lines stripped and comment lines left out, and the number of the line after it."""
    text = lines[start].partition("=")[2].strip()
    parts: list[str] = []
    depth, number = 0, start + 1
    while True:
        for brace in _BRACES.finditer(text):
            depth += 1 if brace.group() == "{" else -1
            if depth == 0:
                parts.append(text[: brace.start()])
                if text[brace.end() :].strip():
                    raise HeaderError(path, f"line {number}: unexpected text after the '}}' of {key!r}")
                return "\n".join(parts)[1:].strip(), number
        parts.append(text)
        text = ";"
        while text.startswith(";"):
            if number >= len(lines):
                raise HeaderError(path, f"line {start + 1}: the '{{' of {key!r} is never closed")
            text = lines[number].strip()
            number += 1


def _typed_header(fields: dict[str, str], where: dict[str, int], path: str) -> EnviHeader:
    def integer(key: str, default: int | None = None, minimum: int = 1) -> int:
        if key not in fields:
            if default is None:
                raise HeaderError(path, f"the required key {key!r} is missing")
            return default
        text = fields[key]
        if not _INTEGER.fullmatch(text) or int(text) < minimum:
            raise HeaderError(
                path, f"line {where[key]}: {key} = {text[:40]!r} is not a whole number >= {minimum}"
            )
        return int(text)

    samples, lines, bands = integer("samples"), integer("lines"), integer("bands")
    data_type = integer("data type")
    if data_type not in ENVI_DTYPES:
        raise HeaderError(
            path, f"line {where['data type']}: data type = {data_type} is not one of {sorted(ENVI_DTYPES)}"
        )
    if "interleave" not in fields:
        raise HeaderError(path, f"the required key 'interleave' is missing (one of {INTERLEAVES})")
    interleave = fields["interleave"].strip().lower()
    if interleave not in INTERLEAVES:
        raise HeaderError(
            path, f"line {where['interleave']}: interleave = {interleave[:40]!r} is not one of {INTERLEAVES}"
        )
    byte_order = integer("byte order", default=0, minimum=0)
    if byte_order not in (0, 1):
        raise HeaderError(path, f"line {where['byte order']}: byte order = {byte_order} must be 0 or 1")
    return EnviHeader(
        path=path,
        lines=lines,
        samples=samples,
        bands=bands,
        data_type=data_type,
        interleave=interleave,
        byte_order=byte_order,
        header_offset=integer("header offset", default=0, minimum=0),
        data_file=fields.get("data file") or None,
        wavelengths=_wavelengths(fields, where, path, bands),
        wavelength_units=fields.get("wavelength units") or None,
        band_names=_band_names(fields, where, path, bands),
        fields=fields,
    )


def _listed(
    fields: dict[str, str], where: dict[str, int], path: str, key: str, bands: int
) -> list[str] | None:
    """The comma-separated items of ``key``, which must number ``bands``; ``None`` when absent."""
    if key not in fields:
        return None
    items = [item.strip() for item in fields[key].split(",")]
    if items and not items[-1]:
        items.pop()  # a trailing comma, as some writers leave, ends the list
    if not all(items):
        raise HeaderError(path, f"line {where[key]}: {key!r} has an empty item (two commas in a row)")
    if len(items) != bands:
        raise HeaderError(path, f"line {where[key]}: {key!r} lists {len(items)} values for {bands} bands")
    return items


def _wavelengths(fields: dict[str, str], where: dict[str, int], path: str, bands: int) -> np.ndarray | None:
    items = _listed(fields, where, path, "wavelength", bands)
    if items is None:
        return None
    values = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise HeaderError(
                path, f"line {where['wavelength']}: wavelength {item[:40]!r} is not a finite number >= 0"
            )
        values.append(value)
    return np.asarray(values, dtype=np.float64)


def _band_names(
    fields: dict[str, str], where: dict[str, int], path: str, bands: int
) -> tuple[str, ...] | None:
    items = _listed(fields, where, path, "band names", bands)
    return None if items is None else tuple(items)
