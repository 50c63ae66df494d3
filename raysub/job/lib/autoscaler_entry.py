"""What Ray's autoscaler imports on a raysub job's head (--autoscale), shipped alone as
LOG_DIR/python/autoscaler/raysub_autoscaler.py: that directory is the only one put on the head Ray's
PYTHONPATH, so a driver's own raysub is never shadowed. Here, in Ray's monitor (which runs no user code),
LOG_DIR/python goes first on the path, and the provider comes from it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raysub.job.lib.slurm_provider import SlurmNodeProvider

__all__ = ["SlurmNodeProvider"]
