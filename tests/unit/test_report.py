"""raysub monitor and raysub report on a metrics.jsonl in the monitor's format, raysub report's run (the
driver's steps from real logs of tests/fixtures/corpus, the timeline's bring-up and events), and the page in
Chromium."""

import json
import math
import os
import re
import sys
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from raysub.gpu_monitor import RayGpuMonitor
from raysub.health.progress import StepPoint, step_points
from raysub.health.runs import clock_offset, read_job_run, step_gaps
from raysub.protocol import (
    DRIVER_RESTART_LOG_PREFIX,
    PHASE_CANARY_OK,
    PHASE_DRIVER_END,
    PHASE_DRIVER_RESTART,
    PHASE_DRIVER_START,
    PHASE_ENDED,
    PHASE_GROW_SUBMITTED,
    PHASE_HEAD_READY,
    PHASE_JOB_START,
    PHASE_WORKER_JOINED,
    PHASE_WORKER_LEFT,
    TIMELINE,
    TimelineEvent,
    trainer_progress,
)
from raysub.protocol.logdir import LogDir, NodeEntry
from raysub.protocol.metrics_log import Snapshot, read_snapshots, snapshot_line
from raysub.protocol.readings import GIB, GpuMetrics, NodeMetrics, parse_node_metrics
from raysub.report import BOTTOM, HEIGHT, LEFT, PALETTE, RIGHT, TOP, WIDTH, render_report
from raysub.slurm import SlurmState
from raysub.trainer import StepReporter
from raysub.wandb_sink import WandbSink
from tests.conftest import RunCli
from tests.support.chromium import dump_dom, pixels_of, render_page
from tests.support.corpus import blocks
from tests.support.ray_metrics import Gpu, exposition, serve

H100 = "NVIDIA H100 80GB HBM3"
CORPUS = {block.name: block for block in blocks("progress")}


def node_text(n: int, k: int) -> str:
    gpus = tuple(
        Gpu(str(i), H100, 50 + 40 * math.sin(k / 5 + i + n), 1024 * (k + i), 81920 - 1024 * (k + i))
        for i in range(2)
    )
    return exposition(f"10.0.0.{n}", 20.0 + 10 * n, (4 + n + k / 10) * GIB, 16 * GIB, gpus, padding=False)


def write_metrics(logs: LogDir, cycles: int = 40, failed_last: bool = False) -> None:
    logs.path.mkdir(parents=True, exist_ok=True)
    with logs.metrics.open("w") as out:
        for k in range(cycles):
            nodes = {f"node{n}": parse_node_metrics(node_text(n, k)) for n in (1, 2, 3)}
            failed = ["node4"] if failed_last and k == cycles - 1 else []
            record = json.loads(
                snapshot_line(
                    nodes, {name: f"http://10.0.0.{name[-1]}:8080/metrics" for name in nodes}, failed
                )
            )
            record["t"] = 1_800_000_000 + 5 * k
            out.write(json.dumps(record) + "\n")
        out.write('{"t": 1800000200, "nodes": {"node1"')  # a line the monitor is still writing


@pytest.fixture
def job(tmp_path: Path) -> LogDir:
    logs = LogDir.of(tmp_path, 4711)
    write_metrics(logs, failed_last=True)
    (logs.path / "nodes.tsv").write_text("head\t0\tnode1\n")
    return logs


def test_monitor_shows_the_last_snapshot(raysub_cli: RunCli, job: LogDir) -> None:
    result = raysub_cli("monitor", "4711", "--log-dir", str(job.path.parent))
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["NODE", "GPU", "NAME", "UTIL", "%", "MEM", "GiB", "CPU", "%", "RAM", "GiB"]
    assert lines[2].split() == ["node1", "10.0.0.1", "30.0", "8.9/16.0"]
    assert lines[3].split()[:2] == ["0", "NVIDIA"]
    assert lines[3].split()[-2:] == [f"{50 + 40 * math.sin(39 / 5 + 1):.1f}", "39.0/80.0"]
    assert lines[-1].split() == ["node4", "(no", "answer)"]


def test_monitor_live_asks_the_endpoints(raysub_cli: RunCli, job: LogDir) -> None:
    def page(n: int) -> Callable[[], str]:
        return lambda: node_text(n, 0).replace("30.0", "77.0")

    pages = {f"node{n}": page(n) for n in (1, 2)}
    with serve(pages) as urls:
        lines = job.metrics.read_text().splitlines()[:-1]
        last = json.loads(lines[-1])
        for name in last["nodes"]:
            last["nodes"][name]["url"] = urls.get(name, "http://127.0.0.1:9/metrics")
        job.metrics.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
        result = raysub_cli("monitor", "4711", "--log-dir", str(job.path.parent), "--live")
    assert result.code == 0, result.stderr
    rows = {
        line.split()[0]: line.split() for line in result.stdout.splitlines()[2:] if line.startswith("node")
    }
    assert rows["node1"][2] == "77.0"
    assert rows["node3"][1:] == ["(no", "answer)"]


def test_monitor_follow_stops_when_the_job_has_ended(
    raysub_cli: RunCli, job: LogDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: SlurmState("RUNNING", None, "test"))
    monkeypatch.setattr("time.sleep", lambda seconds: job.ended.write_text("driver exited with status 0\n"))
    result = raysub_cli("monitor", "4711", "--log-dir", str(job.path.parent), "--follow")
    assert result.code == 0, result.stderr
    assert result.stdout.count("NODE  ") == 2  # drawn, slept (the job ended meanwhile), drawn once more


def test_monitor_without_metrics_is_one_line(raysub_cli: RunCli, tmp_path: Path) -> None:
    LogDir.of(tmp_path, 4712).path.mkdir()
    result = raysub_cli("monitor", "4712", "--log-dir", str(tmp_path))
    assert result.code == 2
    assert "--no-monitor" in result.stderr


def test_report_is_one_offline_page(raysub_cli: RunCli, job: LogDir, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = raysub_cli("report", "4711", "--log-dir", str(job.path.parent), "-o", str(out))
    assert result.code == 0, result.stderr
    page = out.read_text()
    assert "default-src 'none'" in page
    assert not any(marker in page for marker in ("<script", "src=", "href=", "url(", "@import"))
    assert page.count("<polyline") == 6 + 6 + 3 + 3
    assert "<td>node1/gpu0</td><td>GPU memory used GiB</td><td>0.0</td><td>19.5</td><td>39.0</td>" in page


def test_a_one_snapshot_report_shows_every_reading(tmp_path: Path) -> None:
    logs = LogDir.of(tmp_path, 4713)
    write_metrics(logs, cycles=1)
    page = render_report("raysub job 4713", read_snapshots(logs.metrics))
    assert "1 snapshot, at " in page
    svgs = re.findall(r"<svg .*?</svg>", page)
    assert len(svgs) == 4
    names = [
        [f"node{n}/gpu{i}" for n in (1, 2, 3) for i in range(2)],
        [f"node{n}/gpu{i}" for n in (1, 2, 3) for i in range(2)],
        ["node1", "node2", "node3"],
        ["node1", "node2", "node3"],
    ]
    for svg, expected in zip(svgs, names, strict=True):
        assert "<polyline" not in svg  # a one-point line is not seen: every reading is a dot
        dots = re.findall(
            r'<circle fill="(#[0-9a-f]{6})" cx="([\d.]+)" cy="([\d.]+)" r="([\d.]+)"><title>([^<]*)', svg
        )
        assert [dot[4] for dot in dots] == expected
        for color, cx, cy, r, _ in dots:
            assert color in PALETTE and float(r) >= 3
            assert LEFT < float(cx) < WIDTH - RIGHT and TOP <= float(cy) <= HEIGHT - BOTTOM
        assert len({dot[0] for dot in dots}) == len(expected)  # each its own colour
    util = 50 + 40 * math.sin(0 / 5 + 1 + 2)  # node2/gpu1 in the first snapshot
    cells = "".join(f"<td>{util:.1f}</td>" for _ in range(3))
    assert f"<td>node2/gpu1</td><td>GPU utilisation %</td>{cells}</tr>" in page
    assert "<td>node3</td><td>CPU utilisation %</td><td>50.0</td><td>50.0</td><td>50.0</td>" in page
    assert "<td>node1/gpu1</td><td>GPU memory used GiB</td><td>1.0</td><td>1.0</td><td>1.0</td>" in page


def test_lone_readings_in_a_longer_run_are_dots_and_silent_series_are_named(tmp_path: Path) -> None:
    def node(util: float | None) -> NodeMetrics:
        return NodeMetrics("10.0.0.1", 5.0, 1.0, 2.0, [GpuMetrics("0", H100, util, None, None)])

    snapshots = [
        Snapshot(100.0 + 5 * k, {"n1": node(u), "n2": node(None)}, {}, [])
        for k, u in enumerate([10.0, None, 30.0, 40.0, None])
    ]
    page = render_report("job", snapshots)
    util_chart = re.findall(r"<svg .*?</svg>", page)[0]
    assert util_chart.count("<circle") == 1 and util_chart.count("<polyline") == 1  # 10 alone; 30-40 a line
    assert "No reading from n2/gpu0." in page
    assert "n2/gpu0</li>" not in page


def test_chromium_draws_a_one_snapshot_report(tmp_path: Path) -> None:
    logs = LogDir.of(tmp_path, 4713)
    write_metrics(logs, cycles=1)
    page = tmp_path / "one.html"
    page.write_text(render_report("raysub job 4713", read_snapshots(logs.metrics)))
    image, requested = render_page(page, tmp_path)
    assert requested == set()
    for color in PALETTE[:6]:
        assert pixels_of(image, color) > 20, color


def test_the_gpu_table_names_each_gpu_with_its_memory_and_power_cap(tmp_path: Path) -> None:
    logs = LogDir.of(tmp_path, 4714)
    write_metrics(logs, cycles=2)
    snapshots = read_snapshots(logs.metrics)
    gpu = snapshots[-1].nodes["node2"].gpus[1]
    page = render_report("raysub job 4714", snapshots, power_caps={("node2", "1"): 700.0})
    table = page.split("<h2>GPUs</h2>")[1].split("</table>")[0]
    assert table.count("<tr><td>") == 6  # 3 nodes of 2 GPUs
    row = f"<tr><td>node2</td><td>1</td><td>{gpu.name}</td><td>{gpu.mem_total_gib:.1f}</td><td>700</td></tr>"
    assert row in table
    assert "<tr><td>node1</td><td>0</td>" in table and "<td>?</td></tr>" in table  # no cap known


def test_report_escapes_names_and_survives_no_data() -> None:
    page = render_report("<job>", [])
    assert "&lt;job&gt;" in page and "No readings" in page


def test_chromium_draws_the_charts_and_fetches_nothing(job: LogDir, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_report("raysub job 4711", read_snapshots(job.metrics)))
    image, requested = render_page(page, tmp_path)
    assert requested == set()
    # Every series colour is drawn (crisp edges keep the exact colour on the lines).
    for color in PALETTE[:6]:
        assert pixels_of(image, color) > 200, color
    # The probe can tell: a page that fetches something is caught.
    fetching = tmp_path / "fetching.html"
    fetching.write_text('<img src="http://127.0.0.1:9/x.png">')
    assert "http://127.0.0.1:9/x.png" in render_page(fetching, tmp_path)[1]


def test_wandb_sink_logs_each_flush() -> None:
    class Run:
        def __init__(self) -> None:
            self.logged: list[tuple[dict[str, float], int | None]] = []

        def log(self, values: dict[str, float], step: int | None = None) -> None:
            self.logged.append((values, step))

    with serve({"n": lambda: node_text(1, 0)}) as urls:
        monitor = RayGpuMonitor(endpoints=lambda: urls)
        monitor.collect_once()
        run = Run()
        WandbSink(monitor, run).log(step=7)
        monitor.stop()
    values, step = run.logged[0]
    assert step == 7
    assert values["ray/n/cpu_util_pct"] == 30.0


def test_wandb_sink_without_a_run_uses_the_wandb_module(monkeypatch: pytest.MonkeyPatch) -> None:
    logged = []
    fake = types.ModuleType("wandb")
    fake.log = lambda values, step=None: logged.append((values, step))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    WandbSink(RayGpuMonitor(endpoints=dict)).log()
    assert logged == [({"ray/cluster/nodes": 0.0, "ray/cluster/failed_scrapes": 0.0}, None)]


# The run: a real torchtitan block (dated step lines, a throughput each), put in a LogDir whose timeline
# wraps it, with the job's nodes written in UTC+2 and the driver silent for 40 min before it ended.
TITAN = "torchtitan-profiler-and-gc-lines-every-10-steps"
UTC_PLUS_2 = -7200.0  # what puts a UTC+2 node's timestamps, read as UTC, on the job's clock
SILENT = 2400.0


def event(t: float, phase: str, node: str = "node1", detail: str = "") -> str:
    return TimelineEvent(t, phase, node, detail).line()


def titan_job(base: Path) -> tuple[LogDir, list[StepPoint]]:
    points = step_points(CORPUS[TITAN].text)
    first, last = (points[0].t or 0.0) + UTC_PLUS_2, (points[-1].t or 0.0) + UTC_PLUS_2
    logs = LogDir.of(base, 4715)
    logs.path.mkdir(parents=True)
    logs.write_node_map([NodeEntry("head", 0, "node1"), NodeEntry("worker", 0, "node2")])
    start = first - 150
    logs.file(TIMELINE).write_text(
        event(start, PHASE_JOB_START, detail="attempt 0")
        + event(start + 4, PHASE_CANARY_OK)
        + event(start + 21, PHASE_CANARY_OK, "node2")
        + event(start + 30, PHASE_HEAD_READY, detail="10.0.0.1:6379")
        + event(start + 33, PHASE_WORKER_JOINED, detail="node1")
        + event(start + 95, PHASE_WORKER_JOINED, detail="node2")
        + event(start + 100, PHASE_DRIVER_START)
        + event(last + SILENT, PHASE_DRIVER_END, detail="1")
        + event(last + SILENT + 1, PHASE_ENDED, detail="driver exited with status 1")
    )
    logs.ended.write_text("driver exited with status 1\n")
    logs.driver_log.write_text(CORPUS[TITAN].text)
    os.utime(logs.driver_log, (last + 5, last + 5))
    return logs, points


def svg_of(page: str, name: str) -> str:
    found = re.search(rf'<svg class="{name}" .*?</svg>', page)
    assert found, name
    return found.group()


def test_step_points_read_a_whole_corpus_block() -> None:
    points = step_points(CORPUS[TITAN].text)
    assert [p.step for p in points] == [200, 210, 220, 230, 240, 250]
    assert points[-1].t == datetime(2025, 6, 16, 22, 32, 0, 846000, tzinfo=UTC).timestamp()
    assert [p.throughput and p.throughput.value for p in points[:2]] == [5856.0, 5593.0]
    assert {p.throughput and p.throughput.unit for p in points} == {"tokens/s/device"}


def test_a_log_clock_goes_on_the_jobs_clock_only_when_one_time_zone_fits() -> None:
    stamps = [10_000.0, 10_600.0]
    assert clock_offset(stamps, 10_000.0 - 7200 - 60, 10_600.0 - 7200 + 5) == -7200.0
    assert clock_offset(stamps, 0.0, 100.0) is None  # 600 s of steps in a run of 100 s: no zone fits
    assert clock_offset(stamps, 10_000.0 - 3600, 10_600.0 + 3600) is None  # several would
    assert clock_offset([], 0.0, 1.0) is None


def test_the_report_draws_a_dated_run_on_the_jobs_clock_with_its_events(tmp_path: Path) -> None:
    logs, points = titan_job(tmp_path)
    run = read_job_run(logs)
    assert run.on_the_clock and run.drivers[0].offset == UTC_PLUS_2
    [gap] = step_gaps(run, 1800.0)
    assert (gap.step, gap.end - gap.start) == (250, SILENT)
    page = render_report("raysub job 4715", [], None, run)
    steps = svg_of(page, "steps")
    [line] = re.findall(r'<polyline stroke="#1f77b4" points="([^"]*)"', steps)
    assert len(line.split()) == len(points) == 6
    assert steps.count('<rect class="gap"') == 1
    assert re.findall(r'<text class="mark"[^>]*>(\d+)</text>', steps) == ["1", "2", "3"]
    assert "in the time zone UTC+02:00" in page
    assert "<strong>ENDED:</strong> driver exited with status 1" in page
    assert "<td>ENDED: driver exited with status 1</td><td>node1</td>" in page
    assert "no new step after step 250 for 40.0 min" in page
    assert "Throughput (tokens/s/device)" in page and '<svg class="throughput"' in page
    bring_up = svg_of(page, "bring-up")
    assert [n for n in re.findall(r'<text class="node"[^>]*>([^<]*)<', bring_up)] == ["node1", "node2"]
    assert "node2: starting Ray, 74.0 s" in bring_up


def test_the_events_table_gives_each_time_its_offset_from_utc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The page is made on a machine two hours east of UTC; whoever reads it may be elsewhere.
    logs, _ = titan_job(tmp_path)
    try:
        with monkeypatch.context() as zone:
            zone.setenv("TZ", "XYZ-2")
            time.tzset()
            page = render_report("raysub job 4715", [], None, read_job_run(logs))
    finally:
        time.tzset()
    ended = datetime.fromtimestamp(logs.timeline()[-1].t, UTC) + timedelta(hours=2)
    assert f"<td>{ended:%Y-%m-%d %H:%M:%S} +0200</td>" in page
    assert len(re.findall(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0200</td>", page)) == 4


def test_steps_without_times_are_drawn_against_the_logs_lines_run_after_run(tmp_path: Path) -> None:
    logs = LogDir.of(tmp_path, 4716)
    logs.path.mkdir()
    first = CORPUS["verl-step-key-value-lines-then-validation-samples"].text
    logs.driver_log.write_text(first)
    logs.file(f"{DRIVER_RESTART_LOG_PREFIX}1.log").write_text(
        CORPUS["verl-early-format-step-lines-phase-timings-only"].text
    )
    logs.file(TIMELINE).write_text(
        event(1e9, PHASE_JOB_START)
        + event(1e9 + 60, PHASE_DRIVER_START)
        + event(1e9 + 600, PHASE_DRIVER_RESTART)
    )
    run = read_job_run(logs)
    assert not run.on_the_clock and step_gaps(run, 1.0) == []
    steps = svg_of(render_report("raysub job 4716", [], None, run), "steps")
    assert steps.count("<polyline") == 2  # a line per run, never joined across the restart
    assert "<title>driver restart 1</title>" in steps
    assert f">line {first.count(chr(10)) + 2:,}<" not in steps and ">line 1<" in steps


def test_a_run_of_ten_thousand_steps_is_drawn_with_a_few_points_per_pixel(tmp_path: Path) -> None:
    # verl's step line from the corpus, stepping on to 10,000 (more than 4 points per pixel column), with
    # a throughput that dips once, at 7,337.
    line = next(
        x
        for x in CORPUS["verl-step-key-value-lines-then-validation-samples"].text.splitlines()
        if "step:1 " in x
    )
    assert "perf/throughput:" in line
    text = "".join(
        re.sub(
            r"perf/throughput:[\d.]+",
            f"perf/throughput:{100 if k == 7_337 else 1000}",
            line.replace("step:1 ", f"step:{k} "),
        )
        + "\n"
        for k in range(1, 10_001)
    )
    logs = LogDir.of(tmp_path, 4718)
    logs.path.mkdir()
    logs.driver_log.write_text(text)
    page = render_report("raysub job 4718", [], None, read_job_run(logs))
    columns = WIDTH - LEFT - RIGHT + 1
    [steps] = re.findall(r'<polyline stroke="#1f77b4" points="([^"]*)"', svg_of(page, "steps"))
    [rate] = re.findall(r'<polyline stroke="#1f77b4" points="([^"]*)"', svg_of(page, "throughput"))
    for points in (steps.split(), rate.split()):
        assert len(points) <= 4 * columns
        # The first step and the last are kept, at either end of the plot.
        first_x, last_x = (float(points[k].split(",")[0]) for k in (0, -1))
        assert first_x == LEFT and last_x > WIDTH - RIGHT - 1
    # The one dip is kept: on the page the dip is the line's lowest point (the largest y).
    ys = [float(p.split(",")[1]) for p in rate.split()]
    assert max(ys) > min(ys) + 100


def test_a_report_of_a_driver_that_printed_no_step_says_so(tmp_path: Path) -> None:
    logs = LogDir.of(tmp_path, 4717)
    logs.path.mkdir()
    logs.driver_log.write_text(CORPUS["raytrain-v2-worker-group-started-no-steps"].text)
    page = render_report("raysub job 4717", [], None, read_job_run(logs))
    assert "shows no training step" in page and '<svg class="steps"' not in page
    assert "No timeline.jsonl." in page


def test_chromium_draws_the_step_chart_of_raysub_report(raysub_cli: RunCli, tmp_path: Path) -> None:
    """Issue 27's test: raysub report of a job whose driver printed steps shows the step chart."""
    _, points = titan_job(tmp_path)
    out = tmp_path / "titan.html"
    result = raysub_cli("report", "4715", "--log-dir", str(tmp_path), "-o", str(out))
    assert result.code == 0, result.stderr
    dom = dump_dom(out)
    steps = svg_of(dom, "steps")
    [line] = re.findall(r'<polyline stroke="#1f77b4" points="([^"]*)"', steps)
    assert len(line.split()) == len(points)
    assert [label for label in re.findall(r'<text class="x"[^>]*>([^<]*)<', steps)][::4] == [
        "0.0 min",
        "43.7 min",
    ]
    assert re.findall(r'text-anchor="end">([^<]*)<', steps) == ["0", "125", "250", "375", "500"]
    image, requested = render_page(out, tmp_path, height=1400)
    assert requested == set()
    chart = image.crop((0, 150, 1000, 480))  # the step chart, under the title, ENDED and its heading
    assert pixels_of(chart, PALETTE[0]) > 40  # the steps' line
    assert pixels_of(chart, "#fde0dd") > 100_000  # the 40 min without a new step
    assert pixels_of(chart, "#d62728") > 50  # ENDED's mark


def test_the_report_draws_the_step_the_trainer_reported_over_the_drivers_text(tmp_path: Path) -> None:
    logs, points = titan_job(tmp_path)
    start = (points[0].t or 0.0) + UTC_PLUS_2
    clock = [start]
    reporter = StepReporter("api", logs.path, clock=lambda: clock[0], write_every=0.0)
    for step in range(1, 61):  # one report a second: the history keeps one every 10 s, and the last
        clock[0] = start + step
        reporter.report(step, total=60, throughput=3000.0 + step, unit="tokens/s")
    reporter.flush()
    kept = trainer_progress.history(logs.path)
    assert [report.step for report in kept] == [1, 11, 21, 31, 41, 51, 60]
    run = read_job_run(logs)
    assert run.step_source == "trainer (api)" and run.on_the_clock
    assert [point.step for point in run.drivers[0].points] == [1, 11, 21, 31, 41, 51, 60]
    page = render_report("raysub job 4715", [], None, run)
    assert "the step as the trainer (api) reported it" in page
    [line] = re.findall(r'<polyline stroke="#1f77b4" points="([^"]*)"', svg_of(page, "steps"))
    assert len(line.split()) == 7
    assert "Throughput (tokens/s), as the trainer reported it" in page


def test_the_report_marks_the_clusters_growth_but_not_its_own_nodes_joining(tmp_path: Path) -> None:
    logs, points = titan_job(tmp_path)
    middle = (points[2].t or 0.0) + UTC_PLUS_2
    with logs.file(TIMELINE).open("a") as timeline:
        timeline.write(
            event(middle, PHASE_GROW_SUBMITTED, "login1", "4790: 1 node(s), by autoscale")
            + event(middle + 40, PHASE_WORKER_JOINED, detail="node3")
            + event(middle + 900, PHASE_WORKER_LEFT, detail="node3")
        )
    page = render_report("raysub job 4715", [], None, read_job_run(logs))
    events = re.findall(r"<td>(\d*)</td><td>[^<]*</td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>", page)
    assert [(what, node) for number, what, node in events if number] == [
        ("driver starts", "node1"),
        ("grow job submitted: 4790: 1 node(s), by autoscale", "login1"),
        ("a grow job&#x27;s node joined Ray: node3", "node1"),
        ("node left Ray: node3", "node1"),
        ("driver ends, exit status: 1", "node1"),
        ("ENDED: driver exited with status 1", "node1"),
    ]
