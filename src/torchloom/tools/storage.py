"""How the commands reach DATA in an object store: ``--storage-option`` and ``--storage-options-json``.

Every command that reads a dataset (``doctor``, ``prepare``, ``show``, ``bench``, ``cache``) takes
DATA as a local path or as a URL (``s3://bucket/train``, ``s3://bucket/train/manifest.csv``, any
fsspec URL), with the fsspec ``storage_options`` that ``storage_options=`` takes in the library:

- ``--storage-option KEY=VALUE``, repeatable; VALUE is read as JSON when it parses (``anon=true``
  is ``True``, ``client_kwargs={"endpoint_url": "http://127.0.0.1:9000"}`` a dict), else kept as
  text (``profile=research``); quote a number meant as text (``secret='"0123"'``);
- ``--storage-options-json FILE``: a local JSON object of them (credentials kept out of the shell
  history); ``--storage-option`` keys replace its keys of the same name.

Without either, the store's credentials come from the environment, as fsspec finds them.
Outputs (``--out``, ``--plot``) stay local files: a URL there is a usage error
(:func:`refuse_url_output`), since a report or a cache half-written to a store helps no one.

Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_storage_arguments(parser)
    >>> args = parser.parse_args(["--storage-option", "anon=true", "--storage-option",
    ...                           'client_kwargs={"endpoint_url": "http://127.0.0.1:9000"}'])
    >>> storage_options_of(args)
    {'anon': True, 'client_kwargs': {'endpoint_url': 'http://127.0.0.1:9000'}}
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from torchloom.errors import ConfigError, MissingFileError
from torchloom.io.files import is_url


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """``--storage-option KEY=VALUE`` (repeatable) and ``--storage-options-json FILE``.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_storage_arguments(parser)
        >>> parser.parse_args(["--storage-option", "key=abc"]).storage_option
        [('key', 'abc')]
    """
    parser.add_argument(
        "--storage-option",
        action="append",
        type=storage_option,
        default=[],
        metavar="KEY=VALUE",
        help="an fsspec storage option for DATA given as a URL (s3://bucket/train), e.g. anon=true or "
        "'client_kwargs={\"endpoint_url\": \"http://127.0.0.1:9000\"}'; VALUE is read as JSON when it "
        "parses, else as text; repeat for more",
    )
    parser.add_argument(
        "--storage-options-json",
        metavar="FILE",
        default=None,
        help="a JSON file holding an object of fsspec storage options (--storage-option replaces its keys)",
    )


#: Options that are always text, never read as JSON (credentials, names, addresses).
TEXT_OPTIONS = frozenset(
    {"key", "secret", "token", "username", "password", "profile", "region_name", "endpoint_url"}
    | {"account_name", "account_key"}
)


def storage_option(text: str) -> tuple[str, Any]:
    """An argparse type: ``KEY=VALUE`` as ``(key, value)``, the value read as JSON when it parses.

    Example:
        >>> storage_option("anon=true"), storage_option("profile=research"), storage_option("port=9000")
        (('anon', True), ('profile', 'research'), ('port', 9000))
    """
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. anon=true), got {text!r}")
    if key in TEXT_OPTIONS:  # a secret of digits is still a secret, not a number
        return key, value
    try:
        return key, json.loads(value)
    except ValueError:  # not JSON: the text itself (a profile name, a region)
        return key, value


def storage_options_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The storage options the command line gives: ``--storage-options-json``'s object, then each
    ``--storage-option``; ``None`` when neither is given. A JSON file that cannot be read or does
    not hold an object is a :class:`~torchloom.errors.ConfigError` (a usage error) naming it.

    Example:
        >>> storage_options_of(argparse.Namespace(storage_option=[], storage_options_json=None)) is None
        True
    """
    pairs: list[tuple[str, Any]] = list(getattr(args, "storage_option", None) or [])
    path = getattr(args, "storage_options_json", None)
    if path is None and not pairs:
        return None
    options: dict[str, Any] = {} if path is None else _options_file(path)
    options.update(pairs)
    return options


def _options_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = json.load(handle)
    except OSError as exc:
        raise ConfigError(f"--storage-options-json {path!r} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"--storage-options-json {path!r} is not valid JSON: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"--storage-options-json {path!r} holds a {type(loaded).__name__}; it must hold a JSON "
            'object, e.g. {"anon": true}'
        )
    return loaded


def require_data(data: str, what: str = "a class folder, a split root or a manifest") -> None:
    """Refuse a local DATA that does not exist (a :class:`~torchloom.errors.MissingFileError`); a
    URL is left to the dataset, whose listing or first read names what is missing in the store.

    Example:
        >>> require_data("s3://bucket/train")
        >>> require_data("/no/such/folder")
        Traceback (most recent call last):
        ...
        torchloom.errors.MissingFileError: DATA '/no/such/folder' does not exist; pass a class folder, ...
    """
    if not is_url(data) and not os.path.exists(data):
        raise MissingFileError(f"DATA {data!r} does not exist; pass {what} (or an s3:// URL of one)")


def refuse_url_output(flag: str, value: str | None) -> None:
    """Refuse a URL as an output (``--out``, ``--plot``): outputs are written locally, atomically.

    Example:
        >>> refuse_url_output("--out", "s3://bucket/report")
        Traceback (most recent call last):
        ...
        torchloom.errors.ConfigError: --out 's3://bucket/report' is a URL; outputs are written to ...
    """
    if value is not None and is_url(value):
        raise ConfigError(
            f"{flag} {value!r} is a URL; outputs are written to a local path (atomically), so give one "
            "and copy it to the store afterwards if you need it there"
        )
