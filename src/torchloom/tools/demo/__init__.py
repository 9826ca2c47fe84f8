"""``torchloom demo``: messy multi-source data, doctor, prepare, a tuned loader and a tiny model."""

from torchloom.tools.demo.data import write_demo_data
from torchloom.tools.demo.run import DemoResult, run_demo

__all__ = ["DemoResult", "run_demo", "write_demo_data"]
