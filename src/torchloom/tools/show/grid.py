"""Draw images as a titled grid PNG, with padding (where a mask says there is no image) hatched red.

matplotlib is the optional ``plot`` extra: it is imported when a grid is drawn, and its absence
is a :class:`MissingPlotError` carrying the install hint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torchloom.errors import MissingPlotError, install_hint
from torchloom.tools.terminal import printable

#: Width and height of one tile's image area, in inches.
TILE_INCHES = 2.4
#: Height of a tile's title (two lines), and of the figure's title and legend, in inches.
TITLE_INCHES = 0.45
HEADER_INCHES = 0.8
LEGEND_INCHES = 0.45
DPI = 100
PADDING_RGBA = (1.0, 0.0, 0.0, 0.45)
PADDING_LABEL = "padding: image_mask False (the model sees fill values here)"
EDGE_COLOR = "yellow"


@dataclass(frozen=True)
class Tile:
    """One image of a grid: ``image`` HWC ``uint8``, a title, and optionally where it is padding.

    Example:
        >>> import numpy as np
        >>> from torchloom.tools.show import Tile
        >>> padding = np.zeros((16, 16), bool)
        >>> padding[:, 12:] = True  # the right columns are padding, hatched in the grid
        >>> tile = Tile(np.zeros((16, 16, 3), np.uint8), "cat/1.jpg", padding)
        >>> tile.title, int(tile.padding.sum())
        ('cat/1.jpg', 64)
    """

    image: np.ndarray
    title: str
    padding: np.ndarray | None = None


def grid_shape(count: int) -> tuple[int, int]:
    """Rows and columns of a near-square grid of ``count`` tiles (columns >= rows).

    Example:
        >>> grid_shape(16), grid_shape(5), grid_shape(1)
        ((4, 4), (2, 3), (1, 1))
    """
    columns = max(1, math.ceil(math.sqrt(count)))
    return max(1, math.ceil(count / columns)), columns


def figure_pixels(count: int, *, legend: bool) -> tuple[int, int]:
    """Width and height in pixels of the PNG that :func:`draw_grid` writes for ``count`` tiles.

    Example:
        >>> figure_pixels(16, legend=False)
        (960, 1220)
    """
    rows, columns = grid_shape(count)
    width, height = _figure_inches(rows, columns, legend)
    return round(width * DPI), round(height * DPI)


def draw_grid(tiles: Sequence[Tile], path: str | os.PathLike[str], *, title: str) -> tuple[int, int]:
    """Write ``tiles`` as a grid PNG at ``path``; returns ``(rows, columns)``.

    A legend explaining the padding overlay is drawn when any tile has a ``padding`` mask.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.tools.show import Tile, draw_grid
        >>> tiles = [Tile(np.full((16, 16, 3), 40 * i, np.uint8), f"image {i}") for i in range(5)]
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     shape = draw_grid(tiles, os.path.join(folder, "grid.png"), title="first batch")
        ...     written = os.path.getsize(os.path.join(folder, "grid.png")) > 0
        >>> shape, written
        ((2, 3), True)
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise MissingPlotError(
            f"drawing a grid needs matplotlib, which is not installed ({exc}); "
            + install_hint("matplotlib", "plot")
        ) from exc
    rows, columns = grid_shape(len(tiles))
    legend = any(tile.padding is not None for tile in tiles)
    figure = plt.figure(figsize=_figure_inches(rows, columns, legend), dpi=DPI)
    try:
        axes = figure.subplots(rows, columns, squeeze=False)
        for position, ax in enumerate(axes.flat):
            ax.set_axis_off()
            if position < len(tiles):
                _draw_tile(ax, tiles[position])
        figure.suptitle(printable(title), fontsize=11)
        if legend:
            handles = [
                Patch(facecolor=PADDING_RGBA, edgecolor="red", hatch="///", label=PADDING_LABEL),
                Patch(facecolor="none", edgecolor=EDGE_COLOR, label="edge of the real image"),
            ]
            figure.legend(handles=handles, loc="lower center", ncol=2, fontsize=9, frameon=False)
        _place_axes(figure, axes, rows, columns, legend)
        figure.savefig(os.fspath(path), dpi=DPI, facecolor="white")
    finally:
        plt.close(figure)
    return rows, columns


def _figure_inches(rows: int, columns: int, legend: bool) -> tuple[float, float]:
    height = rows * (TILE_INCHES + TITLE_INCHES) + HEADER_INCHES + (LEGEND_INCHES if legend else 0)
    return columns * TILE_INCHES, height


def _place_axes(figure: object, axes: np.ndarray, rows: int, columns: int, legend: bool) -> None:
    """Put each tile's axes in its own cell, leaving room above it for its title (no overlaps)."""
    width, height = _figure_inches(rows, columns, legend)  # the legend's strip is below the last row
    margin = 0.08
    for row in range(rows):
        for column in range(columns):
            top = height - HEADER_INCHES - row * (TILE_INCHES + TITLE_INCHES) - TITLE_INCHES
            box = [
                (column * TILE_INCHES + margin) / width,
                (top - TILE_INCHES + margin) / height,
                (TILE_INCHES - 2 * margin) / width,
                (TILE_INCHES - 2 * margin) / height,
            ]
            axes[row, column].set_position(box)


def _draw_tile(ax: object, tile: Tile) -> None:
    image = tile.image
    ax.imshow(image, interpolation="nearest")  # type: ignore[attr-defined]
    if tile.padding is not None and tile.padding.any():
        overlay = np.zeros((*tile.padding.shape, 4), dtype=np.float32)
        overlay[tile.padding] = PADDING_RGBA
        ax.imshow(overlay, interpolation="nearest")  # type: ignore[attr-defined]
        padded = tile.padding.astype(np.float32)
        import matplotlib.pyplot as plt

        with plt.rc_context({"hatch.color": "red", "hatch.linewidth": 1.0}):
            ax.contourf(padded, levels=[0.5, 1.5], colors="none", hatches=["///"])  # type: ignore[attr-defined]
        ax.contour(padded, levels=[0.5], colors=EDGE_COLOR, linewidths=1.2)  # type: ignore[attr-defined]
    ax.set_title(printable(tile.title), fontsize=8, pad=3)  # type: ignore[attr-defined]
