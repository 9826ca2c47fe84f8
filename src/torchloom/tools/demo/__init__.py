"""``torchloom demo``: messy multi-source data, doctor, prepare, a tuned loader and a tiny model."""

from torchloom.tools.demo.data import PlantedData, write_demo_data
from torchloom.tools.demo.run import DemoResult, run_demo

__all__ = ["DemoResult", "PlantedData", "run_demo", "write_demo_data"]
