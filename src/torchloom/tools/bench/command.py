"""``torchloom bench DATA``: the command line of :func:`~torchloom.tools.bench.run_bench`.

Images of different sizes are padded into batches (``PadImages``, as training on them would), unless
``--transform`` (the spec ``show`` takes) gives them one size. A bad option (``--budget 0.3``,
``--budget nan``, ``--batch-size 0``, a bad ``--transform``) is a usage error, exit 2.

Example:
    >>> parser = add_parser(argparse.ArgumentParser().add_subparsers())
    >>> parser.parse_args(["data", "--budget", "5", "--transform", "Resize(64)"]).budget
    5.0
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from torchloom.errors import ConfigError, TorchloomError
from torchloom.io.files import is_url
from torchloom.loader.autotune import MIN_BUDGET_S, check_budget
from torchloom.tools.bench.measure import run_bench
from torchloom.tools.show.transform_spec import ALLOWED_TRANSFORMS, parse_transform_spec
from torchloom.tools.storage import refuse_url_output, storage_options_of
from torchloom.tools.terminal import add_data_arguments, fail, positive_int

#: Where the plot goes unless ``--plot`` says otherwise.
DEFAULT_PLOT = "torchloom-bench.png"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``bench`` on the ``torchloom`` command's subparsers; its handler is ``run``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "bench", help="measure DataLoader/Loader settings on your data, pick the fastest"
    )
    add_data_arguments(parser)
    parser.add_argument(
        "--batch-size", type=positive_int, default=64, help="the batch size training will use (default 64)"
    )
    parser.add_argument(
        "--budget",
        type=budget_seconds,
        default=30.0,
        help=f"seconds the whole search may take (default 30, at least {MIN_BUDGET_S:g})",
    )
    parser.add_argument(
        "--transform",
        default="",
        help="the transform training uses, as `show` takes it, e.g. 'Resize((224, 224))'; allowed: "
        f"{', '.join(ALLOWED_TRANSFORMS)} (without one, images of different sizes are padded)",
    )
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    parser.add_argument(
        "--plot",
        default=DEFAULT_PLOT,
        help=f"the PNG of samples/s against workers to write (default ./{DEFAULT_PLOT}; '' for none)",
    )
    parser.set_defaults(handler=run, parser=parser)
    return parser


def budget_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds tune can measure within, or a usage error.

    Example:
        >>> budget_seconds("2.5")
        2.5
    """
    try:
        return check_budget(float(text))
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    except ValueError:  # not a number at all
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    """Run ``torchloom bench`` with parsed arguments; returns the exit status."""
    if not is_url(args.data) and not os.path.exists(args.data):
        args.parser.error(f"DATA {args.data!r} does not exist; pass a class folder or a manifest file")
    try:
        transform = parse_transform_spec(args.transform)
        refuse_url_output("--plot", args.plot or None)
        storage_options = storage_options_of(args)
    except ConfigError as exc:
        return fail("bench", exc)
    try:
        return run_bench(
            args.data,
            batch_size=args.batch_size,
            budget_s=args.budget,
            transform=transform,
            as_json=args.json,
            plot=args.plot or None,
            split=args.split,
            allow_outside_root=args.allow_outside_root,
            storage_options=storage_options,
        )
    except (TorchloomError, OSError) as exc:  # the data could not be read, the plot not written
        return fail("bench", exc)
