"""Keeps this node's Ray logs in LOG_DIR as the node leaves (raysub/protocol/ray_logs.py: the format).

Run by the head and worker scripts' clean-up, after Ray is stopped and before its temp dir is removed, as
``python -m raysub.job.programs.ray_logs --temp-dir DIR --log-dir DIR --node NAME --max-mib N --seconds S``.
Says on stderr what it kept; exits 0 even when nothing could be kept (a job that is ending has nothing better
to do with a failure here than say it), 2 on wrong arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from raysub import protocol
from raysub.protocol import ray_logs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raysub.job.programs.ray_logs", description="Keep this node's Ray logs in LOG_DIR."
    )
    parser.add_argument("--temp-dir", type=Path, required=True, help="the node's Ray temp dir")
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--node", required=True, help="this node's name: ray-logs/<node>/")
    parser.add_argument("--max-mib", type=int, required=True, help="at most this much, before compression")
    parser.add_argument("--seconds", type=float, required=True, help="for this long at most")
    args = parser.parse_args(argv)
    target = args.log_dir / protocol.RAY_LOGS_DIR / args.node
    try:
        kept, left = ray_logs.keep(args.temp_dir, target, args.max_mib * 2**20, args.seconds)
    except OSError as error:
        print(f"raysub: could not keep Ray's logs in {target}: {error}", file=sys.stderr)
        return 0
    more = f"; {left} left out, listed in {ray_logs.LEFT_OUT}" if left else ""
    print(f"raysub: kept {kept} of Ray's log files in {target}{more}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
