"""A job's driver runs as raysub report draws them: the training steps of each run, as the trainer reported
them (trainer_progress.jsonl, raysub.trainer) or else as its log shows them, read by
:func:`raysub.health.progress.step_points` (the patterns raysub health reads the latest step with), put on
the job's clock where the log's own timestamps allow it, and the stretches without a new step. The
trainer's reports carry true epoch seconds: they are on the job's clock as they are.

A log's timestamps rarely name their time zone: a node writes its local time, and
:func:`~raysub.health.progress.step_points` reads it as UTC. The timeline's times are true epoch seconds,
so a run's steps go on the job's clock only when exactly one time zone (a whole number of quarter hours,
as every zone is) puts all of its dated step lines between the run's start and the last write of its log
(within CLOCK_SLACK). When none or several do, or when fewer than half of its step lines carry a time, no
time is guessed: the report draws the steps against the log's lines instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

from raysub import protocol
from raysub.health.progress import StepPoint, Throughput, step_points
from raysub.protocol import trainer_progress
from raysub.protocol.logdir import LogDir

QUARTER_HOUR = 900.0
MAX_ZONE = 14 * 3600.0  # UTC+14, the furthest zone from UTC
# Clocks of the compute nodes, of the file server (a log's modification time) and the first line's delay
# after the timeline's entry may disagree by this much.
CLOCK_SLACK = 120.0


@dataclass(frozen=True)
class DriverRun:
    """One run of the driver (``number`` 0; k for its k-th restart): where its log is, when it started on
    the job's clock (None when the timeline does not say), the number of its log's last line, the steps it
    shows, and ``offset``, the seconds to add to their times to put them on the job's clock (None: they
    cannot be put there)."""

    number: int
    log: str
    started: float | None
    lines: int
    points: tuple[StepPoint, ...]
    offset: float | None

    def timed(self) -> list[tuple[float, StepPoint]]:
        """The steps whose line carries a time, on the job's clock; none when the log's clock is unknown."""
        if self.offset is None:
            return []
        return [(point.t + self.offset, point) for point in self.points if point.t is not None]


@dataclass(frozen=True)
class StepGap:
    """A stretch of a run without a new step: from the step line before it to the next one, or to the end
    of the run."""

    start: float
    end: float
    step: int  # the last step before it


@dataclass(frozen=True)
class JobRun:
    """What raysub report draws of a job beside its metrics: the timeline, the nodes (as nodes.tsv names
    them, head first), each driver run, and why the job ended (ENDED's line)."""

    events: tuple[protocol.TimelineEvent, ...]
    nodes: tuple[str, ...]
    drivers: tuple[DriverRun, ...]
    ended: str | None
    step_source: str = "driver log"  # or "trainer (<who reported it>)"

    @property
    def on_the_clock(self) -> bool:
        """Whether every run that shows steps has them on the job's clock (else the report draws them
        against the logs' lines)."""
        shown = [run for run in self.drivers if run.points]
        return bool(shown) and all(run.offset is not None for run in shown)

    def first(self, phase: str) -> float | None:
        return next((event.t for event in self.events if event.phase == phase), None)


def clock_offset(stamps: list[float], earliest: float, latest: float) -> float | None:
    """The one whole number of quarter hours that, added to every time in ``stamps``, puts them all from
    ``earliest`` to ``latest`` (CLOCK_SLACK either side); None when no such number, or several, do."""
    if not stamps:
        return None
    low = (earliest - CLOCK_SLACK - min(stamps)) / QUARTER_HOUR
    high = (latest + CLOCK_SLACK - max(stamps)) / QUARTER_HOUR
    fits = [k * QUARTER_HOUR for k in range(math.ceil(low), math.floor(high) + 1)]
    fits = [offset for offset in fits if abs(offset) <= MAX_ZONE]
    return fits[0] if len(fits) == 1 else None


def _offset(points: list[StepPoint], earliest: float | None, latest: float) -> float | None:
    stamps = [point.t for point in points if point.t is not None]
    if earliest is None or len(stamps) < 2 or 2 * len(stamps) < len(points):
        return None
    return clock_offset(stamps, earliest, latest)


def read_job_run(logs: LogDir, step_regex: str | None = None) -> JobRun:
    """The job's timeline, nodes, driver runs and ENDED line. Run 0 may start before the timeline's
    driver_start (an early driver waits inside ray.init), so its steps may lie anywhere after the job's
    first timeline entry; run k's after its driver_restart."""
    events = tuple(logs.timeline())
    starts = [event.t for event in events if event.phase == protocol.PHASE_DRIVER_START][:1]
    starts += [event.t for event in events if event.phase == protocol.PHASE_DRIVER_RESTART]
    reports = trainer_progress.history(logs.path)
    drivers = []
    for number, path in enumerate(logs.driver_logs()):
        try:
            text = path.read_text(errors="replace")
            written = path.stat().st_mtime
        except FileNotFoundError:
            continue
        started = starts[number] if number < len(starts) else None
        lines = text.count("\n") + 1
        if reports:
            after = starts[number + 1] if number + 1 < len(starts) else math.inf
            points = _reported(reports, started if number else None, after)
            drivers.append(DriverRun(number, path.name, started, lines, tuple(points), 0.0))
            continue
        points = step_points(text, step_regex)
        earliest = events[0].t if number == 0 and events else started
        offset = _offset(points, earliest, written)
        drivers.append(DriverRun(number, path.name, started, lines, tuple(points), offset))
    nodes = [entry.node for entry in logs.node_map()]
    for event in events:  # a node the node map lacks (it was not written yet) but the timeline names
        if event.phase == protocol.PHASE_CANARY_OK and event.node not in nodes:
            nodes.append(event.node)
    source = f"trainer ({reports[-1].source})" if reports else "driver log"
    return JobRun(events, tuple(nodes), tuple(drivers), logs.ended_reason(), source)


def _reported(reports: list[trainer_progress.Report], start: float | None, end: float) -> list[StepPoint]:
    """The trainer's reports from ``start`` (None: any time) until ``end``, as step points (numbered by
    their place in the history)."""
    return [
        StepPoint(
            number, report.t, report.step, Throughput(*report.throughput) if report.throughput else None
        )
        for number, report in enumerate(reports, start=1)
        if (start is None or report.t >= start) and report.t < end
    ]


def step_gaps(job: JobRun, longer_than: float) -> list[StepGap]:
    """The stretches of ``longer_than`` seconds or more in which a run on the job's clock showed no new
    step: between two step lines, and from its last step line to the run's end (the next run's start, the
    driver_end, or ENDED). Before a run's first step nothing counts: loading and compiling may take hours."""
    last = job.first(protocol.PHASE_DRIVER_END)
    last = job.first(protocol.PHASE_ENDED) if last is None else last
    gaps = []
    for k, run in enumerate(job.drivers):
        end = job.drivers[k + 1].started if k + 1 < len(job.drivers) else last
        timed = run.timed()
        stretches = [(t0, t1, p0.step) for (t0, p0), (t1, _) in pairwise(timed)]
        if timed and end is not None:
            stretches.append((timed[-1][0], end, timed[-1][1].step))
        gaps += [StepGap(t0, t1, step) for t0, t1, step in stretches if t1 - t0 >= longer_than]
    return gaps
