"""GPU, CPU and memory of every Ray node, read from Ray's per-node Prometheus endpoints.

A library for trainers (``RayGpuMonitor`` inside a Ray driver, ``flush()`` into wandb or tensorboard) and,
run as a script, the sidecar every raysub job starts on its head. This file imports nothing from raysub and
nothing but the standard library and prometheus_client (which ray[default] brings): the job copies it into
LOG_DIR and runs it with the head's Python, which has Ray but need not have raysub.

Ray's units: host memory in bytes; GPU memory in MiB although the metric says bytes; utilisation in percent,
negative when the device does not report it (unknown, not idle).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GIB = 2**30
MIB_PER_GIB = 1024

# Ray's metric names (the reporter agent's gauges, exported with the ray_ prefix).
CPU_UTIL = "ray_node_cpu_utilization"
RAM_USED = "ray_node_mem_used"
RAM_TOTAL = "ray_node_mem_total"
GPU_AVAILABLE = "ray_node_gpus_available"
GPU_UTIL = "ray_node_gpus_utilization"
GPU_MEM_USED = "ray_node_gram_used"
GPU_MEM_AVAILABLE = "ray_node_gram_available"
NODE_METRICS = (CPU_UTIL, RAM_USED, RAM_TOTAL)
GPU_METRICS = (GPU_AVAILABLE, GPU_UTIL, GPU_MEM_USED, GPU_MEM_AVAILABLE)
# A GPU exists when any of the node's series carries its index: the four above, and whatever else a Ray
# version adds per GPU (ray_node_gpu_power_milliwatts and ray_node_gpu_temperature_celsius in Ray 2.60).
# Some Ray versions serve only some of them (2.49 on H200 nodes: ray_node_gpus_available alone).
NODE_PREFIX = "ray_node_"
GPU_INDEX = "GpuIndex"
_GPU_INDEX_LABEL = f'{GPU_INDEX}="'


@dataclass(frozen=True)
class GpuMetrics:
    """One GPU as Ray labels it: ``index`` is GpuIndex (MIG devices: gpu * 1000 + mig)."""

    index: str
    name: str | None
    util_pct: float | None
    mem_used_gib: float | None
    mem_total_gib: float | None


@dataclass(frozen=True)
class NodeMetrics:
    """One node's reading; a field Ray did not report is None."""

    ip: str | None
    cpu_util_pct: float | None
    ram_used_gib: float | None
    ram_total_gib: float | None
    gpus: list[GpuMetrics] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeMetrics:
        """The inverse of ``dataclasses.asdict``, for snapshots read back from metrics.jsonl."""
        gpus = [GpuMetrics(**gpu) for gpu in data.get("gpus", [])]
        return cls(
            data.get("ip"),
            data.get("cpu_util_pct"),
            data.get("ram_used_gib"),
            data.get("ram_total_gib"),
            gpus,
        )


def _wanted(line: str) -> bool:
    return line.startswith(NODE_METRICS) or (line.startswith(NODE_PREFIX) and _GPU_INDEX_LABEL in line)


def _wanted_lines(text: str) -> str:
    # An endpoint serves hundreds of metrics (~250 KB) and the parser is pure Python: hand it only the
    # node's own readings and its per-GPU samples (no # HELP or # TYPE: every family parses as untyped).
    return "\n".join(line for line in text.splitlines() if _wanted(line)) + "\n"


def _gpu_sort_key(index: str) -> tuple[int, str]:
    return (int(index), index) if index.isdigit() else (sys.maxsize, index)


def parse_node_metrics(text: str) -> NodeMetrics:
    """One node's metrics from its endpoint's exposition text; raises ValueError when it is malformed."""
    from prometheus_client.parser import text_string_to_metric_families

    ip: str | None = None
    node: dict[str, float] = {}
    gpus: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for sample in family.samples:
            labels = sample.labels
            if GPU_INDEX in labels:  # any per-GPU series names a GPU, whether or not it has our readings
                gpu = gpus.setdefault(labels[GPU_INDEX], {"name": None})
                gpu["name"] = gpu["name"] or labels.get("GpuDeviceName")
                gpu[sample.name] = sample.value
            elif sample.name in NODE_METRICS:
                node[sample.name] = sample.value
            else:
                continue  # a longer name with our prefix: ray_node_mem_used_host
            ip = ip or labels.get("ip")

    def gib(value: float | None, per_gib: float) -> float | None:
        return None if value is None or math.isnan(value) else value / per_gib

    def gpu_metrics(index: str, values: dict[str, Any]) -> GpuMetrics:
        util = values.get(GPU_UTIL)
        used, available = values.get(GPU_MEM_USED), values.get(GPU_MEM_AVAILABLE)
        total = used + available if used is not None and available is not None else None
        return GpuMetrics(
            index=index,
            name=values["name"],
            util_pct=None if util is None or math.isnan(util) or util < 0 else util,
            mem_used_gib=gib(used, MIB_PER_GIB),
            mem_total_gib=gib(total, MIB_PER_GIB),
        )

    return NodeMetrics(
        ip=ip,
        cpu_util_pct=node.get(CPU_UTIL),
        ram_used_gib=gib(node.get(RAM_USED), GIB),
        ram_total_gib=gib(node.get(RAM_TOTAL), GIB),
        gpus=[gpu_metrics(index, gpus[index]) for index in sorted(gpus, key=_gpu_sort_key)],
    )


def tokens_per_second_per_gpu(tokens: float, seconds: float, num_gpus: int) -> float:
    """Throughput per GPU; 0.0 when there is no time, no GPU or no finite count to divide."""
    if seconds <= 0 or num_gpus <= 0 or not math.isfinite(tokens) or not math.isfinite(seconds):
        return 0.0
    return tokens / seconds / num_gpus


def ray_endpoints() -> dict[str, str]:
    """Every alive node's metrics URL, keyed by its node name (Ray's default: its IP), from ``ray.nodes()``.

    Needs a connected Ray driver (``ray.init()``)."""
    import ray

    return {
        node.get("NodeName") or node["NodeManagerAddress"]: _url(
            node["NodeManagerAddress"], node["MetricsExportPort"]
        )
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node.get("Alive") and node.get("MetricsExportPort")
    }


def gcs_endpoints(address: str) -> Callable[[], dict[str, str]]:
    """Like ray_endpoints, straight from the GCS at ``address`` (no driver): what the sidecar uses."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    client = GcsClient(address=address)

    def endpoints() -> dict[str, str]:
        nodes = client.get_all_node_info(timeout=5).values()
        return {
            n.node_name or n.node_manager_address: _url(n.node_manager_address, n.metrics_export_port)
            for n in nodes
            if n.state == 0 and n.metrics_export_port
        }

    return endpoints


def _url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}/metrics"


@dataclass
class _Stat:
    """Running min/mean/max of one reading, over the run and since the last flush."""

    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    flush_count: int = 0
    flush_total: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)
        self.flush_count += 1
        self.flush_total += value

    def summary(self) -> dict[str, float]:
        return {"min": self.low, "mean": self.total / self.count, "max": self.high}


Summary = dict[str, dict[str, dict[str, float]]]


def _record(stats: dict[tuple[str, str], _Stat], nodes: Mapping[str, NodeMetrics]) -> None:
    for subject, quantity, value in readings(nodes):
        stats.setdefault((subject, quantity), _Stat()).add(value)


def _summary(stats: Mapping[tuple[str, str], _Stat]) -> Summary:
    out: Summary = {}
    for (subject, quantity), stat in sorted(stats.items()):
        out.setdefault(subject, {})[quantity] = stat.summary()
    return out


def summarize(cycles: Iterable[Mapping[str, NodeMetrics]]) -> Summary:
    """min/mean/max of every reading over ``cycles``, as RayGpuMonitor.summary() gives them."""
    stats: dict[tuple[str, str], _Stat] = {}
    for nodes in cycles:
        _record(stats, nodes)
    return _summary(stats)


def readings(nodes: Mapping[str, NodeMetrics]) -> Iterator[tuple[str, str, float]]:
    """(subject, quantity, value) for every known reading: subjects are ``node`` and ``node/gpuN``."""
    for name, node in nodes.items():
        for quantity in ("cpu_util_pct", "ram_used_gib"):
            value = getattr(node, quantity)
            if value is not None:
                yield name, quantity, value
        for gpu in node.gpus:
            for quantity in ("util_pct", "mem_used_gib"):
                value = getattr(gpu, quantity)
                if value is not None:
                    yield f"{name}/gpu{gpu.index}", quantity, value


class RayGpuMonitor:
    """Scrapes every Ray node's metrics endpoint every ``interval`` seconds in a daemon thread.

    Nodes are found through ``endpoints`` (default: ``ray.nodes()``, so call ``ray.init()`` first) at
    the start and every ``rediscover`` seconds, so nodes that join later appear; they are keyed by node
    name or IP, never by position. Nodes are scraped concurrently, each with ``timeout``; a node that
    fails or serves malformed text is skipped and counted in ``failures``. Use as a context manager, or
    ``start()`` and ``stop()``.

    Example:
        with RayGpuMonitor(interval=10) as monitor:
            for step in range(steps):
                train_step()
                wandb.log(monitor.flush(), step=step)
    """

    def __init__(
        self,
        interval: float = 5.0,
        timeout: float = 3.0,
        endpoints: Callable[[], Mapping[str, str]] | None = None,
        rediscover: float = 30.0,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.rediscover = rediscover
        self.failures = 0
        self.latest: dict[str, NodeMetrics] = {}
        self.failed: list[str] = []
        self._endpoints_source = endpoints or ray_endpoints
        self._endpoints: dict[str, str] = {}
        self._discovered_at = -math.inf
        self._stats: dict[tuple[str, str], _Stat] = {}
        self._flush_failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="raysub-monitor-scrape")

    @property
    def endpoints(self) -> dict[str, str]:
        return dict(self._endpoints)

    def _scrape(self, url: str) -> NodeMetrics:
        with urllib.request.urlopen(url, timeout=self.timeout) as response:  # noqa: S310 (http:// built by _url)
            return parse_node_metrics(response.read().decode("utf-8", errors="replace"))

    def collect_once(self) -> dict[str, NodeMetrics]:
        """One cycle: (re)discover when due, scrape every node, record and return the readings."""
        now = time.monotonic()
        if now - self._discovered_at >= self.rediscover or not self._endpoints:
            try:
                self._endpoints = dict(self._endpoints_source())
                self._discovered_at = now
            except Exception as error:  # a busy GCS must not end the monitor; keep the last list
                print(f"raysub monitor: cannot list Ray's nodes: {error}", file=sys.stderr)
        futures = {name: self._pool.submit(self._scrape, url) for name, url in self._endpoints.items()}
        nodes: dict[str, NodeMetrics] = {}
        failed = []
        for name, future in futures.items():
            try:
                nodes[name] = future.result()
            except Exception:  # unreachable, timed out or malformed: skip it this cycle, count it
                failed.append(name)
        with self._lock:
            self.latest, self.failed = nodes, failed
            self.failures += len(failed)
            self._flush_failures += len(failed)
            _record(self._stats, nodes)
        return nodes

    def flush(self) -> dict[str, float]:
        """Means since the last flush, as flat ``ray/...`` keys (docs/monitor.md has the scheme)."""
        out: dict[str, float] = {}
        cluster: dict[str, list[float]] = {}
        with self._lock:
            for (subject, quantity), stat in sorted(self._stats.items()):
                if not stat.flush_count:
                    continue
                mean = stat.flush_total / stat.flush_count
                out[f"ray/{subject}/{quantity}"] = mean
                scope = "gpu_" if "/gpu" in subject else ""
                cluster.setdefault(f"ray/cluster/{scope}{quantity}", []).append(mean)
                stat.flush_count, stat.flush_total = 0, 0.0
            out["ray/cluster/nodes"] = float(len(self.latest))
            out["ray/cluster/failed_scrapes"] = float(self._flush_failures)
            self._flush_failures = 0
        out.update({key: sum(values) / len(values) for key, values in cluster.items()})
        return out

    def summary(self) -> Summary:
        """min/mean/max over the whole run: ``{"node1/gpu0": {"util_pct": {"min":…, "mean":…, "max":…}}}``."""
        with self._lock:
            return _summary(self._stats)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.collect_once()
            self._stop.wait(self.interval)

    def start(self) -> RayGpuMonitor:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="raysub-monitor", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Returns at once when the collector sleeps; a scrape in flight finishes on its own."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.2)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RayGpuMonitor:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _rounded(value: Any) -> Any:
    """Readings to 3 decimals (a MiB in GiB, a tenth of a percent): a third of the bytes per snapshot."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def snapshot_line(nodes: Mapping[str, NodeMetrics], endpoints: Mapping[str, str], failed: list[str]) -> str:
    """One line of metrics.jsonl: the time, every node's reading and URL, and the nodes that failed."""
    record = {
        "t": round(time.time(), 3),
        "nodes": {
            name: {**_rounded(asdict(node)), "url": endpoints.get(name)}
            for name, node in sorted(nodes.items())
        },
        "failed": sorted(failed),
    }
    return json.dumps(record, separators=(",", ":")) + "\n"


class MetricsFile:
    """metrics.jsonl, kept under ``max_bytes``: past it, every second line is dropped and from then on
    only every second snapshot is written (each time it fills, the resolution halves; the whole run stays)."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep_every = 1
        self._cycle = 0

    def append(self, line: str) -> None:
        self._cycle += 1
        if (self._cycle - 1) % self.keep_every:
            return
        with self.path.open("a") as out:
            out.write(line)
        if self.path.stat().st_size > self.max_bytes:
            lines = self.path.read_text().splitlines(keepends=True)
            temporary = self.path.with_name(self.path.name + ".tmp")
            temporary.write_text("".join(lines[::2]))
            temporary.replace(self.path)
            self.keep_every *= 2


class IdleWatch:
    """Says once when every GPU with a known reading has stayed below ``threshold`` % for ``after`` s.

    A GPU whose utilisation is unknown (None) is not idle: it neither starts nor ends an idle stretch."""

    def __init__(self, threshold: float, after: float) -> None:
        self.threshold = threshold
        self.after = after
        self._since: float | None = None
        self._warned = False

    def update(self, nodes: Mapping[str, NodeMetrics], now: float) -> str | None:
        gpus = [g.util_pct for n in nodes.values() for g in n.gpus]
        utils = [util for util in gpus if util is not None]
        if not utils or max(utils) >= self.threshold:
            self._since, self._warned = None, False
            return None
        self._since = now if self._since is None else self._since
        if self._warned or now - self._since < self.after:
            return None
        self._warned = True
        unknown = len(gpus) - len(utils)
        return f"all {len(utils)} GPUs below {self.threshold:g}% for {now - self._since:.0f} s" + (
            f" ({unknown} more report no utilisation)" if unknown else ""
        )


def append_timeline(timeline: Path, lock: Path, phase: str, node: str, detail: str) -> None:
    """One timeline.jsonl line, under the same flock as the bash writers; written unlocked where flock
    fails (NFSv3 without lockd: ENOLCK; Lustre mounted noflock), as the bash writers do."""
    line = json.dumps({"t": time.time(), "phase": phase, "node": node, "detail": detail}) + "\n"
    with lock.open("a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
        except OSError as error:
            print(f"raysub monitor: timeline written without a lock: {error}", file=sys.stderr)
        with timeline.open("a") as out:
            out.write(line)


def sidecar(argv: list[str] | None = None, endpoints: Callable[[], Mapping[str, str]] | None = None) -> int:
    """The in-job monitor: snapshots into metrics.jsonl until ENDED appears or the head goes away.

    Nodes come from the GCS (--gcs) unless ``endpoints`` is given (tests)."""
    parser = argparse.ArgumentParser(description=sidecar.__doc__)
    parser.add_argument("--gcs", required=True, help="the GCS address, ip:port")
    parser.add_argument("--metrics", type=Path, required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--timeline", type=Path, required=True)
    parser.add_argument("--timeline-lock", type=Path, required=True)
    parser.add_argument("--idle-phase", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--driver-started", type=Path, required=True)
    parser.add_argument("--ended", type=Path, required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--idle-threshold", type=float, required=True)
    parser.add_argument("--idle-after", type=float, required=True)
    args = parser.parse_args(argv)

    parent = os.getppid()
    monitor = RayGpuMonitor(interval=args.interval, endpoints=endpoints or gcs_endpoints(args.gcs))
    metrics = MetricsFile(args.metrics, args.max_bytes)
    idle = IdleWatch(args.idle_threshold, args.idle_after)
    while os.getppid() == parent and not args.ended.exists():
        started = time.monotonic()
        nodes = monitor.collect_once()
        metrics.append(snapshot_line(nodes, monitor.endpoints, monitor.failed))
        if args.driver_started.exists() and (warning := idle.update(nodes, time.monotonic())):
            append_timeline(args.timeline, args.timeline_lock, args.idle_phase, args.node, warning)
        time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    monitor.stop()
    return 0


if __name__ == "__main__":
    sys.exit(sidecar())
