"""Know your data before training: bad files, duplicates and leaks, imbalance, sizes, mean/std.

Example:
    >>> import tempfile
    >>> from torchloom.testing import write_class_folders
    >>> from torchloom.tools.doctor import diagnose
    >>> root = tempfile.mkdtemp()
    >>> _ = write_class_folders(root, [4, 2], size=(32, 32), progress=False)
    >>> diagnose(root).problems
    []
"""

from torchloom.tools.doctor.diagnosis import DoctorReport, diagnose
from torchloom.tools.doctor.examine import Examination

__all__ = ["DoctorReport", "Examination", "diagnose"]
