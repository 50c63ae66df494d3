"""What the stall check of raysub health and raysub watch goes by: the driver's log read as it grows, and
how long the run's training steps take (the rule itself: raysub.health.checkup.stall_finding).

raysub watch asks about a job every minute, for days, from a login node, and a driver's log may reach
gigabytes: :class:`DriverTail` reads each byte of the log at most once, and of what was written since it
last looked only the newest part, a bounded piece at a time, so its memory never depends on the log's
size. The standard library only, as the rest of ``raysub.health``.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO

from raysub.health.options import Options
from raysub.health.progress import Progress, Throughput, read_progress
from raysub.health.structured import EventsTail, jsonl_step
from raysub.protocol import step_sources, trainer_progress
from raysub.protocol.logdir import LogDir

# Of what was written since the last read, only the newest READ_MAX bytes are read: the latest step is at
# the end, and a log that grew more than this in one watch interval is mostly noise (NCCL_DEBUG, warnings).
READ_MAX = 8 * 2**20
PIECE = 2**20  # parsed at a time
# A line not ended yet is kept for the next read, its last CARRY_MAX bytes at most: tqdm rewrites its bar
# with carriage returns and may never end the line, and a bar is far shorter than this.
CARRY_MAX = 64 * 2**10
# Step times measured between sightings are trusted over the rate a log states once there are this many.
MIN_STEP_TIMES = 3


class DriverTail:
    """The current driver log of one job (its last run's, with --driver-restarts), read incrementally:
    the latest training step it shows and when it last grew.

    Each :meth:`read` reads what was appended since the previous one, at most its last READ_MAX bytes,
    PIECE bytes at a time. The line of the latest step is put in front of each piece, so that what
    :func:`progress` carries from one line to the next holds across pieces: the first bar without a
    description (HF Trainer's training bar) stays the one evaluation bars are told apart from. A line not
    ended yet is carried over, cut at a carriage return when it grows too long, so that what is kept is
    whole bar updates; a bar in flight is read before its line ends. A new run's log, or the log truncated
    or replaced (another inode), is read afresh.
    """

    def __init__(self, step_regex: str | None = None) -> None:
        self.step_regex = step_regex
        self.path: Path | None = None
        self.identity: tuple[int, int] | None = None  # (device, inode)
        self.offset = 0  # read up to here
        self.carry = b""  # the line not ended yet at ``offset``
        self.mid_line = False  # what comes next starts inside a line whose start was left out
        self.latest: Progress | None = None
        self.unknown: str | None = None  # why the latest count is no step of the run, when it is none
        self.grew: float | None = None  # when a read found the log had grown (the first read does not count)

    def read(self, logs: LogDir, now: float) -> tuple[Progress | None, float | None]:
        """The latest step the current driver log shows, and when the log last grew: the later of its
        modification time and ``now`` when this read found new bytes, so that a compute node's clock
        running behind never makes output look older than it is. (None, None) before there is a log."""
        path = logs.driver_logs()[-1]
        try:
            with path.open("rb") as log:
                status = os.fstat(log.fileno())
                fresh = self._follow(path, (status.st_dev, status.st_ino), status.st_size)
                if status.st_size > self.offset:
                    if not fresh:
                        self.grew = now
                    self._read_new(log, status.st_size)
        except FileNotFoundError:
            self.path = None
            return None, None
        changed = status.st_mtime if self.grew is None else max(status.st_mtime, self.grew)
        return self.latest, changed

    def _follow(self, path: Path, identity: tuple[int, int], size: int) -> bool:
        """Start over on another file, or on this one cut shorter than what was read; whether it did."""
        if path == self.path and identity == self.identity and size >= self.offset:
            return False
        self.path, self.identity, self.offset = path, identity, 0
        self.carry, self.mid_line, self.latest, self.grew = b"", False, None, None
        self.unknown = None
        return True

    def _read_new(self, log: BinaryIO, size: int) -> None:
        start = max(self.offset, size - READ_MAX)
        if start > self.offset:  # skipped ahead: the first line read is the end of one
            self.carry, self.mid_line = b"", True
        log.seek(start)
        self.offset = start
        while self.offset < size and (piece := log.read(min(PIECE, size - self.offset))):
            self.offset += len(piece)
            self._feed(piece)
        if b"\r" in self.carry:
            # A progress bar being redrawn, which may never end its line. Any other line not ended yet is
            # read once it is: a block-buffered write may have cut it inside its step number.
            self._parse(self.carry)

    def _feed(self, piece: bytes) -> None:
        """Parse the lines ``piece`` ends and carry the rest over."""
        if self.mid_line:
            breaks = [at for at in (piece.find(b"\r"), piece.find(b"\n")) if at >= 0]
            if not breaks:
                return
            piece, self.mid_line = piece[min(breaks) :], False
        data = self.carry + piece
        end = data.rfind(b"\n") + 1
        if end:
            self._parse(data[:end])
        self.carry = data[end:]
        if len(self.carry) > CARRY_MAX:
            tail = self.carry[-CARRY_MAX:]
            cut = tail.find(b"\r")
            self.carry, self.mid_line = (tail[cut:], False) if cut >= 0 else (b"", True)

    def _parse(self, chunk: bytes) -> None:
        anchor = self.latest.line if self.latest else ""
        found, unknown = read_progress(anchor + "\n" + chunk.decode(errors="replace"), self.step_regex)
        if unknown is not None:
            # The newest count is no step of the run (an epoch's, past the first): the step read before
            # it would be stale, and a stale step looks like a stall.
            self.latest, self.unknown = None, unknown
            return
        if found is None:
            return
        self.unknown = None
        before = self.latest
        if found.total is None and before and before.total is not None and before.total >= found.step:
            found = dataclasses.replace(found, total=before.total)  # as progress() borrows one
        self.latest = found


def step_times(steps: Sequence[tuple[int, float]]) -> list[float]:
    """Seconds per step between consecutive sightings (step, first seen) where the step went up. A step
    that went down (a restarted driver resuming from an older checkpoint) measures nothing, nor do two
    sightings at the same moment (raysub health and watch looking at once)."""
    return [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in pairwise(steps) if s1 > s0 and t1 > t0]


def median_step_time(steps: Sequence[tuple[int, float]], stated: float | None) -> float | None:
    """How long a step usually takes, in seconds: the median of the step times measured between
    sightings once there are MIN_STEP_TIMES of them (a median, so the odd evaluation or checkpoint step
    does not move it), else the time per step the log states (``stated``), else what was measured; None
    when nothing says."""
    times = step_times(steps)
    if len(times) >= MIN_STEP_TIMES or (times and not stated):
        return statistics.median(times)
    return stated or None


class StepSources:
    """Where a job's step is read from, best first: the trainer's own report (raysub.trainer), then
    TensorBoard's events and JSON-lines metrics when the options name them, then the driver's text. One
    per job: each source is read on from where it stopped."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.tail = DriverTail(options.step_regex)
        self.events = EventsTail(options.tensorboard_dir) if options.tensorboard_dir else None
        self.metrics_file = options.metrics_file
        self.recorded = False  # whether what the job was rendered with (step_sources.json) was read

    def _fill_in(self, logs: LogDir) -> None:
        """Each source the options do not name, as the job was rendered with it (render --step-regex,
        --tensorboard-dir, --metrics-file)."""
        recorded = step_sources.read(logs.path)
        if recorded == step_sources.Recorded():
            return  # maybe not written yet: looked for again next time
        self.recorded = True
        if self.options.step_regex is None and self.tail.step_regex is None:
            self.tail.step_regex = recorded.step_regex
        if self.events is None and recorded.tensorboard_dir is not None:
            self.events = EventsTail(recorded.tensorboard_dir)
        if self.metrics_file is None:
            self.metrics_file = recorded.metrics_file

    def read(self, logs: LogDir, now: float) -> tuple[Progress | None, float | None, str | None]:
        """The latest step, when the driver's output last changed (a report or an event counts), and where
        the step came from: "trainer (<who>)", "tensorboard", "metrics file" or "driver log"."""
        if not self.recorded:
            self._fill_in(logs)
        seen, changed = self.tail.read(logs, now)
        report = trainer_progress.read(logs.path)
        if report is not None:
            rate = Throughput(*report.throughput) if report.throughput else None
            line = f"step {report.step} as {report.source} reported it"
            stated = Progress(report.step, report.total, report.seconds_per_step, rate, line)
            return stated, max(changed or report.t, report.t), f"trainer ({report.source})"
        found = self._structured()
        if found is not None:
            step, when, source = found
            return (
                Progress(step, None, None, None, f"step {step} in the {source}"),
                max(changed or when, when),
                source,
            )
        return seen, changed, "driver log" if seen else None

    @property
    def unknown(self) -> str | None:
        """Why the driver's text gives no step though it shows a count (an epoch's, a bar's that may have
        closed), or None."""
        return self.tail.unknown

    def _structured(self) -> tuple[int, float, str] | None:
        if self.events is not None and (event := self.events.read()) is not None:
            return event[0], event[1], "tensorboard"
        if self.metrics_file is not None and (step := jsonl_step(self.metrics_file)) is not None:
            try:
                return step, self.metrics_file.stat().st_mtime, "metrics file"
            except OSError:  # gone since it was read
                return None
        return None
