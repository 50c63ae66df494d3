"""The head's unit counter alone, for a job without the monitor (--no-monitor): raysub/job/lib/counter.py
says what it does. Run by the head script as ``python -m raysub.job.programs.units`` while its Ray starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from raysub.job.lib import counter
from raysub.job.lib.waits import Background


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    return counter.parser("python -m raysub.job.programs.units", __doc__).parse_args(argv)


if __name__ == "__main__":
    sys.exit(counter.run(parse(None), Background()))
