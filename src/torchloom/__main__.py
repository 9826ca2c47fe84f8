"""``python -m torchloom``: the same command line as the ``torchloom`` script."""

from torchloom.tools.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
