"""``torchloom bench``: loader settings measured on your data (:func:`torchloom.tune` behind it)."""

from torchloom.tools.bench.measure import plot_trials, run_bench

__all__ = ["plot_trials", "run_bench"]
