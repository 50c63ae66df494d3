"""Prints the newest complete checkpoint under a directory (raysub/job/lib/checkpoints.py says which).

Run by the head at each driver start as ``python -m raysub.job.programs.checkpoints DIR [--marker NAME]``:
prints the newest complete checkpoint's absolute path and exits 0; prints nothing and exits 0 when there is
none; exits 2 with a one-line error when DIR is not a directory or which checkpoint is the newest cannot be
told.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from raysub.job.lib.checkpoints import AmbiguousCheckpoints, latest_checkpoint


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raysub.job.programs.checkpoints",
        description="Print the newest complete checkpoint under DIR (nothing when there is none).",
    )
    parser.add_argument("directory", metavar="DIR", type=Path)
    parser.add_argument("--marker", metavar="NAME", help="a checkpoint is complete when it contains NAME")
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        print(f"raysub: {args.directory}: no such directory", file=sys.stderr)
        return 2
    try:
        checkpoint = latest_checkpoint(args.directory, args.marker)
    except AmbiguousCheckpoints as error:
        print(f"raysub: {error}", file=sys.stderr)
        return 2
    if checkpoint is not None:
        print(checkpoint.path.absolute())
    return 0


if __name__ == "__main__":
    sys.exit(main())
