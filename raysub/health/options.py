"""What raysub health (and raysub watch's stall check) is asked, with the defaults of its options: the
command line takes its defaults from here. No imports beyond the standard library, so that every
command's --help stays fast."""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Options:
    step_regex: str | None = None
    stall_after: float = 1800.0
    gpu_idle_threshold: float = 5.0
    gpu_idle_after: float = 600.0
    checkpoint_dir: Path | None = None
    checkpoint_marker: str | None = None
    # How long a step may take while the driver keeps printing before it counts as stalled; None: the
    # default, raysub.health.checkup.slow_step_limit().
    slow_step_limit: float | None = None
    # Where the trainer writes TensorBoard event files, and JSON-lines metrics with a step key: read for the
    # step before the driver's text (raysub/health/structured.py).
    tensorboard_dir: Path | None = None
    metrics_file: Path | None = None


# A step that keeps printing is slow (a warning) past SLOW_STEP_FACTOR median steps and SLOW_STEP_MIN
# seconds, and stalled past SLOW_STEP_LIMIT_FACTOR median steps, but never before SLOW_STEP_LIMIT_FLOOR:
# an evaluation pass, a long rollout or a 70B checkpoint written to a parallel filesystem may well take an
# hour or more, and cancelling it would throw that work away every time (docs/health.md, "Stalls and
# slow steps").
SLOW_STEP_FACTOR = 3.0
SLOW_STEP_MIN = 60.0
SLOW_STEP_LIMIT_FACTOR = 10.0
SLOW_STEP_LIMIT_FLOOR = 2 * 3600.0
