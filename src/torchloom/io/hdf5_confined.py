"""HDF5 objects confined to their own file: what a crafted ``.h5`` could otherwise read elsewhere.

An HDF5 file may point outside itself in three ways, each of which h5py follows silently: an
*external link* (a name that opens an object of another file), *external raw storage* (a
dataset whose values are bytes of other files, at offsets the file chooses) and a *virtual
dataset* (values mapped from datasets of other files). A file handed over with a dataset could
then return the bytes of any file its reader may open, a key beside it included, as pixels.
torchloom refuses all three, as an ENVI ``data file`` outside its folder is refused:
:func:`find_in_file` walks a name one link at a time, following hard and soft links (which stay
in the file) and refusing an external or user-defined link before HDF5 opens its target;
:func:`check_stored_in_file` refuses a dataset whose values are stored outside the file.

Example:
    >>> import h5py, numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("scene/cube", data=np.zeros((2, 2, 2)))
    ...     f["alias"] = h5py.SoftLink("/scene/cube")
    ...     f["elsewhere"] = h5py.ExternalLink("other.h5", "/cube")
    >>> with h5py.File(path, "r") as f:
    ...     find_in_file(f, path, "alias").shape
    ...     find_in_file(f, path, "elsewhere")
    Traceback (most recent call last):
    ...
    torchloom.errors.DecodeError: cannot decode '...a.h5': 'elsewhere' is an external link to '/cube' in \
'other.h5': torchloom reads only what the file itself holds; copy that dataset into this file
"""

from __future__ import annotations

import importlib
from typing import Any

from torchloom.errors import DecodeError

#: Soft links followed for one name before it is taken for a loop (HDF5's own default limit).
MAX_SOFT_LINKS = 16
_COPY_IN = "torchloom reads only what the file itself holds; copy that dataset into this file"


def find_in_file(handle: Any, path: str, name: str) -> Any:
    """The object ``name`` names in the open h5py file ``handle``, reached through hard and soft
    links only; a :class:`KeyError` when there is none, a :class:`DecodeError` naming ``path`` for
    a name that leads out of the file (an external or user-defined link) or loops."""
    h5py = importlib.import_module("h5py")
    pending = [part for part in name.split("/") if part not in ("", ".")]
    current, followed = handle, 0
    while pending:
        part = pending.pop(0)
        if not isinstance(current, h5py.Group):
            raise KeyError(name)
        link = current.get(part, getlink=True)  # the link itself: nothing it points to is opened
        if link is None:
            raise KeyError(name)
        if isinstance(link, h5py.ExternalLink):
            raise DecodeError(
                path, f"{name!r} is an external link to {link.path!r} in {link.filename!r}: {_COPY_IN}"
            )
        if isinstance(link, h5py.SoftLink):
            followed += 1
            if followed > MAX_SOFT_LINKS:
                raise DecodeError(path, f"{name!r} follows more than {MAX_SOFT_LINKS} soft links (a loop?)")
            if link.path.startswith("/"):
                current = handle
            pending = [piece for piece in link.path.split("/") if piece not in ("", ".")] + pending
            continue
        if not isinstance(link, h5py.HardLink):
            raise DecodeError(
                path, f"{name!r} goes through a user-defined link, which torchloom does not follow"
            )
        current = current[part]
    return current


def check_stored_in_file(dataset: Any, path: str, name: str) -> None:
    """Refuse the h5py ``dataset`` when its values are not stored in the file ``path`` itself:
    external raw storage, or a virtual dataset (whose sources may be any file).

    Example:
        >>> import h5py, os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> path = os.path.join(folder, "e.h5")
        >>> with h5py.File(path, "w") as f:
        ...     stored = f.create_dataset("cube", shape=(4,), dtype="u1", external=[("key", 0, 4)])
        ...     check_stored_in_file(stored, path, "cube")
        Traceback (most recent call last):
        ...
        torchloom.errors.DecodeError: cannot decode '...e.h5': dataset 'cube' keeps its values in \
another file ('key', external raw storage): torchloom reads only what the file itself holds; copy \
that dataset into this file
    """
    external = dataset.external
    if external:
        files = ", ".join(repr(entry[0]) for entry in external[:3])
        raise DecodeError(
            path,
            f"dataset {name!r} keeps its values in another file ({files}, external raw storage): {_COPY_IN}",
        )
    if dataset.is_virtual:
        sources = sorted({source.file_name for source in dataset.virtual_sources()})
        raise DecodeError(
            path,
            f"dataset {name!r} is a virtual dataset mapping values from {sources[:3]}: {_COPY_IN}",
        )
