"""A command that may hang, run for a bounded time.

nvidia-smi on a GPU that fell off the bus can hang for minutes, stuck in the GPU driver. subprocess.run's
timeout kills such a command and then waits for it to end and for its output to close: a process the
driver holds ends only when the driver lets it, as does anything it started that holds its output. So
``run`` kills the command's process group and abandons it. Used by the GPU preflight (preflight.py) and by
the driver-restart clean-up's task on each node (cleanup.py), which carries this module by value to nodes
that have no raysub: the standard library only, Python 3.9.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence

NOT_STARTED = 126  # the status a shell gives a command it found but could not run


def run(argv: Sequence[str], timeout: float) -> tuple[int | None, str]:
    """Runs ``argv`` for ``timeout`` seconds at most. Returns its exit status (None when it did not end in
    time: then it is killed with its process group and never waited for) and what it said: its stdout, or
    its stderr when stdout is blank; for a command that could not start, NOT_STARTED and why."""
    try:
        child = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group, to kill whatever it started with it
        )
    except OSError as error:
        return NOT_STARTED, str(error)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
        return None, ""
    return child.returncode, out if out.strip() else err
