"""For the trainer: say the training step exactly, so that raysub health, watch and report need not read it
from the driver's text (docs/health.md, "Where the step comes from").

    from raysub.trainer import report_step

    report_step(step, total=max_steps, seconds_per_step=timer.last, throughput=tps, unit="tokens/s")

Call it from one process (the driver, or rank 0): the step is the global training step, the optimizer
steps over the whole run, never an epoch's counter. Outside a raysub job (no LOG_DIR in the environment)
it does nothing and returns False. Reports come as often as the trainer likes; the file in LOG_DIR is
rewritten at most once a second (a report in between is written a second after the last write, by a
timer thread, or by flush(), which also runs when the process exits), and a line is added to its history
(raysub report's chart) when the step changed, at most every 10 s, and for the last step (the total's,
or at the exit).
raysub.trainer_hooks has adapters that call it from the stacks' own hooks.

The standard library only (and raysub's protocol), so that importing it never drags Ray or raysub's
command-line dependencies into a trainer.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from raysub import protocol
from raysub.protocol import trainer_progress
from raysub.protocol.trainer_progress import UNITS, Report

WRITE_EVERY_S = 1.0


class StepReporter:
    """Reports of one trainer into its job's LOG_DIR (``log_dir``, default the job's); ``source`` names who
    reports (an adapter's name, or "api")."""

    def __init__(
        self,
        source: str = "api",
        log_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
        write_every: float = WRITE_EVERY_S,
    ) -> None:
        self.source = source
        self.log_dir = log_dir if log_dir is not None else trainer_progress.log_dir_of_job()
        self.clock = clock
        self.write_every = write_every
        self.pending: Report | None = None
        self.written_at: float | None = None
        self.kept: Report | None = None  # the history's last line
        self.latest: Report | None = None  # the last report written
        self.since: tuple[int, float] | None = None  # (step, when it was first reported)
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None

    def report(
        self,
        step: int,
        total: int | None = None,
        seconds_per_step: float | None = None,
        throughput: float | None = None,
        unit: str | None = None,
    ) -> bool:
        """Records ``step`` (and what else is known of it); False outside a raysub job. Raises ValueError
        for a value that is no step, total, time or throughput (a negative step, an unknown unit)."""
        if self.log_dir is None:
            return False
        check(step, total, seconds_per_step, throughput, unit)
        with self.lock:
            now = self.clock()
            if self.since is None or self.since[0] != step:
                self.since = (int(step), now)
            rate = (float(throughput), str(unit)) if throughput is not None else None
            span = float(seconds_per_step) if seconds_per_step is not None else None
            self.pending = Report(now, int(step), self.since[1], total, span, rate, self.source)
            wait = 0.0 if self.written_at is None else self.write_every - (now - self.written_at)
            if wait <= 0:
                self._write()
            elif self.timer is None:
                self.timer = threading.Timer(wait, self._on_timer)
                self.timer.daemon = True
                self.timer.start()
        return True

    def flush(self) -> None:
        """Writes the latest report not written yet, and keeps it in the history (at the trainer's exit)."""
        with self.lock:
            self._write(ending=True)

    def _on_timer(self) -> None:
        with self.lock:
            self.timer = None
            self._write()

    def _write(self, ending: bool = False) -> None:
        if self.log_dir is None:
            return
        if self.pending is not None:
            trainer_progress.write(self.log_dir, self.pending)
            self.written_at, self.latest, self.pending = self.pending.t, self.pending, None
        last, kept = self.latest, self.kept
        if last is None or (kept is not None and kept.step == last.step):
            return
        final = last.total is not None and last.step >= last.total  # an actor may never reach its exit
        if ending or final or kept is None or last.t - kept.t >= protocol.TRAINER_HISTORY_EVERY:
            trainer_progress.append(self.log_dir, last)
            self.kept = last


def check(
    step: int, total: int | None, seconds_per_step: float | None, throughput: float | None, unit: str | None
) -> None:
    """Raises ValueError naming the first value a report cannot hold."""

    def whole(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    def positive(value: object) -> bool:
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        )

    if not whole(step):
        raise ValueError(f"step must be a whole number of steps, 0 or more, not {step!r}")
    if total is not None and not whole(total):
        raise ValueError(f"total must be a whole number of steps, not {total!r}")
    if seconds_per_step is not None and not positive(seconds_per_step):
        raise ValueError(f"seconds_per_step must be a number above 0, not {seconds_per_step!r}")
    if (throughput is None) != (unit is None):
        raise ValueError("give throughput and its unit together")
    if throughput is not None and not positive(throughput):
        raise ValueError(f"throughput must be a number above 0, not {throughput!r}")
    if unit is not None and unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, not {unit!r}")


# This process's reporter, for report_step; made at import, which in a job is after the environment is.
_REPORTER = StepReporter()
atexit.register(_REPORTER.flush)
report_step = _REPORTER.report
