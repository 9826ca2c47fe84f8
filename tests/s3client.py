"""How a test reaches an S3 endpoint: the fsspec ``storage_options`` and a fresh s3fs filesystem."""

from __future__ import annotations

from typing import Any

__all__ = ["filesystem_for", "storage_options_for"]


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
