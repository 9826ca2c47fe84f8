"""The keys of a manifest below a root URL: checked against the root and joined to it, by Arrow.

A row of a manifest on an object store names a key relative to the root prefix (``cat/1.jpg``)
or a URL inside it; :mod:`torchloom.io.object_urls` says when one leads outside. A million rows
are judged by two regular expressions over the whole column and joined by Arrow, in a second at
most; only the keys Arrow cannot judge alone (a whole URL, or one with a ``%`` that may hide a
``..``) go through :func:`resolve_key` one by one. The first row refused is the one named.

Example:
    >>> import pyarrow as pa
    >>> joined, empty = url_keys(pa.chunked_array([["cat/1.jpg", ""]]), "s3://b/train")
    >>> joined.to_pylist(), empty.tolist()
    (['s3://b/train/cat/1.jpg', ''], [1])
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from torchloom.errors import PathOutsideRootError
from torchloom.io.files import is_url
from torchloom.io.object_urls import join_url, normal_url, outside_reason

# Keys Arrow leaves to resolve_key: a whole URL, or a percent-encoded part (it may hide '..').
_NEEDS_A_CLOSER_LOOK = r"^[A-Za-z][A-Za-z0-9+.-]*://|%"
# Plain keys outside the root: a '.' or '..' segment, an empty segment, a leading '/', a
# backslash, a version ('?versionId='), as object_urls words them.
_PLAINLY_OUTSIDE = r"(^|/)\.\.?(/|$)|//|^/|\\|\?versionId="


def url_keys(
    raw: pa.ChunkedArray, root: str, *, allow_outside_root: bool = False
) -> tuple[pa.Array, np.ndarray]:
    """Every row's URL below the root URL ``root`` (``""`` for an empty row), and the empty rows;
    a row leading outside is a :class:`~torchloom.errors.PathOutsideRootError` naming it, unless
    ``allow_outside_root``."""
    values = raw.combine_chunks() if raw.num_chunks else pa.array([], pa.string())
    empty = pc.fill_null(pc.equal(values, ""), True)
    filled = pc.fill_null(values, "")
    special = pc.fill_null(pc.match_substring_regex(filled, _NEEDS_A_CLOSER_LOOK), False)
    joined = pc.binary_join_element_wise(pa.scalar(root + "/"), filled, "")
    refused: list[tuple[int, PathOutsideRootError]] = []
    if not allow_outside_root:
        plain_bad = pc.and_(pc.match_substring_regex(filled, _PLAINLY_OUTSIDE), pc.invert(special))
        bad_rows = np.flatnonzero(pc.and_(plain_bad, pc.invert(empty)).to_numpy(zero_copy_only=False))
        if len(bad_rows):
            first = int(bad_rows[0])
            refused.append((first, _refusal(first, filled[first].as_py(), root)))
    special_rows = np.flatnonzero(pc.and_(special, pc.invert(empty)).to_numpy(zero_copy_only=False))
    replacements: list[str] = []
    for row in special_rows:
        try:
            value = filled[int(row)].as_py()
            replacements.append(resolve_key(int(row), value, root, allow_outside_root=allow_outside_root))
        except PathOutsideRootError as exc:
            refused.append((int(row), exc))
            break
    if refused:
        raise min(refused, key=lambda pair: pair[0])[1]
    if len(special_rows):
        mask = np.zeros(len(values), dtype=bool)
        mask[special_rows] = True
        joined = pc.replace_with_mask(joined, pa.array(mask), pa.array(replacements, pa.string()))
    empty_rows = np.flatnonzero(empty.to_numpy(zero_copy_only=False))
    if len(empty_rows):
        joined = pc.if_else(empty, pa.scalar(""), joined)
    return joined, empty_rows


def resolve_key(row: int, value: str, root: str, *, allow_outside_root: bool = False) -> str:
    """The URL of ``value`` (a key relative to the root URL ``root``, or a URL inside it), refused
    when it leads outside the root, naming row ``row``.

    Example:
        >>> resolve_key(0, "S3://b/train/x.jpg", "s3://b/train")
        's3://b/train/x.jpg'
    """
    if not allow_outside_root:
        why = outside_reason(value, root)
        if why is not None:
            raise PathOutsideRootError(row, value, root, why)
    return normal_url(value) if is_url(value) else join_url(root, value)


def _refusal(row: int, value: str, root: str) -> PathOutsideRootError:
    """The error naming why row ``row``'s key ``value`` leads outside the root URL."""
    return PathOutsideRootError(row, value, root, outside_reason(value, root) or "leads outside the root")
