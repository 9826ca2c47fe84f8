"""The doctor's PNG plots: classes per split, image sizes, and each duplicate pair side by side.

matplotlib is an optional dependency (the ``plot`` extra): :func:`plots_available` says whether
it can be imported; figures are drawn on matplotlib's Agg canvas without ``pyplot``, so no global
backend state is touched.

Example:
    >>> plots_available() in (True, False)
    True
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections import Counter
from typing import Any

import numpy as np

from torchloom.errors import TorchloomError
from torchloom.io.files import Inside
from torchloom.io.image import read_image
from torchloom.tools.terminal import printable

#: Duplicate pairs drawn at most (leaks first); the report lists them all.
MAX_PAIR_PLOTS = 24
#: Width/height spreads above this ratio are drawn on log axes.
LOG_SCALE_RATIO = 8.0


def plots_available() -> bool:
    """Whether matplotlib (the ``plot`` extra) is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def write_plots(
    document: dict[str, Any], out: str, sizes: np.ndarray, *, inside: Inside = None
) -> list[str]:
    """Draw the plots of a report document into ``out``; returns their paths relative to ``out``.

    ``sizes`` holds the ``(height, width)`` of every readable image; ``inside`` is the real folder
    the duplicate pairs' files must resolve into when they are read again to be drawn.
    """
    _remove_earlier_plots(out)
    written = [_classes(document, os.path.join(out, "classes.png"))]
    if len(sizes):
        written.append(_sizes(sizes, os.path.join(out, "image_sizes.png")))
    pairs = sorted(document["duplicates"]["pairs"], key=lambda pair: not pair["leak"])
    if pairs:
        os.makedirs(os.path.join(out, "duplicates"), exist_ok=True)
    for number, pair in enumerate(pairs[:MAX_PAIR_PLOTS]):
        written.append(_pair(pair, os.path.join(out, "duplicates", f"pair_{number:03d}.png"), inside))
    return [os.path.relpath(path, out) for path in written]


def _remove_earlier_plots(out: str) -> None:
    """Delete the plots an earlier run wrote into ``out`` (only the names this module writes), so a
    pair that no longer exists is not left behind looking like a finding."""
    names = [os.path.join(out, "classes.png"), os.path.join(out, "image_sizes.png")]
    names += glob.glob(os.path.join(glob.escape(out), "duplicates", "pair_[0-9][0-9][0-9].png"))
    for path in names:
        if os.path.isfile(path):
            os.remove(path)


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _classes(document: dict[str, Any], path: str) -> str:
    counts: dict[str, dict[str, int]] = document["classes"]["counts"]
    names: list[str] = document["data"]["classes"]
    classes = [printable(name) for name in names] or ["(no label)"]
    splits = list(counts)
    figure = _figure(max(6.0, 0.9 * len(classes) * max(1, len(splits)) + 2), 4.5)
    axes = figure.add_subplot()
    width = 0.8 / max(1, len(splits))
    positions = np.arange(len(classes))
    for k, split in enumerate(splits):
        values = [counts[split].get(name, 0) for name in names] or [0]
        offset = (k - (len(splits) - 1) / 2) * width
        bars = axes.bar(positions + offset, values, width, label=printable(split))
        axes.bar_label(bars, fontsize=8)
    axes.set_xticks(
        positions,
        classes,
        rotation=30 if len(classes) > 6 else 0,
        ha="right" if len(classes) > 6 else "center",
    )
    axes.set_xlabel("class")
    axes.set_ylabel("images")
    ratio = document["classes"]["imbalance_ratio"]
    title = "Images per class" + (f" (imbalance {ratio:.1f}:1, largest/smallest)" if ratio else "")
    axes.set_title(title)
    if len(splits) > 1:
        figure.legend(title="split", loc="outside right upper")  # no slow search for a free corner
    figure.savefig(path)
    return path


def _sizes(sizes: np.ndarray, path: str) -> str:
    counted = Counter(map(tuple, sizes.tolist()))
    heights = np.array([h for h, _ in counted], dtype=np.float64)
    widths = np.array([w for _, w in counted], dtype=np.float64)
    numbers = np.array(list(counted.values()), dtype=np.float64)
    figure = _figure(6.0, 5.0)
    axes = figure.add_subplot()
    points = axes.scatter(
        widths, heights, s=20 + 180 * np.sqrt(numbers / numbers.max()), alpha=0.6, c=numbers, cmap="viridis"
    )
    figure.colorbar(points, ax=axes, label="images of this size")
    spread = max(widths.max() / widths.min(), heights.max() / heights.min())
    if spread > LOG_SCALE_RATIO:
        axes.set_xscale("log")
        axes.set_yscale("log")
    axes.set_xlabel("width (pixels)")
    axes.set_ylabel("height (pixels)")
    axes.set_title(f"Image sizes: {len(sizes)} images, {len(counted)} distinct sizes")
    axes.grid(alpha=0.3)
    figure.savefig(path)
    return path


def _pair(pair: dict[str, Any], path: str, inside: Inside) -> str:
    figure = _figure(9.0, 5.0)
    what = (
        "identical bytes" if pair["exact"] else f"near duplicate: hashes {pair['distance']} of 64 bits apart"
    )
    verdict = "LEAK across splits" if pair["leak"] else "duplicate within a split"
    figure.suptitle(f"{verdict} — {what}", fontsize=12, fontweight="bold")
    for k, side in enumerate(("a", "b")):
        axes = figure.add_subplot(1, 2, k + 1)
        file = pair[side]
        try:
            image = read_image(file["path"], inside=inside)
            axes.imshow(image)
            label = f"{image.shape[1]}×{image.shape[0]}"
        except (TorchloomError, OSError) as exc:
            axes.text(0.5, 0.5, f"cannot show:\n{printable(str(exc))}", ha="center", va="center", wrap=True)
            label = "unreadable"
        axes.set_title(f"split: {file['split']} ({label})\n{_short(file['path'])}", fontsize=9)
        axes.axis("off")
    figure.savefig(path)
    return path


def _short(path: str, keep: int = 60) -> str:
    path = printable(path)
    return path if len(path) <= keep else "…" + path[-keep:]
