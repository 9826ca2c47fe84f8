"""One rule for the command line's DATA argument: a folder is a class folder (or a split root
read one split at a time), a file a manifest; a URL is a manifest when its name ends as one does
(``.csv``, ``.parquet``, ...), else a folder (a prefix of objects)."""

from __future__ import annotations

import os

from typing_extensions import Unpack

from torchloom.datasets.base import IndexedDataset
from torchloom.datasets.folder import FolderDataset
from torchloom.datasets.manifest import ManifestDataset
from torchloom.datasets.options import IndexingOptions
from torchloom.errors import ConfigError
from torchloom.io.files import is_url
from torchloom.io.table import MANIFEST_SUFFIXES


def open_image_dataset(
    data: str | os.PathLike[str], *, split: str | None = None, **options: Unpack[IndexingOptions]
) -> IndexedDataset:
    """A folder (``DATA/<class>/<image>``, or ``DATA/<split>/<class>/<image>`` with ``split``) as a
    :class:`FolderDataset`, anything else as a :class:`ManifestDataset`; a URL by its name (the
    module's rule). ``options`` (the :class:`~torchloom.datasets.IndexingOptions`,
    ``storage_options`` included) go to either constructor.

    Example:
        >>> import tempfile
        >>> from torchloom.testing import write_class_folders
        >>> root = tempfile.mkdtemp()
        >>> _ = write_class_folders(root, [2, 1], size=(16, 16), progress=False)
        >>> type(open_image_dataset(root, progress=False)).__name__
        'FolderDataset'
    """
    text = os.fspath(data)
    if os.path.isdir(text) or (is_url(text) and not text.lower().endswith(MANIFEST_SUFFIXES)):
        return FolderDataset(text, split=split, **options)
    if split is not None:
        raise ConfigError(
            f"split={split!r} (--split) chooses a split folder of a split root; {text!r} "
            "is a manifest: read the rows of that split instead"
        )
    return ManifestDataset(text, **options)
