"""A stand-in for Ray's command line (ray.scripts.scripts) in bats tests: ``main`` becomes the fake ``ray``
command (tests/fakes/ray, first on PATH) with this process's arguments, as the real one runs Ray's.
Importing it takes $FAKE_RAY_LOAD_SECONDS (default 0), as loading Ray on a busy node does."""

import os
import sys
import time

time.sleep(float(os.environ.get("FAKE_RAY_LOAD_SECONDS", "0")))


def main() -> None:
    os.execvp("ray", sys.argv)  # noqa: S606 (the fake ray command, as the real main runs Ray)
