"""``torchloom bench DATA``: measure loader settings on a dataset, print the table, plot it.

The table is rich in a terminal and plain text when piped (``--json`` for machines); the PNG plots
samples/s against DataLoader workers (and the thread Loader's threads) with the chosen setting
marked. Batches are collated as training on a folder of mixed sizes would: images padded to the
largest of the batch (``PadImages``; the same cost as stacking when they share a size). The chosen
setting's latencies follow: time to the first batch, resume latency and p50/p99 of the wait
(:func:`~torchloom.tools.bench.slos.measure_latencies`).
"""

from __future__ import annotations

import json
from typing import Any

from torchloom.collation import Collate, PadImages
from torchloom.datasets.index import DatasetReport
from torchloom.errors import install_hint
from torchloom.loader.autotune import Trial, TuneResult, tune
from torchloom.tools.bench.slos import LoaderLatencies, measure_latencies
from torchloom.tools.show.command import open_dataset
from torchloom.tools.terminal import Output, print_left_out


def run_bench(
    data: str,
    *,
    batch_size: int,
    budget_s: float,
    as_json: bool,
    plot: str | None,
    split: str | None = None,
    allow_outside_root: bool = False,
    transform: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> int:
    """Measure, print and plot (what the dataset left out goes to stderr); returns the exit status.

    ``transform`` is applied to each sample, as training would (``show``'s ``--transform``);
    ``storage_options`` reach a ``data`` given as a URL.

    Example:
        >>> import contextlib, io, json, tempfile
        >>> from torchloom.testing import write_class_folders
        >>> from torchloom.tools.bench import run_bench
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = write_class_folders(root, [8, 8], size=(16, 16), progress=False)
        ...     printed = io.StringIO()
        ...     with contextlib.redirect_stdout(printed):
        ...         status = run_bench(root, batch_size=8, budget_s=1, as_json=True, plot=None)
        >>> status, json.loads(printed.getvalue())["best"]["batch_size"]
        (0, 8)
    """
    dataset = open_dataset(
        data,
        transform=transform,
        seed=0,
        split=split,
        allow_outside_root=allow_outside_root,
        progress=not as_json,
        storage_options=storage_options,
    )
    report = getattr(dataset, "report", None)
    if isinstance(report, DatasetReport):
        print_left_out("bench", report.summary(root=getattr(dataset, "root", None)))
    # Padded, so that a folder of mixed sizes is measured as training on it runs, not refused.
    padded = Collate({"image": PadImages()})
    result = tune(dataset, batch_size=batch_size, budget_s=budget_s, collate_fn=padded, progress=not as_json)
    latencies = measure_latencies(dataset, result.best, collate_fn=padded)
    if as_json:
        print(json.dumps({**_as_json(result), "latencies": latencies.as_json()}, indent=2))
    else:
        _print_table(result, latencies)
    if plot:
        written = plot_trials(result, plot)
        if not as_json:
            print(written)
    return 0


def _as_json(result: TuneResult) -> dict[str, Any]:
    return {
        "best": result.best,
        "elapsed_s": round(result.elapsed_s, 3),
        "note": result.note,
        "trials": [
            {
                "setting": trial.setting,
                "samples_per_s": round(trial.samples_per_s, 1),
                "startup_s": round(trial.startup_s, 3),
                "status": trial.status,
            }
            for trial in result.table
        ],
    }


def _print_table(result: TuneResult, latencies: LoaderLatencies) -> None:
    rows = result.rows()
    # The best is num_workers=0 unmeasured when no trial could be compared.
    measured = (trial.name for trial in result.table if trial.setting == result.best)
    chosen = next(measured, Trial(result.best).name)
    Output.for_stream().table(
        f"loader settings measured in {result.elapsed_s:.1f} s",
        list(rows[0]),
        [list(row.values()) for row in rows],
    )
    print(f"chosen: {chosen}")
    print(f"latencies: {latencies}")
    if result.note:
        print(f"note: {result.note}")


def plot_trials(result: TuneResult, path: str) -> str:
    """Write the samples/s-against-workers plot to ``path``; returns a line saying what was written.

    Example:
        >>> import os, tempfile
        >>> from torchloom.loader import Trial, TuneResult
        >>> from torchloom.tools.bench import plot_trials
        >>> trials = [Trial({"batch_size": 8, "num_workers": n}, samples_per_s=100.0 + n) for n in range(3)]
        >>> result = TuneResult(best=trials[2].setting, table=trials)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = plot_trials(result, os.path.join(folder, "bench.png"))
        ...     print(os.path.getsize(os.path.join(folder, "bench.png")) > 0)
        True
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return f"no plot: matplotlib is not installed ({install_hint('matplotlib', 'plot')})"
    measured = [trial for trial in result.table if trial.status == "measured"]
    figure, axes = plt.subplots(figsize=(6, 4))
    for label, kind, count_key in (
        ("DataLoader workers", "dataloader", "num_workers"),
        ("Loader threads", "threads", "num_threads"),
    ):
        points = sorted(
            (trial.setting[count_key], trial.samples_per_s)
            for trial in measured
            if (trial.setting.get("loader") == "threads") == (kind == "threads")
            and trial.setting.get("prefetch_factor") in (None, 2)
        )
        if points:
            axes.plot(*zip(*points, strict=True), marker="o", label=label)
    best = next((trial for trial in measured if trial.setting == result.best), None)
    if best is not None:
        count = best.setting.get("num_threads", best.setting.get("num_workers", 0))
        axes.scatter([count], [best.samples_per_s], s=160, facecolors="none", edgecolors="red", zorder=3)
        axes.annotate(
            f"chosen: {best.name}",
            (count, best.samples_per_s),
            textcoords="offset points",
            xytext=(-10, -16),
            ha="right",
            fontsize=8,
            color="red",
        )
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("workers / threads")
    axes.set_ylabel("samples/s")
    axes.set_title("loader throughput")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return f"plot written to {path}"
