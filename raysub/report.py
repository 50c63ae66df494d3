"""``raysub report``: one self-contained HTML page of a job's metrics.jsonl.

The charts are inline SVG drawn here, the styles inline, and a Content-Security-Policy forbids the page
every fetch: it opens offline, from a mail attachment or a shared filesystem, and asks nothing of the network.
"""

import html
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from raysub.protocol.metrics_log import Snapshot
from raysub.protocol.ray_metrics import summarize
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
    span = t1 - t0  # 0 for a single snapshot: its readings stand in the middle of the time axis
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (plot_w / 2 if span <= 0 else (t - t0) / span * plot_w)

    def y(v: float) -> float:
        return TOP + plot_h - min(v, top) / top * plot_h

    parts = [f'<svg role="img" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">']
    for k in range(5):  # horizontal grid and the y axis labels
        value = top * k / 4
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}"/>'
        )
        parts.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:g}</text>')
    for k in range(5) if span > 0 else range(1):  # the time axis, since the first snapshot
        t = t0 + span * k / 4
        label = f"{t - t0:.0f} s" if span < 120 else f"{(t - t0) / 60:.1f} min"
        parts.append(f'<text x="{x(t):.1f}" y="{HEIGHT - 10}" text-anchor="middle">{label}</text>')
    for index, (name, points) in enumerate(drawn.items()):
        color, title = PALETTE[index % len(PALETTE)], f"<title>{html.escape(name)}</title>"
        segment: list[tuple[float, float]] = []
        for t, v in [*points, (t1, None)]:  # None ends a segment: a gap where the reading was missing
            if v is not None:
                segment.append((x(t), y(v)))
            elif len(set(segment)) == 1:  # one reading, or several at one instant: a line would not show
                cx, cy = segment[-1]
                parts.append(
                    f'<circle fill="{color}" cx="{cx:.1f}" cy="{cy:.1f}" r="{DOT_RADIUS}">{title}</circle>'
                )
            elif segment:
                points_attr = " ".join(f"{px:.1f},{py:.1f}" for px, py in segment)
                parts.append(f'<polyline stroke="{color}" points="{points_attr}">{title}</polyline>')
            if v is None:
                segment = []
    parts.append("</svg>")
    swatch = '<span class="swatch" style="background:{}"></span>'
    legend = "".join(
        f"<li>{swatch.format(PALETTE[k % len(PALETTE)])}{html.escape(name)}</li>"
        for k, name in enumerate(drawn)
    )
    silent = sorted(set(series) - set(drawn))
    note = f'<p class="empty">No reading from {html.escape(", ".join(silent))}.</p>' if silent else ""
    return "".join(parts) + f'<ul class="legend">{legend}</ul>{note}'


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


STYLE = """
body { font: 14px/1.4 sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
svg text { font-size: 11px; fill: #555; }
svg .grid { stroke: #ddd; stroke-width: 1; }
svg polyline { fill: none; stroke-width: 2; shape-rendering: crispEdges; }
.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: -1px; }
table { border-collapse: collapse; }
td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
td:first-child, td:nth-child(2), th:first-child, th:nth-child(2) { text-align: left; }
.empty { color: #888; }
"""


def render_report(
    title: str, snapshots: list[Snapshot], power_caps: Mapping[tuple[str, str], float] | None = None
) -> str:
    """The whole page: the GPUs, a chart per reading over time (one line per node or GPU), then
    min/mean/max. ``power_caps``: W by (node, GPU index), where known."""
    t0 = snapshots[0].t if snapshots else 0.0
    t1 = snapshots[-1].t if snapshots else 0.0
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0))
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
        f"<h1>{html.escape(title)}</h1>"
        f"<p>{taken}</p><h2>GPUs</h2>{_gpu_table(snapshots, power_caps or {})}"
        f"{charts}<h2>Over the whole run</h2>{_summary_table(snapshots)}</body></html>\n"
    )
