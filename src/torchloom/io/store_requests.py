"""One request to an object store through fsspec: what it fetched, how it failed, what it cost.

An S3 GET through s3fs is made with one ``get_object`` call, so that its response's ``ETag`` and
``Content-Range`` (the object's size) come with the bytes: no HEAD before a read. Other fsspec
filesystems are asked for the bytes alone (``cat_file`` with a range).

A failure is sorted into what another attempt may fix (throttling, a 5xx, a reset, a timeout) and
what it will not (a missing object, a denied one, a range past the end), by the HTTP status and
S3 error code it carries or by its type, whichever library raised it (s3fs turns S3's errors into
``OSError`` with the original chained; botocore and aiohttp raise their own).

Example:
    >>> from torchloom.io import StoreStats
    >>> stats = StoreStats()
    >>> stats.count("ranged get", 512); stats.count_retry("SlowDown")
    >>> stats.requests["ranged get"], stats.retried["SlowDown"]
    (1, 1)
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: HTTP statuses another attempt may fix: a timeout, throttling, a server error, a gateway's.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: S3 error codes another attempt may fix.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "RequestTimeTooSkewed",
    }
)
# Words in the names of the exception types of lost connections and timeouts (aiohttp's
# ServerDisconnectedError and ClientPayloadError, botocore's EndpointConnectionError,
# ReadTimeoutError and ResponseStreamingError, http.client's IncompleteRead).
_TRANSIENT_TYPE_WORDS = re.compile(r"Timeout|Connection|Disconnected|IncompleteRead|Payload|Streaming")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")

MISSING, DENIED, PAST_END, TRANSIENT, OTHER = "missing", "denied", "past end", "transient", "other"
# Codes of refused credentials, whatever the status (an expired token is a 400).
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "Forbidden",
        "ExpiredToken",
        "InvalidToken",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccountProblem",
        "AllAccessDisabled",
        "TokenRefreshRequired",
    }
)
NOT_MODIFIED = "not modified"


@dataclass(frozen=True)
class Fetched:
    """The bytes a GET returned, with the object's total size and ETag when the store said them.

    Example:
        >>> Fetched(b"abc", size=10, etag='"e1"').size
        10
    """

    data: bytes
    size: int | None = None
    etag: str | None = None
    #: The store answered a conditional GET with ``304``: the version asked about is current.
    not_modified: bool = False


@dataclass
class StoreStats:
    """What an :class:`~torchloom.io.ObjectStore` has asked of its store in this process.

    ``requests`` counts every request sent, by kind (``"get"``, ``"ranged get"``, ``"head"``,
    ``"list"``, ``"open"``); ``retried`` the attempts that failed and were made again, by why
    (``"SlowDown"``, ``"HTTP 503"``, ``"timeout"``, ``"connection lost"``); ``failed`` the
    requests that failed for good, by why; ``bytes`` what the GETs returned.

    Example:
        >>> stats = StoreStats()
        >>> stats.count("get", 100)
        >>> stats.requests["get"], stats.bytes
        (1, 100)
    """

    requests: Counter[str] = field(default_factory=Counter)
    retried: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, kind: str, size: int = 0) -> None:
        """One request of ``kind`` that returned ``size`` bytes."""
        with self._lock:
            self.requests[kind] += 1
            self.bytes += size

    def add_bytes(self, size: int) -> None:
        """``size`` more bytes received."""
        with self._lock:
            self.bytes += size

    def count_retry(self, why: str) -> None:
        """One failed attempt that will be made again."""
        with self._lock:
            self.retried[why] += 1

    def count_failure(self, why: str) -> None:
        """One request that failed for good."""
        with self._lock:
            self.failed[why] += 1

    def summary(self) -> str:
        """One line: requests by kind, retries and failures by why, bytes.

        Example:
            >>> stats = StoreStats()
            >>> stats.count("get", 2048); stats.count_retry("SlowDown")
            >>> stats.summary()
            'requests: 1 get; retried: 1 SlowDown; failed: none; 2,048 bytes'
        """

        def listed(counts: Counter[str]) -> str:
            return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "none"

        return (
            f"requests: {listed(self.requests)}; retried: {listed(self.retried)}; "
            f"failed: {listed(self.failed)}; {self.bytes:,} bytes"
        )

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process starts counting afresh (a lock cannot travel).
        return {"requests": Counter(), "retried": Counter(), "failed": Counter(), "bytes": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def classify(exc: BaseException) -> tuple[str, str]:
    """``(kind, why)`` of a failed request: ``kind`` one of ``"missing"``, ``"denied"``,
    ``"past end"``, ``"transient"`` (another attempt may work) or ``"other"``.

    Example:
        >>> classify(PermissionError("AccessDenied"))
        ('denied', 'PermissionError')
    """
    for error in _chain(exc):
        code, status = _s3_code(error)
        if status == 304 or code in ("304", "NotModified"):
            return NOT_MODIFIED, "HTTP 304"
        if code in TRANSIENT_CODES:
            return TRANSIENT, code
        if status in TRANSIENT_STATUS:
            return TRANSIENT, f"HTTP {status}"
        if code in ("InvalidRange",) or status == 416:
            return PAST_END, code or "HTTP 416"
        if code in ("NoSuchKey", "NoSuchBucket", "NotFound") or status == 404:
            return MISSING, code or "HTTP 404"
        if code in _DENIED_CODES or status == 403:
            return DENIED, code or "HTTP 403"
    for error in _chain(exc):
        if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
            return TRANSIENT, "timeout"
        if isinstance(error, FileNotFoundError):
            return MISSING, type(error).__name__
        if isinstance(error, PermissionError):
            return DENIED, type(error).__name__
        if isinstance(error, ConnectionError):
            return TRANSIENT, "connection lost"
        names = " ".join(kind.__name__ for kind in type(error).__mro__)
        if "NoCredentials" in names or "PartialCredentials" in names:
            return DENIED, "no credentials"
        if _TRANSIENT_TYPE_WORDS.search(names):
            return TRANSIENT, "timeout" if "Timeout" in names else "connection lost"
    return OTHER, type(exc).__name__


def past_end_size(exc: BaseException) -> int | None:
    """The object's size a ``416`` names (``Content-Range: bytes */N``), if it does.

    Example:
        >>> past_end_size(ValueError("no response")) is None
        True
    """
    for error in _chain(exc):
        response = getattr(error, "response", None)
        metadata = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
        headers = metadata.get("HTTPHeaders", {})
        found = re.match(r"bytes \*/(\d+)", str(headers.get("content-range", "")))
        if found is not None:
            return int(found.group(1))
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors it was raised from, at most 8 deep."""
    chain: list[BaseException] = []
    error: BaseException | None = exc
    while error is not None and len(chain) < 8 and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _s3_code(error: BaseException) -> tuple[str | None, int | None]:
    """The S3 error code and HTTP status a botocore ``ClientError`` carries (None, None otherwise)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None, None
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if isinstance(code, str) and code.isdigit() and status is None:
        status = int(code)
    return (code if isinstance(code, str) else None), (status if isinstance(status, int) else None)


async def s3_get(fs: Any, url: str, start: int, end: int | None, unless: str | None = None) -> Fetched:
    """Bytes ``start`` to ``end`` (exclusive; None: to the end) of an S3 object in one GET, with
    the size and ETag its response names; with ``unless`` (an ETag), none when that version is
    current (``If-None-Match``: the store answers 304)."""
    bucket, key, version = fs.split_path(url)
    extra: dict[str, str] = {}
    asked = range_header(start, end)
    if asked is not None:
        extra["Range"] = asked
    if version:
        extra["VersionId"] = version
    if unless is not None:
        extra["IfNoneMatch"] = unless
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **extra)
    body = response["Body"]
    try:
        data = await body.read()
    finally:
        body.close()
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return fetched_from(
        data, start, end, ranged=asked is not None, status=status,
        content_range=response.get("ContentRange"), etag=response.get("ETag"),
    )


def range_header(start: int, end: int | None) -> str | None:
    """The ``Range`` header of bytes ``start`` to ``end`` (exclusive; None: to the end), or None
    for a whole object.

    Example:
        >>> range_header(0, 10), range_header(5, None), range_header(0, None)
        ('bytes=0-9', 'bytes=5-', None)
    """
    if end is not None:
        return f"bytes={start}-{end - 1}"
    return f"bytes={start}-" if start else None


def fetched_from(
    data: bytes,
    start: int,
    end: int | None,
    *,
    ranged: bool,
    status: int | None,
    content_range: object,
    etag: str | None,
) -> Fetched:
    """What a GET's successful response says: the bytes asked for, with the object's size from
    ``Content-Range`` (or the body's length for a whole object), however the GET was sent.

    Example:
        >>> fetched_from(b"abc", 0, 3, ranged=True, status=206, content_range="bytes 0-2/10", etag='"e"').size
        10
    """
    if ranged and status == 200:  # a store that ignores Range sends the whole object
        return Fetched(data[start:end], len(data), etag)
    match = _CONTENT_RANGE.match(content_range) if isinstance(content_range, str) else None
    if match is not None and match.group(3) != "*":
        return Fetched(data, int(match.group(3)), etag)
    return Fetched(data, None if ranged else len(data), etag)
