"""GPU, CPU and memory of every Ray node, for trainers: ``RayGpuMonitor`` inside a Ray driver, ``flush()``
into wandb or tensorboard (docs/monitor.md), on the job's own scraper (raysub/job/lib/scrape.py).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from raysub.job.lib import gcs
from raysub.job.lib.scrape import Scraper
from raysub.protocol.readings import NodeMetrics


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
        node.get("NodeName") or node["NodeManagerAddress"]: gcs.metrics_url(
            node["NodeManagerAddress"], node["MetricsExportPort"]
        )
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node.get("Alive") and node.get("MetricsExportPort")
    }


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
            for quantity in ("util_pct", "mem_used_gib", "temperature_c", "power_w"):
                value = getattr(gpu, quantity)
                if value is not None:
                    yield f"{name}/gpu{gpu.index}", quantity, value


class RayGpuMonitor(Scraper):
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
        super().__init__(endpoints or ray_endpoints, interval, timeout, rediscover)
        self._stats: dict[tuple[str, str], _Stat] = {}
        self._flush_failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def collected(self, nodes: Mapping[str, NodeMetrics], failed: list[str]) -> None:
        self._flush_failures += len(failed)
        _record(self._stats, nodes)

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
        super().stop()

    def __enter__(self) -> RayGpuMonitor:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
