"""How a test reaches an S3 endpoint: ``storage_options``, a fresh s3fs filesystem, bucket names."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["S3Bucket", "bucket_name_for", "filesystem_for", "storage_options_for"]

BUCKET_STEM_CHARS = 40


def storage_options_for(endpoint: str) -> dict[str, Any]:
    """The fsspec/s3fs ``storage_options`` for an S3 endpoint that accepts any key."""
    return {"key": "any", "secret": "any", "client_kwargs": {"endpoint_url": endpoint}}


def filesystem_for(storage_options: dict[str, Any], *, attempts: int | None = None, **options: Any) -> Any:
    """A fresh ``s3fs.S3FileSystem`` (never a cached instance) from ``storage_options`` plus
    ``options`` (``S3FileSystem`` keywords; ``config_kwargs`` merge with ``attempts``).

    Args:
        attempts: when given, how many times botocore and s3fs each try a request; ``1`` makes a
            failure visible instead of retried.
    """
    # s3fs is an optional dependency of torchloom; importing it here keeps these modules
    # importable (by conftest.py) where it is absent, and the S3 tests skip.
    import s3fs

    merged = {**storage_options, **options}
    for nested in ("client_kwargs", "config_kwargs"):  # merged, so an override keeps the endpoint
        if nested in storage_options and nested in options:
            merged[nested] = {**storage_options[nested], **options[nested]}
    if attempts is not None:
        config = dict(merged.get("config_kwargs") or {})
        config["retries"] = {**config.get("retries", {}), "total_max_attempts": attempts}
        merged["config_kwargs"] = config
    filesystem = s3fs.S3FileSystem(skip_instance_cache=True, **merged)
    if attempts is not None:
        # s3fs's own retry loop counts from a class attribute, not from a constructor keyword.
        filesystem.retries = attempts
    return filesystem


def bucket_name_for(label: str) -> str:
    """A valid bucket name from ``label`` (a test's name, say), unique to this call."""
    stem = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:BUCKET_STEM_CHARS].strip("-")
    return f"{stem or 'bucket'}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class S3Bucket:
    """A bucket by ``name``, with the forms fsspec and s3fs take it in."""

    NAME: ClassVar[re.Pattern[str]] = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")

    name: str

    @property
    def url(self) -> str:
        """``s3://name``."""
        return f"s3://{self.name}"

    def path(self, key: str) -> str:
        """``name/key``: the path s3fs methods take."""
        return f"{self.name}/{key.lstrip('/')}"

    def url_of(self, key: str) -> str:
        """``s3://name/key``: the URL fsspec takes."""
        return f"s3://{self.path(key)}"
