"""Object URLs (``s3://bucket/key``): a dataset's root prefix, rows joined to it, and confinement.

An object store has no folders and no symlinks, only keys, so a row stays inside its root when its
key, read segment by segment, starts with the root's segments and climbs nowhere. The rules:

- a root is ``scheme://bucket[/prefix]``, kept without a trailing ``/``; a bucket is needed;
- a row is a key relative to the root (``cat/1.jpg``), or a whole URL that must lie inside it;
- a segment that is ``.`` or ``..``, raw or percent-encoded (``%2e%2E``), or that hides a ``/`` or
  a ``\\`` behind ``%2f`` or ``%5c``, is refused: some stores and proxies decode keys before they
  look them up, so such a key can name another object than the one checked;
- an empty segment (``a//b``) and a key starting with ``/`` are refused: stores differ on whether
  they name the same object as ``a/b``; so is ``?versionId=`` in a key, which s3fs reads as a
  version of another object;
- a URL of another scheme, another bucket or outside the prefix is outside the root.

Example:
    >>> root = root_url("s3://shop/photos/")
    >>> root, join_url(root, "cat/1.jpg")
    ('s3://shop/photos', 's3://shop/photos/cat/1.jpg')
    >>> outside_reason("s3://shop/photos2/cat/1.jpg", root), outside_reason("cat/%2e%2e/x.jpg", root)
    ('is outside the root prefix', "climbs with '..'")
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from torchloom.errors import ConfigError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Spellings of one protocol that name the same store (fsspec registers both for s3fs).
_SAME_STORE = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}
# The spellings fsspec serves with the very same filesystem and options.
_ONE_SPELLING = {"s3a": "s3", "gcs": "gs"}


def split_url(url: str) -> tuple[str, str]:
    """``(scheme, rest)`` of ``scheme://rest``; a ``ConfigError`` for what is not a URL.

    Example:
        >>> split_url("s3://bucket/a/b.jpg")
        ('s3', 'bucket/a/b.jpg')
    """
    match = _SCHEME.match(url)
    if match is None:
        raise ConfigError(f"{url!r} is not a URL (scheme://bucket/key)")
    return match.group(1).lower(), url[match.end() :]


def root_url(url: str) -> str:
    """``url`` as a dataset root: its scheme lower-cased, no trailing ``/``, every segment checked
    (a ``ConfigError`` naming what is wrong).

    Example:
        >>> root_url("S3://bucket/train/")
        's3://bucket/train'
    """
    scheme, rest = split_url(url)
    rest = rest.rstrip("/")
    if not rest or rest.startswith("/"):
        raise ConfigError(f"{url!r} names no bucket: give scheme://bucket or scheme://bucket/prefix")
    why = _segments_problem(rest)
    if why is not None:
        raise ConfigError(f"dataset root {url!r} {why}: give the prefix plainly, e.g. s3://bucket/train")
    return f"{scheme}://{rest}"


def normal_url(url: str) -> str:
    """``url`` with its scheme lower-cased and one spelling per store (``S3://b/k`` and
    ``s3a://b/k`` -> ``s3://b/k``), so that one object has one name.

    Example:
        >>> normal_url("S3://bucket/Cat/1.jpg")
        's3://bucket/Cat/1.jpg'
    """
    match = _SCHEME.match(url)
    if match is None:
        return url
    scheme = match.group(1).lower()
    return f"{_ONE_SPELLING.get(scheme, scheme)}://{url[match.end() :]}"


def join_url(root: str, key: str) -> str:
    """The URL of ``key`` (relative, ``/``-separated) below the root URL ``root``; the caller checks
    it with :func:`outside_reason` first.

    Example:
        >>> join_url("s3://bucket/train", "dog/2.png")
        's3://bucket/train/dog/2.png'
    """
    return f"{root}/{key}"


def outside_reason(value: str, root: str) -> str | None:
    """Why ``value`` (a key relative to the root URL ``root``, or a whole URL) does not stay inside
    it, or None when it does.

    Example:
        >>> root = "s3://bucket/train"
        >>> [outside_reason(v, root) for v in ("a/1.jpg", "s3://bucket/train/a/1.jpg", "gs://bucket/train/a")]
        [None, None, 'is of another scheme (gs://, the root is s3://)']
    """
    if _SCHEME.match(value) is None:
        if value.startswith(("/", "\\")):
            return "is absolute (a key of an object-store dataset is relative to its root)"
        return _segments_problem(value)
    scheme, rest = split_url(value)
    root_scheme, root_rest = split_url(root)
    if _SAME_STORE.get(scheme, scheme) != _SAME_STORE.get(root_scheme, root_scheme):
        return f"is of another scheme ({scheme}://, the root is {root_scheme}://)"
    why = _segments_problem(rest)
    if why is not None:
        return why
    if rest.split("/", 1)[0] != root_rest.split("/", 1)[0]:
        return "is in another bucket"
    if not rest.startswith(root_rest + "/"):
        return "is outside the root prefix"
    return None


def url_inside(url: str, root: str) -> bool:
    """Whether the URL ``url`` lies below the root URL ``root`` (see :func:`outside_reason`).

    Example:
        >>> url_inside("s3://b/train/x.jpg", "s3://b/train"), url_inside("s3://b/trainer/x.jpg", "s3://b/train")
        (True, False)
    """
    return _SCHEME.match(url) is not None and outside_reason(url, root) is None


def relative_key(url: str, root: str) -> str:
    """The key of ``url`` relative to ``root`` (a URL below it).

    Example:
        >>> relative_key("s3://b/train/cat/1.jpg", "s3://b/train")
        'cat/1.jpg'
    """
    return split_url(url)[1][len(split_url(root)[1]) + 1 :]


def _segments_problem(key: str) -> str | None:
    """Why the ``/``-separated ``key`` could name another object than it seems to, or None."""
    for segment in key.split("/"):
        if segment == "":
            return "has an empty segment ('//')"
        if "\\" in segment:
            return "has a backslash (some stores and tools read it as '/')"
        decoded = unquote(segment)
        if decoded in (".", ".."):
            return "climbs with '..'" if decoded == ".." else "has a '.' segment"
        if "/" in decoded or "\\" in decoded:
            return "hides a '/' or '\\' in a percent-encoded segment"
        if decoded != segment and unquote(decoded) in (".", ".."):
            return "climbs with a doubly encoded '..'"
        if "?versionId=" in segment:  # s3fs reads such a key as another object's version
            return "names an object version ('?versionId=')"
    return None
