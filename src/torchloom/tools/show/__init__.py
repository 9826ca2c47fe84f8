"""Samples as the model gets them: a grid of transformed samples, or a collated batch with its masks."""

from torchloom.errors import MissingPlotError
from torchloom.tools.show.grid import Tile, draw_grid
from torchloom.tools.show.transform_spec import parse_transform_spec

__all__ = ["MissingPlotError", "Tile", "draw_grid", "parse_transform_spec"]
