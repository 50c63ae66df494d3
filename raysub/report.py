"""``raysub report``: one self-contained HTML page of a job: its run (the training step and throughput its
driver printed, each node's bring-up and the driver's events, on one time axis) and its metrics.jsonl.

The charts are inline SVG drawn here, the styles inline, and a Content-Security-Policy forbids the page
every fetch: it opens offline, from a mail attachment or a shared filesystem, and asks nothing of the network.
"""

import html
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import groupby, pairwise

from raysub import protocol
from raysub.gpu_monitor import summarize
from raysub.health.options import Options
from raysub.health.runs import DriverRun, JobRun, StepGap, read_job_run, step_gaps
from raysub.jobs import Job
from raysub.monitor import power_caps
from raysub.protocol import step_sources
from raysub.protocol.metrics_log import Snapshot, read_snapshots
from raysub.protocol.readings import NodeMetrics

# Nothing may be fetched; only the inline styles apply.
CSP = "default-src 'none'; style-src 'unsafe-inline'"
WIDTH, HEIGHT = 900, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 36, 12, 34
DOT_RADIUS = 4  # a reading with no neighbour to draw a line to
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
)  # fmt: skip
QUANTITY_NAMES = {
    "util_pct": "GPU utilisation %",
    "mem_used_gib": "GPU memory used GiB",
    "cpu_util_pct": "CPU utilisation %",
    "ram_used_gib": "host RAM used GiB",
    "temperature_c": "GPU temperature °C",
    "power_w": "GPU power W",
}


@dataclass(frozen=True)
class Chart:
    title: str
    percent: bool
    # (series name, value or None) for each node and GPU of one snapshot's nodes
    pick: Callable[[dict[str, NodeMetrics]], list[tuple[str, float | None]]]


def _gpu(quantity: str) -> Callable[[dict[str, NodeMetrics]], list[tuple[str, float | None]]]:
    def pick(nodes: dict[str, NodeMetrics]) -> list[tuple[str, float | None]]:
        return [(f"{name}/gpu{g.index}", getattr(g, quantity)) for name, n in nodes.items() for g in n.gpus]

    return pick


def _node(quantity: str) -> Callable[[dict[str, NodeMetrics]], list[tuple[str, float | None]]]:
    def pick(nodes: dict[str, NodeMetrics]) -> list[tuple[str, float | None]]:
        return [(name, getattr(n, quantity)) for name, n in nodes.items()]

    return pick


CHARTS = (
    Chart("GPU utilisation (%)", True, _gpu("util_pct")),
    Chart("GPU memory used (GiB)", False, _gpu("mem_used_gib")),
    Chart("Host RAM used (GiB)", False, _node("ram_used_gib")),
    Chart("CPU utilisation (%)", True, _node("cpu_util_pct")),
)


def _nice_ceiling(value: float) -> float:
    """The axis top: 1, 2 or 5 times a power of ten, at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= value))


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 10_000 else f"{value:g}"


def _since(seconds: float, span: float) -> str:
    """An x axis label: seconds since the axis' start, in the unit that suits the axis' ``span``."""
    if span < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if span < 3 * 3600 else f"{seconds / 3600:.1f} h"


def _clock(t: float) -> str:
    """``t`` on the clock of the machine that makes the page, with its offset from UTC: the page may be
    read where another time zone holds, and a run may span a change to or from summer time."""
    return time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(t))


def _duration(seconds: float) -> str:
    return _since(seconds, seconds)


@dataclass(frozen=True)
class Frame:
    """A chart's plot area: x from ``x0`` to ``x1`` (a single instant stands in the middle), y from 0 to
    ``top``, and the labels of its x axis at the values ``x_ticks`` gives."""

    x0: float
    x1: float
    top: float
    x_label: Callable[[float], str]
    height: int = HEIGHT

    @property
    def span(self) -> float:
        return self.x1 - self.x0

    def x(self, value: float) -> float:
        plot_w = WIDTH - LEFT - RIGHT
        return LEFT + (plot_w / 2 if self.span <= 0 else (value - self.x0) / self.span * plot_w)

    def y(self, value: float) -> float:
        plot_h = self.height - TOP - BOTTOM
        return TOP + plot_h - min(value, self.top) / self.top * plot_h

    def open(self, name: str, y_labels: bool = True) -> list[str]:
        """The ``<svg>`` start tag (``name``: its class), the grid and both axes' labels."""
        parts = [
            f'<svg class="{name}" role="img" width="{WIDTH}" height="{self.height}" '
            f'viewBox="0 0 {WIDTH} {self.height}">'
        ]
        for k in range(5) if y_labels else ():
            value = self.top * k / 4
            y = f"{self.y(value):.1f}"
            parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}"/>')
            parts.append(
                f'<text x="{LEFT - 6}" y="{self.y(value) + 4:.1f}" text-anchor="end">{_figure(value)}</text>'
            )
        for k in range(5) if self.span > 0 else range(1):
            value = self.x0 + self.span * k / 4
            parts.append(
                f'<text class="x" x="{self.x(value):.1f}" y="{self.height - 10}" text-anchor="middle">'
                f"{html.escape(self.x_label(value))}</text>"
            )
        return parts


def _thin(drawn: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points of a line that the page can show: in each pixel column, the first, highest, lowest and
    last, in their order. A week's run of 50,000 steps is then a few thousand points, drawn the same."""
    kept: list[tuple[float, float]] = []
    for _, group in groupby(drawn, key=lambda point: round(point[0])):
        column = list(group)
        ys = [y for _, y in column]
        chosen = {0, ys.index(min(ys)), ys.index(max(ys)), len(column) - 1}
        kept += [column[k] for k in sorted(chosen)]
    return kept


def _line(frame: Frame, color: str, name: str, points: list[tuple[float, float]]) -> str:
    """One series: a polyline, or a dot where it has a single point (or all at one place)."""
    title = f"<title>{html.escape(name)}</title>"
    drawn = _thin([(frame.x(px), frame.y(py)) for px, py in points])
    if len(set(drawn)) == 1:
        cx, cy = drawn[0]
        return f'<circle fill="{color}" cx="{cx:.1f}" cy="{cy:.1f}" r="{DOT_RADIUS}">{title}</circle>'
    points_attr = " ".join(f"{px:.1f},{py:.1f}" for px, py in drawn)
    return f'<polyline stroke="{color}" points="{points_attr}">{title}</polyline>'


def _legend(names: list[str]) -> str:
    swatch = '<span class="swatch" style="background:{}"></span>'
    return (
        '<ul class="legend">'
        + "".join(
            f"<li>{swatch.format(PALETTE[k % len(PALETTE)])}{html.escape(name)}</li>"
            for k, name in enumerate(names)
        )
        + "</ul>"
    )


def _series(chart: Chart, snapshots: list[Snapshot]) -> dict[str, list[tuple[float, float | None]]]:
    series: dict[str, list[tuple[float, float | None]]] = {}
    for snapshot in snapshots:
        for name, value in chart.pick(snapshot.nodes):
            series.setdefault(name, []).append((snapshot.t, value))
    return series


def _svg(chart: Chart, series: dict[str, list[tuple[float, float | None]]], t0: float, t1: float) -> str:
    """One chart; a reading with no neighbour to join (a one-snapshot job, a gap either side) is a dot."""
    drawn = {name: points for name, points in sorted(series.items()) if any(v is not None for _, v in points)}
    if not drawn:
        return '<p class="empty">Ray reported no such reading in this job.</p>'
    values = [v for points in drawn.values() for _, v in points if v is not None]
    top = 100.0 if chart.percent else _nice_ceiling(max(values))
    frame = Frame(t0, t1, top, lambda t: _since(t - t0, t1 - t0))  # the time axis, since the first snapshot
    parts = frame.open("metrics")
    for index, (name, points) in enumerate(drawn.items()):
        segment: list[tuple[float, float]] = []
        for t, v in [*points, (t1, None)]:  # None ends a segment: a gap where the reading was missing
            if v is not None:
                segment.append((t, v))
            elif segment:
                parts.append(_line(frame, PALETTE[index % len(PALETTE)], name, segment))
                segment = []
    parts.append("</svg>")
    silent = sorted(set(series) - set(drawn))
    note = f'<p class="empty">No reading from {html.escape(", ".join(silent))}.</p>' if silent else ""
    return "".join(parts) + _legend(list(drawn)) + note


def _cell(value: float | None, digits: int = 0) -> str:
    return "?" if value is None else f"{value:.{digits}f}"


def _gpu_table(snapshots: list[Snapshot], power_caps: Mapping[tuple[str, str], float]) -> str:
    """Each node's GPUs as the last snapshot names them: model, memory and power cap (from the preflight
    check's nvidia-smi, by node and GPU index, where it ran)."""
    rows = []
    for name, node in sorted(snapshots[-1].nodes.items()) if snapshots else ():
        for gpu in node.gpus:
            cells = (
                name,
                gpu.index,
                gpu.name or "?",
                _cell(gpu.mem_total_gib, 1),
                _cell(power_caps.get((name, gpu.index))),
            )
            rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    if not rows:
        return '<p class="empty">No GPUs.</p>'
    head = "<tr><th>node</th><th>GPU</th><th>model</th><th>memory GiB</th><th>power cap W</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _summary_table(snapshots: list[Snapshot]) -> str:
    rows = []
    for subject, quantities in summarize(s.nodes for s in snapshots).items():
        for quantity, stat in quantities.items():
            cells = "".join(f"<td>{stat[k]:.1f}</td>" for k in ("min", "mean", "max"))
            rows.append(f"<tr><td>{html.escape(subject)}</td><td>{QUANTITY_NAMES[quantity]}</td>{cells}</tr>")
    if not rows:
        return '<p class="empty">No readings.</p>'
    head = "<tr><th>node / GPU</th><th>reading</th><th>min</th><th>mean</th><th>max</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


# The driver's events the run's charts mark, and what a mark says of each.
MARKED = {
    protocol.PHASE_DRIVER_START: "driver starts",
    protocol.PHASE_DRIVER_RESTART: "driver restarts",
    protocol.PHASE_DRIVER_END: "driver ends, exit status",
    protocol.PHASE_ENDED: "ENDED",
    protocol.PHASE_GROW_SUBMITTED: "grow job submitted",
    protocol.PHASE_WORKER_LEFT: "node left Ray",
    protocol.PHASE_WORKER_JOINED: "a grow job's node joined Ray",  # only those: not the job's own nodes
}
MARK_RADIUS = 7
ROW = 24  # the bring-up chart's height per node
MAX_ROWS = 48  # nodes drawn in the bring-up chart; beyond, the head and those that joined last
# The bring-up of one node: from the job's start to its canary check, then to its joining Ray, then in Ray.
BRING_UP = (
    ("launching (until its canary check)", "#c7c7c7"),
    ("starting Ray", "#ff7f0e"),
    ("in Ray", "#98df8a"),
)
FAILED = "#d62728"


@dataclass(frozen=True)
class Mark:
    """A driver event marked on the run's charts: its number on the charts and in the events table."""

    number: int
    t: float
    phase: str
    what: str
    node: str


def _marks(job: JobRun) -> list[Mark]:
    own = set(job.nodes)
    marked = [
        event
        for event in job.events
        if event.phase in MARKED and not (event.phase == protocol.PHASE_WORKER_JOINED and event.detail in own)
    ]
    return [
        Mark(k, e.t, e.phase, f"{MARKED[e.phase]}: {e.detail}" if e.detail else MARKED[e.phase], e.node)
        for k, e in enumerate(sorted(marked, key=lambda e: e.t), start=1)
    ]


def _time_frame(job: JobRun, top: float, height: int = HEIGHT) -> Frame:
    """The run's time axis: from the job's first timeline entry to the last entry or step."""
    times = [event.t for event in job.events] + [t for run in job.drivers for t, _ in run.timed()]
    t0, t1 = min(times), max(times)
    return Frame(t0, t1, top, lambda t: _since(t - t0, t1 - t0), height)


def _overlay(frame: Frame, marks: list[Mark], gaps: list[StepGap]) -> list[str]:
    """The stretches without a new step, shaded, and a numbered line at each mark."""
    parts = []
    bottom = frame.height - BOTTOM
    for gap in gaps:
        x0, x1 = frame.x(gap.start), frame.x(gap.end)
        what = f"no new step after step {gap.step} for {_duration(gap.end - gap.start)}"
        parts.append(
            f'<rect class="gap" x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" height="{bottom - TOP}">'
            f"<title>{html.escape(what)}</title></rect>"
        )
    placed: list[tuple[float, float]] = []
    for mark in marks:
        x, ended = frame.x(mark.t), " ended" if mark.phase == protocol.PHASE_ENDED else ""
        title = f"<title>{mark.number}: {html.escape(mark.what)}</title>"
        parts.append(f'<line class="mark{ended}" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{bottom}"/>')
        middle = TOP + MARK_RADIUS
        while any(abs(x - px) <= 2 * MARK_RADIUS and py == middle for px, py in placed):
            middle += 2 * MARK_RADIUS + 2  # below a mark too close to read beside it
        placed.append((x, middle))
        parts.append(
            f'<circle class="mark{ended}" cx="{x:.1f}" cy="{middle}" r="{MARK_RADIUS}">{title}</circle>'
        )
        parts.append(
            f'<text class="mark" x="{x:.1f}" y="{middle + 4}" text-anchor="middle">{mark.number}</text>'
        )
    return parts


def _lines_frame(job: JobRun, top: float) -> tuple[Frame, dict[int, int]]:
    """The x axis of steps without times: the driver's logs' lines, run after run; and where each run's
    lines start on it."""
    starts, total = {}, 0
    for run in job.drivers:
        starts[run.number], total = total, total + run.lines
    return Frame(1, total, top, lambda v: f"line {v:,.0f}"), starts


def _run_charts(job: JobRun, marks: list[Mark], gaps: list[StepGap]) -> str:
    """The training step over the run, and each throughput the log states, on the run's time axis where
    the log's lines carry times, else against the log's lines."""
    runs = [run for run in job.drivers if run.points]
    if not job.drivers:
        return '<p class="empty">No driver log.</p>'
    if not runs:
        return (
            '<p class="empty">The driver\'s log shows no training step in a form raysub reads '
            "(docs/health.md; <code>--step-regex</code> reads another).</p>"
        )
    # Each series: (name, [(x, value)]) in the log's order; x the time on the job's clock, else the line.
    if job.step_source != "driver log":
        place = {run.number: run.timed() for run in runs}
        axis = (
            f"x: time since the job started; the step as the {job.step_source} reported it (raysub.trainer)."
        )
    elif job.on_the_clock:
        place = {run.number: [(t, point) for t, point in run.timed()] for run in runs}
        undated = sum(len(run.points) - len(place[run.number]) for run in runs)
        axis = (
            "x: time since the job started; the driver's log dated its step lines"
            + (f" ({undated} step lines without a time are left out)" if undated else "")
            + f" in {_zones(runs)}."
        )
    else:
        _, starts = _lines_frame(job, 1.0)
        place = {run.number: [(starts[run.number] + p.number, p) for p in run.points] for run in runs}
        axis = (
            "x: the lines of the driver's log, one run after another: its step lines carry no time the job's "
            "clock can be told from (docs/monitor.md), so none is guessed."
        )
    steps = {run.log: [(x, float(point.step)) for x, point in place[run.number]] for run in runs}
    rates: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for run in runs:
        for x, point in place[run.number]:
            if point.throughput:
                rates.setdefault(point.throughput.unit, {}).setdefault(run.log, []).append(
                    (x, point.throughput.value)
                )
    html_parts = [f'<h3>Training step</h3><p class="axis">{html.escape(axis)}</p>']
    html_parts.append(_chart(job, "steps", steps, marks, gaps))
    for unit, series in rates.items():
        said = "the trainer reported it" if job.step_source != "driver log" else "the log states it"
        html_parts.append(f"<h3>Throughput ({html.escape(unit)}), as {said}</h3>")
        html_parts.append(_chart(job, "throughput", series, marks, gaps))
    return "".join(html_parts)


def _zones(runs: list[DriverRun]) -> str:
    """The time zones the runs' logs were written in, as their clocks were put on the job's."""
    zones = []
    for run in runs:
        assert run.offset is not None
        minutes = round(-run.offset / 60)
        zone = f"UTC{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        if zone not in zones:
            zones.append(zone)
    return "the time zone " + " and ".join(zones)


def _chart(
    job: JobRun,
    name: str,
    series: dict[str, list[tuple[float, float]]],
    marks: list[Mark],
    gaps: list[StepGap],
) -> str:
    """One chart of the run: a line per driver run, over the run's time axis with its marks, or over the
    driver's logs' lines with a line where each restart's log starts."""
    top = _nice_ceiling(max(value for points in series.values() for _, value in points))
    if job.on_the_clock:
        frame = _time_frame(job, top)
        overlay = _overlay(frame, marks, gaps)
    else:
        frame, starts = _lines_frame(job, top)
        overlay = [
            f'<line class="mark" x1="{frame.x(start):.1f}" x2="{frame.x(start):.1f}" y1="{TOP}" '
            f'y2="{HEIGHT - BOTTOM}"><title>driver restart {number}</title></line>'
            for number, start in starts.items()
            if number
        ]
    parts = [*frame.open(name), *overlay]
    parts += [
        _line(frame, PALETTE[k % len(PALETTE)], log, points) for k, (log, points) in enumerate(series.items())
    ]
    return "".join(parts) + "</svg>" + _legend(list(series))


def _bring_up_rows(
    job: JobRun, end: float
) -> list[tuple[str, list[tuple[float, float]], list[protocol.TimelineEvent]]]:
    """Each node's bring-up: (node, its stretches of BRING_UP, its node_failed entries), the head and
    those that joined last when there are more than MAX_ROWS."""
    start = job.first(protocol.PHASE_JOB_START)
    rows = []
    for node in job.nodes:
        canary = next(
            (e.t for e in job.events if e.phase == protocol.PHASE_CANARY_OK and e.node == node), None
        )
        joined = next(
            (
                e.t
                for e in job.events
                if (e.phase == protocol.PHASE_WORKER_JOINED and e.detail == node)
                or (e.phase == protocol.PHASE_HEAD_READY and e.node == node)
            ),
            None,
        )
        edges = [start, canary, joined, end]
        stretches = [
            (a, b) if a is not None and b is not None else (math.nan, math.nan) for a, b in pairwise(edges)
        ]
        failed = [
            e for e in job.events if e.phase == protocol.PHASE_NODE_FAILED and e.detail.startswith(f"{node}:")
        ]
        rows.append((node, stretches, failed, math.inf if joined is None else joined))
    if len(rows) > MAX_ROWS:
        rows = [rows[0], *sorted(rows[1:], key=lambda row: row[3])[-(MAX_ROWS - 1) :]]
    return [(node, stretches, failed) for node, stretches, failed, _ in rows]


def _bring_up(job: JobRun, marks: list[Mark]) -> str:
    """A row per node: how long it took to pass its canary check and to join Ray, on the run's time axis."""
    if not job.events:
        return '<p class="empty">No timeline.jsonl.</p>'
    frame = _time_frame(job, 1.0)
    end = job.first(protocol.PHASE_ENDED)
    rows = _bring_up_rows(job, frame.x1 if end is None else end)
    first = TOP + 2 * MARK_RADIUS + 4  # the rows start below the marks' numbers
    frame = Frame(frame.x0, frame.x1, 1.0, frame.x_label, first + ROW * max(len(rows), 1) + BOTTOM)
    parts = frame.open("bring-up", y_labels=False)
    for k, (node, stretches, failed) in enumerate(rows):
        y = first + k * ROW
        parts.append(f'<text class="node" x="{LEFT + 4}" y="{y + 10}">{html.escape(node)}</text>')
        for (a, b), (what, color) in zip(stretches, BRING_UP, strict=True):
            if not math.isnan(a):
                title = f"<title>{html.escape(node)}: {what}, {b - a:.1f} s</title>"
                width = max(frame.x(b) - frame.x(a), 1.0)  # a stretch too short to see still shows
                parts.append(
                    f'<rect fill="{color}" x="{frame.x(a):.1f}" y="{y + 12}" width="{width:.1f}" '
                    f'height="{ROW - 14}">{title}</rect>'
                )
        for event in failed:
            parts.append(
                f'<circle fill="{FAILED}" cx="{frame.x(event.t):.1f}" cy="{y + 17}" r="{DOT_RADIUS}">'
                f"<title>node failed: {html.escape(event.detail)}</title></circle>"
            )
    parts += _overlay(frame, marks, [])
    shown = (
        f"{len(rows)} of {len(job.nodes)} nodes: the head and those that joined last. "
        if len(rows) < len(job.nodes)
        else ""
    )
    swatch = '<span class="swatch" style="background:{}"></span>'
    legend = "".join(f"<li>{swatch.format(color)}{html.escape(what)}</li>" for what, color in BRING_UP)
    legend += f"<li>{swatch.format(FAILED)}node failed</li>"
    return "".join(parts) + f'</svg><ul class="legend">{legend}</ul><p class="axis">{shown}</p>'


def _events_table(job: JobRun, marks: list[Mark], gaps: list[StepGap]) -> str:
    """The marks and the stretches without a new step, in time order."""
    t0 = min(event.t for event in job.events) if job.events else 0.0
    rows = [(m.t, str(m.number), m.what, m.node) for m in marks]
    rows += [
        (g.start, "", f"no new step after step {g.step} for {_duration(g.end - g.start)}", "") for g in gaps
    ]
    if not rows:
        return '<p class="empty">No driver event.</p>'
    cells = [(number, _clock(t), _since(t - t0, 3600), what, node) for t, number, what, node in sorted(rows)]
    head = "<tr><th>#</th><th>time</th><th>since the start</th><th>event</th><th>node</th></tr>"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
    return f'<table class="events">{head}{body}</table>'


def _run_section(job: JobRun, no_new_step_after: float) -> str:
    gaps = step_gaps(job, no_new_step_after)
    marks = _marks(job)
    ended = f"<p><strong>ENDED:</strong> {html.escape(job.ended)}</p>" if job.ended else ""
    gap_note = (
        f'<p class="axis">Shaded: {_duration(no_new_step_after)} or more without a new step '
        "(raysub health's --stall-after; it calls that a stall when the driver printed nothing else "
        "either).</p>"
    )
    return (
        f"{ended}<h2>Training</h2>{_run_charts(job, marks, gaps)}{gap_note if gaps else ''}"
        f"<h2>Bring-up</h2>{_bring_up(job, marks)}<h2>Events</h2>{_events_table(job, marks, gaps)}"
    )


STYLE = """
body { font: 14px/1.4 sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; } h3 { font-size: 14px; margin-bottom: 2px; }
svg text { font-size: 11px; fill: #555; }
svg text.node { fill: #222; } svg text.mark { fill: #fff; font-size: 10px; font-weight: bold; }
svg .grid { stroke: #ddd; stroke-width: 1; }
svg polyline { fill: none; stroke-width: 2; shape-rendering: crispEdges; }
svg line.mark { stroke: #555; stroke-dasharray: 4 3; } svg circle.mark { fill: #555; }
svg line.mark.ended { stroke: #d62728; } svg circle.mark.ended { fill: #d62728; }
svg rect.gap { fill: #fde0dd; }
.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: -1px; }
table { border-collapse: collapse; }
td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
td:first-child, td:nth-child(2), th:first-child, th:nth-child(2) { text-align: left; }
table.events td, table.events th { text-align: left; }
.empty, .axis { color: #888; } .axis { margin-top: 0; }
"""


def render_report(
    title: str,
    snapshots: list[Snapshot],
    power_caps: Mapping[tuple[str, str], float] | None = None,
    run: JobRun | None = None,
    no_new_step_after: float = Options.stall_after,
) -> str:
    """The whole page: with ``run``, the training step and throughput over the run, each node's bring-up
    and the driver's events (stretches of ``no_new_step_after`` seconds without a new step shaded); then
    the GPUs, a chart per reading over time (one line per node or GPU), then min/mean/max.
    ``power_caps``: W by (node, GPU index), where known."""
    t0 = snapshots[0].t if snapshots else 0.0
    t1 = snapshots[-1].t if snapshots else 0.0
    when = _clock(t0)
    if not snapshots:
        taken = "No snapshots."
    elif len(snapshots) == 1:
        taken = f"1 snapshot, at {when}."
    else:
        taken = f"{len(snapshots)} snapshots from {when}, over {(t1 - t0) / 60:.1f} min."
    charts = "".join(
        f"<h2>{html.escape(chart.title)}</h2>{_svg(chart, _series(chart, snapshots), t0, t1)}"
        for chart in CHARTS
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{_run_section(run, no_new_step_after) if run else ''}"
        f"<p>{taken}</p><h2>GPUs</h2>{_gpu_table(snapshots, power_caps or {})}"
        f"{charts}<h2>Over the whole run</h2>{_summary_table(snapshots)}</body></html>\n"
    )


def job_report(job: Job, step_regex: str | None = None) -> str:
    """raysub report's page of ``job``: its run from LOG_DIR (the driver's logs read with ``step_regex``
    as raysub health reads them), and its metrics.jsonl where the monitor wrote one."""
    recorded = read_snapshots(job.logs.metrics) if job.logs.metrics.exists() else []
    run = read_job_run(job.logs, step_regex or step_sources.read(job.logs.path).step_regex)
    return render_report(f"raysub job {job.job_id}", recorded, power_caps(job), run)
