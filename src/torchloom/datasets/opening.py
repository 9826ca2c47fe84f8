"""One rule for the command line's DATA argument: a folder is a class folder (or a split root
read one split at a time), a file a manifest."""

from __future__ import annotations

import os

from typing_extensions import Unpack

from torchloom.datasets.base import IndexedDataset
from torchloom.datasets.folder import FolderDataset
from torchloom.datasets.manifest import ManifestDataset
from torchloom.datasets.options import IndexingOptions
from torchloom.errors import ConfigError


def open_image_dataset(
    data: str | os.PathLike[str], *, split: str | None = None, **options: Unpack[IndexingOptions]
) -> IndexedDataset:
    """A folder (``DATA/<class>/<image>``, or ``DATA/<split>/<class>/<image>`` with ``split``) as a
    :class:`FolderDataset`, anything else as a :class:`ManifestDataset`; ``options`` (the
    :class:`~torchloom.datasets.IndexingOptions`) go to either constructor.

    Example:
        >>> import tempfile
        >>> from torchloom.testing import write_class_folders
        >>> root = tempfile.mkdtemp()
        >>> _ = write_class_folders(root, [2, 1], size=(16, 16), progress=False)
        >>> type(open_image_dataset(root, progress=False)).__name__
        'FolderDataset'
    """
    if os.path.isdir(data):
        return FolderDataset(data, split=split, **options)
    if split is not None:
        raise ConfigError(
            f"split={split!r} (--split) chooses a split folder of a split root; {os.fspath(data)!r} "
            "is a manifest: read the rows of that split instead"
        )
    return ManifestDataset(data, **options)
