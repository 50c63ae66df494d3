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
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

WAKE = signal.SIGCONT  # the worker script's "the address is there"; without it, a look every --look seconds


def ray_argv(address: str, args: Sequence[str]) -> list[str]:
    """The command line of the ``ray start`` that joins the head at ``address``."""
    return ["ray", "start", f"--address={address}", *args]


def wait_address(path: Path, parent: int, look: float) -> str | None:
    """The address in ``path`` once it exists; None if the process ``parent`` (the node script that
    writes it) is gone first, or the file is empty. Woken at once by WAKE, which it blocks meanwhile."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {WAKE})
    try:
        while not path.exists():
            if os.getppid() != parent:
                return None
            signal.sigtimedwait({WAKE}, look)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {WAKE})  # Ray's processes inherit the mask
    return read_own(path).strip() or None


def read_own(path: Path) -> str:
    """``path``'s text, refused (PermissionError) unless it is this user's and nobody else may write it: the
    node's temp dir is the job's own, so only a temp dir the job did not make could hold another's file.
    (raysub.protocol.check_trusted says the same for LOG_DIR; this program imports nothing of raysub.)"""
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW)) as file:
        st = os.fstat(file.fileno())
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            mode = st.st_mode & 0o7777
            raise PermissionError(
                f"refusing {path}: owned by uid {st.st_uid}, mode {mode:04o}; not the job's"
            )
        return file.read()


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


# Linux gives each session an "autogroup" that competes for the CPU as one task would (unless cgroups
# group the tasks instead): the nice value of a session's autogroup sets the share of all its threads.
AUTOGROUP = Path("/proc/self/autogroup")
AUTOGROUP_TRIES = 100  # one every 0.02 s: the kernel takes one change every 0.1 s machine-wide (non-root)


def set_session_nice(nice: int, path: Path = AUTOGROUP) -> bool:
    """Sets the nice value of this process's autogroup (``path``); False where Linux refuses, or has none."""
    for _ in range(AUTOGROUP_TRIES):
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, str(nice).encode())
            finally:
                os.close(fd)
            return True
        except BlockingIOError:  # EAGAIN: a process changed one less than 0.1 s ago
            time.sleep(0.02)
        except OSError:
            return False
    return False


class Background:
    """How this process takes only the CPU nobody else wants until the head's address comes: it moves
    into a session of its own (a background job of the worker script is never a process group leader,
    so it may) and sets that session's autogroup to nice 19. ``restore`` sets it back to 0, which Linux
    lets any process do for its own autogroup (not for its own nice value), so that a load not done yet
    finishes at full speed and Ray's processes start with the usual share. Best effort: where Linux has
    no autogroups, or cgroups share out the CPU instead, Ray loads with the usual share."""

    def __init__(self, path: Path = AUTOGROUP) -> None:
        self.path = path
        self.niced = False

    def lower(self) -> None:
        try:
            os.setsid()
        except OSError:
            return
        self.niced = set_session_nice(19, self.path)

    def restore(self) -> bool:
        """False if the session stays niced."""
        return not self.niced or set_session_nice(0, self.path)


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
    # Run as a script, Python puts this file's directory first on sys.path, where the other node
    # programs are: none of them may stand in for a module Ray imports.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    return join(sys.argv[1:], load_ray_main, parent, Background())


if __name__ == "__main__":
    sys.exit(main())
