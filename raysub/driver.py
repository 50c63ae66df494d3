"""For the user's driver: tell raysub that the training is over, not merely interrupted.

A job's driver that exits 0 after the warning signal (``--signal-before``, forwarded by the batch script)
may have stopped because it was told to: it saved a checkpoint and left, and a later job must go on from
there. raysub then ends the job saying "interrupted, not finished". A driver that finished its work
anyway says so by calling :func:`declare_finished` before it exits; a driver in another language
creates the file named by ``$RAYSUB_FINISHED`` (``touch "$RAYSUB_FINISHED"``). docs/watch.md,
"Interrupted or finished".

The standard library only (and raysub's protocol, which is too), so that importing this never drags
Ray or raysub's command-line dependencies into a driver.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from raysub.protocol import FINISHED_ENV, PRIVATE_FILE_MODE


def declare_finished(environ: Mapping[str, str] | None = None) -> bool:
    """Create the file named by $RAYSUB_FINISHED, which the head sets for the driver: the run is over.
    Returns False, creating nothing, outside a raysub job (the variable is unset or empty). Raises
    OSError when the file cannot be created (say, LOG_DIR is gone). Calling it again does no harm."""
    path = (os.environ if environ is None else environ).get(FINISHED_ENV, "")
    if not path:
        return False
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
    return True
