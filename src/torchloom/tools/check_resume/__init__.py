"""``torchloom check-resume``: :func:`torchloom.check_resume` on a pipeline named by its entry point."""

from torchloom.tools.check_resume.entry import load_entry

__all__ = ["load_entry"]
