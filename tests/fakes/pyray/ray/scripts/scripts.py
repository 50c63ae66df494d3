"""A stand-in for Ray's command line (ray.scripts.scripts) in bats tests: ``main`` becomes the fake ``ray``
command (tests/fakes/ray, first on PATH) with this process's arguments, as the real one runs Ray's."""

import os
import sys


def main() -> None:
    os.execvp("ray", sys.argv)  # noqa: S606 (the fake ray command, as the real main runs Ray)
