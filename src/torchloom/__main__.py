"""``python -m torchloom``: the same command line as the ``torchloom`` script."""

from torchloom.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
