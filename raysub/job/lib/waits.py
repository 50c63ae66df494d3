"""Waiting on a node for the head's address, with only the CPU nobody else wants meanwhile: the worker's
first ``ray start`` (raysub/job/programs/join.py) and the head's unit counter load Ray while the head starts,
then wait for the address that the node script writes into a node-local file and signals with WAKE.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

WAKE = signal.SIGCONT  # the worker script's "the address is there"; without it, a look every --look seconds


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
