"""GETs of S3 objects by presigned URL over one aiohttp session: the request s3fs's ``get_object``
sends, for a quarter of its CPU.

botocore builds, signs, sends and parses every ``get_object`` call through its event system: about
1.8 ms of CPU per small object on this project's machines, so that at 64 requests in flight the
client's CPU, not the store's latency, bounds how many objects a second arrive. A URL presigned by
botocore itself (so that addressing style, region, endpoint and credentials are botocore's, as
s3fs configured them) and one plain aiohttp GET cost about 0.45 ms. The response is read as S3
words it: ``200``/``206`` with ``ETag`` and ``Content-Range``, ``304`` for a version still
current, errors as an XML ``<Code>``, which :func:`~torchloom.io.store_requests.classify` sorts as
it sorts botocore's.

Only plain GETs take this way: a filesystem with requester-pays, customer-provided keys or other
extra request arguments goes through ``get_object``, as does every store that is not S3.

Example:
    >>> StoreResponseError("s3://b/k", 503, "SlowDown").response["Error"]["Code"]
    'SlowDown'
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections import OrderedDict
from typing import Any

from torchloom.io.store_requests import Fetched, fetched_from, range_header

# A presigned URL is valid an hour, and used again for the same object for 5 minutes at most
# (credentials that rotate are picked up by the next one); the last 1,024 are kept.
_EXPIRES_S = 3600
_REUSE_S = 300.0
_KEPT_URLS = 1024
_ERROR_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")
# An error's body is read this far for its code (S3's are a few hundred bytes).
_ERROR_BODY_BYTES = 4096


class StoreResponseError(OSError):
    """A store's error response to a presigned GET, shaped as botocore's ``ClientError`` is
    (``response["Error"]["Code"]``, ``response["ResponseMetadata"]["HTTPStatusCode"]``), so that
    it is classified the same way.

    Example:
        >>> StoreResponseError("s3://b/k", 404, "NoSuchKey").response["ResponseMetadata"]
        {'HTTPStatusCode': 404, 'HTTPHeaders': {}}
    """

    def __init__(
        self, url: str, status: int, code: str | None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(f"HTTP {status}{' ' + code if code else ''} for {url!r}")
        self.response = {
            "Error": {"Code": code or str(status)},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": dict(headers or {})},
        }


def presigns(fs: Any) -> bool:
    """Whether ``fs`` (s3fs) can take the presigned way: it has the calls, and no extra request
    arguments (requester-pays, customer keys) that a presigned GET would not carry.

    Example:
        >>> presigns(object())
        False
    """
    return (
        hasattr(fs, "set_session")
        and hasattr(fs, "get_s3")
        and hasattr(fs, "split_path")
        and not getattr(fs, "req_kw", None)
        and not getattr(fs, "s3_additional_kwargs", None)
    )


class PresignedGets:
    """One process's aiohttp session for presigned GETs of one s3fs filesystem (made on the
    event loop that uses it; :meth:`close` on that loop).

    Example:
        >>> PresignedGets(object(), connections=8, connect_timeout=5, read_timeout=15).connections
        8
    """

    def __init__(self, fs: Any, *, connections: int, connect_timeout: float, read_timeout: float) -> None:
        self.fs = fs
        self.connections = connections
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.pid = os.getpid()
        self._session: Any = None
        # Presigned URLs made lately, by object URL (most recent last), with when to stop using them.
        self._urls: OrderedDict[str, tuple[str, float]] = OrderedDict()

    async def get(self, url: str, start: int, end: int | None, unless: str | None) -> Fetched:
        """Bytes ``start`` to ``end`` (exclusive) of the object, one GET; as :func:`s3_get`."""
        import aiohttp  # s3fs's own dependencies: present wherever s3fs is
        import yarl

        signed = await self._signed(url)
        headers: dict[str, str] = {}
        asked = range_header(start, end)
        if asked is not None:
            headers["Range"] = asked
        if unless is not None:
            headers["If-None-Match"] = unless
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections),
                timeout=aiohttp.ClientTimeout(sock_connect=self.connect_timeout, sock_read=self.read_timeout),
                auto_decompress=False,  # the object's bytes as stored
            )
        # yarl would re-quote the signature's escapes: the URL is sent exactly as signed.
        async with self._session.get(yarl.URL(signed, encoded=True), headers=headers) as response:
            status = response.status
            if status >= 300:
                body = await response.content.read(_ERROR_BODY_BYTES)
                found = _ERROR_CODE.search(body)
                code = found.group(1).decode("ascii", "replace") if found else None
                kept = {"content-range": response.headers.get("Content-Range", "")}
                raise StoreResponseError(url, status, code, kept)
            data = await response.read()
            etag = response.headers.get("ETag")
            content_range = response.headers.get("Content-Range")
        return fetched_from(
            data, start, end, ranged=asked is not None, status=status, content_range=content_range, etag=etag
        )

    async def _signed(self, url: str) -> str:
        """A presigned URL of ``url``: one made in the last minutes for the same object (the ranges
        of a cube's patch, a video's blocks), else a new one."""
        now = time.monotonic()
        kept = self._urls.get(url)
        if kept is not None and kept[1] > now:
            self._urls.move_to_end(url)
            return kept[0]
        bucket, key, version = self.fs.split_path(url)
        await self.fs.set_session()
        client = await self.fs.get_s3(bucket)
        params: dict[str, str] = {"Bucket": bucket, "Key": key}
        if version:
            params["VersionId"] = version
        signed: str = await client.generate_presigned_url("get_object", Params=params, ExpiresIn=_EXPIRES_S)
        self._urls[url] = (signed, now + _REUSE_S)
        if len(self._urls) > _KEPT_URLS:
            self._urls.popitem(last=False)
        return signed

    async def close(self) -> None:
        """Close the session (on the loop that made it)."""
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()


def close_on(loop: asyncio.AbstractEventLoop, gets: PresignedGets) -> None:
    """Close ``gets``'s session on ``loop`` if it still runs (what a finalizer calls at exit).

    Example:
        >>> close_on(asyncio.new_event_loop(), PresignedGets(object(), connections=1,
        ...          connect_timeout=1, read_timeout=1))
    """
    if gets.pid != os.getpid() or gets._session is None or loop.is_closed() or not loop.is_running():
        return
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(gets.close(), loop).result(timeout=2)
