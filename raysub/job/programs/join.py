"""A worker's ``ray start``, with Ray's command line loaded before the head is up.

``ray start`` spends a second or more importing Ray before it does anything, more on a busy node. A worker
that runs it only once the head is ready adds that second to every bring-up. So the worker script starts
this program first, before it waits for the head: a thread of it imports Ray's command line at once while
the main thread waits for the file ``--address-file`` (node-local; the worker script writes the head's
address into it when STARTED_RAY_HEAD appears, then sends this process SIGCONT). Then it runs
``ray start --address=<address> ARGS`` in this same process, as the ``ray`` command itself would. Should
the worker script go away first (the job ended before the head started), it exits with status 0, Ray not
started.

Until the address comes, the process takes only the CPU nobody else wants (see Background): where a
worker shares its CPUs with the head, as on a test cluster, or with another job, loading Ray early must
not slow them. Once it comes, the process has its usual share back, before Ray starts.

SIGCONT because its default action does nothing to a running process: one sent before this program
blocks it is lost harmlessly, as the file is there by then. While waiting it sleeps in sigtimedwait, with
a look every quarter second besides (a signal that a thread of Ray's took is lost too).

The worker script runs it as a script (``python LOG_DIR/python/raysub/job/programs/join.py ...``), not
with ``-m`` and LOG_DIR on PYTHONPATH as the other node programs: Ray's processes inherit this one's
environment, and the user's Ray tasks must not find raysub's variables (or its modules) there. So it finds
LOG_DIR's copy of raysub (for raysub/job/lib/waits.py) by its own path, on this process's sys.path alone.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

if not __package__:  # run as a script: LOG_DIR's copy of raysub, three directories up, instead of this one
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from raysub.job.lib.waits import WAKE, Background, wait_address


def ray_argv(address: str, args: Sequence[str]) -> list[str]:
    """The command line of the ``ray start`` that joins the head at ``address``."""
    return ["ray", "start", f"--address={address}", *args]


class Loader(threading.Thread):
    """Runs ``load`` (which returns Ray's command line); ``main`` is what it returned, once it has."""

    def __init__(self, load: Callable[[], Callable[[], object]]) -> None:
        super().__init__(name="raysub-load-ray", daemon=True)  # never keeps a leaving process alive
        self.load = load
        self.main: Callable[[], object] | None = None

    def run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {WAKE})  # WAKE is the main thread's to take
        try:
            self.main = self.load()
        except Exception:  # into the worker's log
            traceback.print_exc()


def join(
    argv: Sequence[str],
    load: Callable[[], Callable[[], object]],
    parent: int,
    background: Background | None = None,
) -> int:
    """Loads Ray's command line while it waits for the head's address (with ``background``, only with
    the CPU nobody else wants), then runs it on that address; 0 without one."""
    parser = argparse.ArgumentParser(prog="join.py", description=__doc__)
    parser.add_argument("--address-file", type=Path, required=True, help="where the head's address comes")
    parser.add_argument("--look", type=float, required=True, help="seconds between looks without a SIGCONT")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- and the arguments of `ray start`")
    options = parser.parse_args(argv)
    if background is not None:
        background.lower()
    loader = Loader(load)
    loader.start()
    address = wait_address(options.address_file, parent, options.look)
    if address is None:
        return 0
    if background is not None and not background.restore():
        print(
            f"raysub: cannot set {background.path} back to nice 0; Ray would start starved", file=sys.stderr
        )
        return 1
    loader.join()
    if loader.main is None:
        print("raysub: Ray's command line did not load; see the error above", file=sys.stderr)
        return 1
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    sys.argv = ray_argv(address, args)
    loader.main()  # click ends the process itself (SystemExit) with the status of `ray start`
    return 0


def load_ray_main() -> Callable[[], object]:
    from ray.scripts.scripts import main as ray_main  # what the `ray` console script runs

    return ray_main


def main() -> int:
    parent = os.getppid()
    return join(sys.argv[1:], load_ray_main, parent, Background())


if __name__ == "__main__":
    sys.exit(main())
