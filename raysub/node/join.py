"""A worker's ``ray start``, with Ray's command line loaded before the head is up.

``ray start`` spends a second or more importing Ray before it does anything, more on a busy node. A worker
that runs it only once the head is ready adds that second to every bring-up. So the worker script starts
this program first, before it waits for the head: it imports Ray's command line at once, then waits for the
file ``--address-file`` (node-local; the worker script writes the head's address into it when
STARTED_RAY_HEAD appears, then sends this process SIGCONT) and runs ``ray start --address=<address> ARGS``
in this same process, as the ``ray`` command itself would. Should the worker script go away first (the job
ended before the head started), it exits with status 0, Ray not started.

SIGCONT because its default action does nothing to a running process: one sent before this program
blocks it is lost harmlessly, as the file is there by then. While waiting it sleeps in sigtimedwait, with
a look every quarter second besides (a signal that a thread of Ray's took is lost too).

The worker script runs it as a script (``python LOG_DIR/python/raysub/node/join.py ...``), not with
``-m`` and LOG_DIR on PYTHONPATH as the other node programs: Ray's processes inherit this one's
environment, and the user's Ray tasks must not find raysub's variables (or its modules) there. Standard
library and ray only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

WAKE = signal.SIGCONT  # the worker script's "the address is there"
LOOK_S = 0.25  # and a look this often without it


def ray_argv(address: str, args: Sequence[str]) -> list[str]:
    """The command line of the ``ray start`` that joins the head at ``address``."""
    return ["ray", "start", f"--address={address}", *args]


def wait_address(path: Path, parent: int, look: float = LOOK_S) -> str | None:
    """The address in ``path`` once it exists; None if the process ``parent`` (the worker script) is gone
    first, or the file is empty. Woken at once by WAKE, which it blocks meanwhile."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {WAKE})
    try:
        while not path.exists():
            if os.getppid() != parent:
                return None
            signal.sigtimedwait({WAKE}, look)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {WAKE})  # Ray's processes inherit the mask
    return path.read_text().strip() or None


def join(argv: Sequence[str], ray_main: Callable[[], object], parent: int) -> int:
    """Waits for the head's address, then runs Ray's command line on it; 0 without one."""
    parser = argparse.ArgumentParser(prog="join.py", description=__doc__)
    parser.add_argument("--address-file", type=Path, required=True, help="where the head's address comes")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- and the arguments of `ray start`")
    options = parser.parse_args(argv)
    address = wait_address(options.address_file, parent)
    if address is None:
        return 0
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    sys.argv = ray_argv(address, args)
    ray_main()  # click ends the process itself (SystemExit) with the status of `ray start`
    return 0


def main() -> int:
    parent = os.getppid()
    # Run as a script, Python puts this file's directory first on sys.path, where the other node
    # programs are: none of them may stand in for a module Ray imports.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    from ray.scripts.scripts import main as ray_main  # what the `ray` console script runs

    return join(sys.argv[1:], ray_main, parent)


if __name__ == "__main__":
    sys.exit(main())
