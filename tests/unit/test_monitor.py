"""raysub.monitor against Ray's exact exposition format, served by local HTTP servers."""

import itertools
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from raysub.gpu_monitor import RayGpuMonitor, summarize, tokens_per_second_per_gpu
from raysub.job.programs.monitor import IdleAlarm
from raysub.monitor import table
from raysub.protocol.metrics_log import MetricsFile, snapshot_line
from raysub.protocol.readings import GIB, GpuMetrics, NodeMetrics, parse_node_metrics
from tests.support.ray_metrics import H200_RAY_2_49, RECORDED, Gpu, exposition, labels, serve

H100 = "NVIDIA H100 80GB HBM3"
GPUS = (
    Gpu("0", H100, 87.0, 40960, 40960),
    Gpu("1", H100, -1, 1024, 80896),  # a device that does not report utilisation
    Gpu("2001", "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 12.5, 512, 39936),  # MIG: GPU 2, instance 1
    Gpu("10", H100, 0.0, 0, 81920),
)


def test_a_recorded_cpu_node() -> None:
    node = parse_node_metrics(RECORDED.read_text())
    assert node.ip == "192.0.2.2"
    assert node.cpu_util_pct == 0.0
    assert node.ram_used_gib == pytest.approx(6.36706816e08 / GIB)
    assert node.ram_total_gib == pytest.approx(2.52765184e10 / GIB)
    assert node.gpus == []


def test_ray_logical_resources_of_a_recorded_node() -> None:
    node = parse_node_metrics(RECORDED.read_text())
    # ray_resources{Name="CPU",State="AVAILABLE"} 1.0 and State="USED" 0.0; memory and the like are left out
    assert node.resources == {"CPU": {"used": 0.0, "available": 1.0}}
    gpus = 'ray_resources{Name="GPU",State="USED",NodeAddress="10.0.0.2"} 6.0\n'
    gpus += 'ray_resources{Name="GPU",State="AVAILABLE",NodeAddress="10.0.0.2"} 2.0\n'
    assert parse_node_metrics(gpus).resources == {"GPU": {"used": 6.0, "available": 2.0}}
    stored = json.loads(snapshot_line({"n": node}, {}, []))["nodes"]["n"]
    assert NodeMetrics.from_dict(stored).resources == node.resources


def test_gpu_units_unknown_readings_and_mig_indices() -> None:
    node = parse_node_metrics(exposition("10.1.0.7", 42.5, 64 * GIB, 2048 * GIB, GPUS))
    assert (node.ip, node.cpu_util_pct, node.ram_used_gib, node.ram_total_gib) == (
        "10.1.0.7",
        42.5,
        64.0,
        2048.0,
    )
    assert [g.index for g in node.gpus] == ["0", "1", "10", "2001"]
    by_index = {g.index: g for g in node.gpus}
    assert (by_index["0"].util_pct, by_index["0"].mem_used_gib, by_index["0"].mem_total_gib) == (
        87.0,
        40.0,
        80.0,
    )
    assert by_index["0"].name == H100
    assert by_index["1"].util_pct is None
    assert (by_index["1"].mem_used_gib, by_index["1"].mem_total_gib) == (1.0, 80.0)
    assert (by_index["2001"].util_pct, by_index["2001"].mem_total_gib) == (12.5, 39.5)
    assert by_index["10"].util_pct == 0.0


def test_gpus_that_serve_only_gpus_available_are_listed_with_unknown_readings() -> None:
    # Ray 2.49 on H200 nodes: ray_node_gpus_available for every GPU, no utilisation nor memory sample.
    node = parse_node_metrics(H200_RAY_2_49.read_text())
    assert (node.ip, node.cpu_util_pct) == ("10.0.0.5", 6.3)
    assert node.ram_total_gib == pytest.approx(2.023725645824e12 / GIB)
    assert node.gpus == [GpuMetrics(str(i), "NVIDIA H200", None, None, None) for i in range(8)]
    rows = table({"h200-node": node}).splitlines()[2:]
    assert [row.split() for row in rows] == [[str(i), "NVIDIA", "H200", "?", "?/?"] for i in range(8)]
    stored = json.loads(snapshot_line({"n": node}, {}, []))["nodes"]["n"]
    assert NodeMetrics.from_dict(stored).gpus == node.gpus


def test_some_gpus_with_readings_some_without() -> None:
    gpus = (
        Gpu("0", H100, 55.0, 1024, 80896),
        Gpu("1", H100, None, 2048, 79872),  # no utilisation sample
        Gpu("2", H100, 30.0, None, None),  # no memory samples
        Gpu("3", H100, None, None, None),  # ray_node_gpus_available only
        Gpu("4", H100, -1, 512, None),  # utilisation not supported; no total
    )
    node = parse_node_metrics(exposition("10.0.0.9", 1.0, GIB, 2 * GIB, gpus))
    assert [(g.index, g.util_pct, g.mem_used_gib, g.mem_total_gib) for g in node.gpus] == [
        ("0", 55.0, 1.0, 80.0),
        ("1", None, 2.0, 80.0),
        ("2", 30.0, None, None),
        ("3", None, None, None),
        ("4", None, 0.5, None),
    ]
    assert {g.name for g in node.gpus} == {H100}


def test_any_per_gpu_series_of_the_node_names_a_gpu() -> None:
    # Ray 2.5x adds power and temperature per GPU; a GPU known only from one of them is still a GPU.
    gpu = labels("10.0.0.4", 'GpuDeviceName="NVIDIA H200",GpuIndex="3",')
    raylet = labels("10.0.0.4", 'Component="raylet",')
    text = (
        "# HELP ray_node_gpu_temperature_celsius Current GPU temperature in Celsius\n"
        "# TYPE ray_node_gpu_temperature_celsius gauge\n"
        f"ray_node_gpu_temperature_celsius{gpu} 41.0\n"
        "# HELP ray_component_cpu_percentage Total CPU usage of the components on a node.\n"
        "# TYPE ray_component_cpu_percentage gauge\n"
        f"ray_component_cpu_percentage{raylet} 2.0\n"
    )
    node = parse_node_metrics(text)
    assert node == NodeMetrics(
        "10.0.0.4", None, None, None, [GpuMetrics("3", "NVIDIA H200", None, None, None, temperature_c=41.0)]
    )


def test_gpu_power_and_temperature_are_readings_where_ray_reports_them() -> None:
    gpu = labels("10.0.0.4", 'GpuDeviceName="NVIDIA H200",GpuIndex="0",')
    text = (
        "# TYPE ray_node_gpu_power_milliwatts gauge\n"
        f"ray_node_gpu_power_milliwatts{gpu} 312500.0\n"
        "# TYPE ray_node_gpu_temperature_celsius gauge\n"
        f"ray_node_gpu_temperature_celsius{gpu} 63.0\n"
    )
    [reading] = parse_node_metrics(text).gpus
    assert (reading.power_w, reading.temperature_c) == (312.5, 63.0)
    summary = summarize([{"n1": parse_node_metrics(text)}])
    assert summary["n1/gpu0"] == {
        "temperature_c": {"min": 63.0, "mean": 63.0, "max": 63.0},
        "power_w": {"min": 312.5, "mean": 312.5, "max": 312.5},
    }


def test_absent_fields_are_none_and_malformed_text_raises() -> None:
    node = parse_node_metrics('ray_node_cpu_utilization{ip="10.0.0.1"} 3.0\n')
    assert node == NodeMetrics("10.0.0.1", 3.0, None, None, [])
    with pytest.raises(ValueError):
        parse_node_metrics('ray_node_mem_used{ip="10.0.0.1" 12\n')


@pytest.mark.parametrize(
    "page",
    [
        "",
        "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 12\n",
        'ray_node_mem_used_host{ip="10.0.0.1"} 12\n',  # our prefix, not one of our metrics
    ],
)
def test_a_page_without_rays_node_metrics_is_a_failed_scrape(page: str) -> None:
    with pytest.raises(ValueError, match="none of Ray's node metrics"):
        parse_node_metrics(page)
    with serve({"other": lambda: page}) as urls:
        monitor = RayGpuMonitor(timeout=2.0, endpoints=lambda: dict(urls), rediscover=0)
        assert monitor.collect_once() == {}
        assert monitor.failed == ["other"]
        monitor.stop()


def test_tokens_per_second_per_gpu() -> None:
    assert tokens_per_second_per_gpu(8000, 2.0, 4) == 1000.0
    assert tokens_per_second_per_gpu(8000, 0.0, 4) == 0.0
    assert tokens_per_second_per_gpu(8000, 2.0, 0) == 0.0
    assert tokens_per_second_per_gpu(float("nan"), 2.0, 4) == 0.0


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/metrics"


def test_cycles_skip_broken_nodes_find_new_ones_and_average_exactly() -> None:
    util = {"value": 80.0}
    pages = {
        "gpu-node": lambda: exposition(
            "10.0.0.1", 10.0, 4 * GIB, 16 * GIB, (Gpu("0", H100, util["value"], 2048, 2048),)
        ),
        "cpu-node": lambda: exposition("10.0.0.2", 30.0, 8 * GIB, 16 * GIB, padding=False),
        "late-node": lambda: exposition("10.0.0.3", 50.0, 2 * GIB, 16 * GIB, padding=False),
        "garbage": lambda: 'ray_node_mem_used{ip="x" 1\n',
    }
    with serve(pages) as urls:
        known = {name: urls[name] for name in ("gpu-node", "cpu-node", "garbage")} | {
            "dead": closed_port_url()
        }
        monitor = RayGpuMonitor(timeout=2.0, endpoints=lambda: dict(known), rediscover=0)
        first = monitor.collect_once()
        assert sorted(first) == ["cpu-node", "gpu-node"]
        assert sorted(monitor.failed) == ["dead", "garbage"]
        util["value"] = 90.0
        known["late-node"] = urls["late-node"]
        second = monitor.collect_once()
        assert sorted(second) == ["cpu-node", "gpu-node", "late-node"]
        monitor.stop()

    flushed = monitor.flush()
    assert flushed["ray/gpu-node/gpu0/util_pct"] == 85.0
    assert flushed["ray/gpu-node/gpu0/mem_used_gib"] == 2.0
    assert flushed["ray/gpu-node/ram_used_gib"] == 4.0
    assert flushed["ray/late-node/cpu_util_pct"] == 50.0
    assert flushed["ray/cluster/gpu_util_pct"] == 85.0
    assert flushed["ray/cluster/ram_used_gib"] == pytest.approx((4 + 8 + 2) / 3)
    assert flushed["ray/cluster/cpu_util_pct"] == pytest.approx((10 + 30 + 50) / 3)
    assert (flushed["ray/cluster/nodes"], flushed["ray/cluster/failed_scrapes"]) == (3.0, 4.0)
    # A second flush has nothing new, and says so.
    assert monitor.flush() == {"ray/cluster/nodes": 3.0, "ray/cluster/failed_scrapes": 0.0}
    assert monitor.summary()["gpu-node/gpu0"]["util_pct"] == {"min": 80.0, "mean": 85.0, "max": 90.0}
    assert monitor.failures == 4


def test_no_nodes_no_gpus_no_division_by_zero() -> None:
    monitor = RayGpuMonitor(endpoints=dict)
    assert monitor.collect_once() == {}
    assert monitor.flush() == {"ray/cluster/nodes": 0.0, "ray/cluster/failed_scrapes": 0.0}
    assert monitor.summary() == {}


def test_stop_returns_promptly_while_the_collector_sleeps() -> None:
    cycles = []

    def endpoints() -> dict[str, str]:
        cycles.append(time.monotonic())
        return {}

    with RayGpuMonitor(interval=30.0, endpoints=endpoints, rediscover=0) as monitor:
        while not cycles:
            time.sleep(0.01)
        time.sleep(0.1)  # the collector is now in its 30 s wait
        started = time.monotonic()
        monitor.stop()
        assert time.monotonic() - started < 0.5
    assert monitor._thread is not None and not monitor._thread.is_alive()


def test_metrics_file_halves_its_resolution_to_stay_bounded(tmp_path: Path) -> None:
    metrics = MetricsFile(tmp_path / "metrics.jsonl", max_bytes=1000)
    for k in range(200):
        metrics.append(json.dumps({"k": k}) + "\n")
        assert metrics.path.stat().st_size <= 1000 + 20
    kept = [json.loads(line)["k"] for line in metrics.path.read_text().splitlines()]
    assert kept[0] == 0 and kept[-1] > 150  # the whole run, start to end
    steps = {b - a for a, b in itertools.pairwise(kept)}
    assert len(steps) <= 2 and min(steps) > 1  # evenly thinned


def test_the_idle_alarm_warns_once_per_idle_stretch() -> None:
    def nodes(*utils: float | None) -> dict[str, NodeMetrics]:
        text = exposition(
            "10.0.0.1",
            0,
            0,
            1,
            tuple(Gpu(str(i), H100, -1 if u is None else u, 0, 1) for i, u in enumerate(utils)),
            padding=False,
        )
        return {"n": parse_node_metrics(text)}

    alarm = IdleAlarm(threshold=5.0, after=60)
    assert alarm.update(nodes(1.0, None), 0) is None
    assert alarm.update(nodes(1.0, 2.0), 59) is None
    assert alarm.update(nodes(1.0, 2.0), 60) == "all 2 GPUs below 5% for 60 s"
    assert alarm.update(nodes(1.0, 2.0), 120) is None
    assert alarm.update(nodes(50.0, 2.0), 130) is None
    assert alarm.update(nodes(None, None), 200) is None  # nothing known: not called idle
    assert alarm.update(nodes(0.0, 0.0), 300) is None
    assert alarm.update(nodes(0.0, 0.0), 400) == "all 2 GPUs below 5% for 100 s"


def test_the_idle_alarm_takes_gpus_without_utilisation_for_unknown_not_idle() -> None:
    unknown = parse_node_metrics(H200_RAY_2_49.read_text())  # 8 GPUs, no utilisation
    alarm = IdleAlarm(threshold=5.0, after=60)
    assert all(alarm.update({"h200": unknown}, t) is None for t in range(0, 3600, 5))
    idle = parse_node_metrics(exposition("10.0.0.2", 0, 0, 1, (Gpu("0", H100, 1.0, 0, 1),), padding=False))
    assert alarm.update({"h200": unknown, "idle": idle}, 4000) is None
    warning = alarm.update({"h200": unknown, "idle": idle}, 4060)
    assert warning == "all 1 GPUs below 5% for 60 s (8 more report no utilisation)"


def test_snapshot_line_round_trips() -> None:
    node = parse_node_metrics(exposition("10.0.0.1", 1.0, GIB, 2 * GIB, GPUS[:1], padding=False))
    record = json.loads(snapshot_line({"n1": node}, {"n1": "http://10.0.0.1:8080/metrics"}, ["n2"]))
    assert record["failed"] == ["n2"]
    assert record["nodes"]["n1"]["url"] == "http://10.0.0.1:8080/metrics"
    assert NodeMetrics.from_dict(record["nodes"]["n1"]) == node


def test_sidecar_writes_snapshots_and_warns_of_idle_gpus_once(tmp_path: Path) -> None:
    from raysub.job.programs import monitor as sidecar

    files = {
        name: tmp_path / name
        for name in ("metrics.jsonl", "timeline.jsonl", "timeline.lock", "DRIVER_STARTED", "ENDED")
    }
    files["DRIVER_STARTED"].touch()
    idle = exposition(
        "10.0.0.1", 1.0, GIB, 4 * GIB, (Gpu("0", H100, 0.0, 10, 100), Gpu("1", H100, -1, 10, 100))
    )
    with serve({"node1": lambda: idle}) as urls:
        threading.Timer(3.0, files["ENDED"].touch).start()
        thread = sidecar.start(
            tmp_path,
            "node1",
            0.5,
            sidecar.IdleAlarm(5, 1),
            lambda: urls,
            lambda: not files["ENDED"].exists(),
        )
        thread.join(timeout=10)
    assert not thread.is_alive()
    snapshots = [json.loads(line) for line in files["metrics.jsonl"].read_text().splitlines()]
    assert 4 <= len(snapshots) <= 8
    assert snapshots[-1]["nodes"]["node1"]["gpus"][0]["util_pct"] == 0.0
    events = [json.loads(line) for line in files["timeline.jsonl"].read_text().splitlines()]
    assert [(e["phase"], e["node"]) for e in events] == [("gpu_idle", "node1")]
    assert events[0]["detail"].startswith("all 1 GPUs below 5% for ")


def test_timeline_is_written_when_flock_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from raysub.protocol.logdir import LogDir

    def no_locks(*_: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr("fcntl.flock", no_locks)
    timeline = tmp_path / "timeline.jsonl"
    LogDir(tmp_path).append_timeline("gpu_idle", "node1", "idle")
    [event] = [json.loads(line) for line in timeline.read_text().splitlines()]
    assert (event["phase"], event["node"], event["detail"]) == ("gpu_idle", "node1", "idle")
