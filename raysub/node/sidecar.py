"""The monitor sidecar every job with --monitor runs on its head: a snapshot of every node's GPU, CPU and
memory into metrics.jsonl each --monitor-interval, and one timeline warning when the GPUs idle while the
driver runs. It runs as a thread of the head's unit counter (raysub/node/units.py) once every unit has
joined, and ends with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from raysub import protocol
from raysub.protocol.metrics_log import MetricsFile, snapshot_line
from raysub.protocol.ray_metrics import RayGpuMonitor
from raysub.protocol.readings import NodeMetrics


class IdleAlarm:
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


def sample(
    logs: protocol.LogDir,
    node: str,
    monitor: RayGpuMonitor,
    idle: IdleAlarm,
    going: Callable[[], bool],
) -> None:
    """Snapshots into metrics.jsonl every ``monitor.interval`` seconds while ``going()`` says so."""
    driver_started = logs.file(protocol.DRIVER_STARTED)
    metrics = MetricsFile(logs.metrics, protocol.MONITOR_MAX_BYTES)
    try:
        while going():
            started = time.monotonic()
            nodes = monitor.collect_once()
            metrics.append(snapshot_line(nodes, monitor.endpoints, monitor.failed))
            if driver_started.exists() and (warning := idle.update(nodes, time.monotonic())):
                logs.append_timeline(protocol.PHASE_GPU_IDLE, node, warning)
            time.sleep(max(0.0, monitor.interval - (time.monotonic() - started)))
    finally:
        monitor.stop()


def start(
    logs: protocol.LogDir,
    node: str,
    interval: float,
    idle: IdleAlarm,
    endpoints: Callable[[], Mapping[str, str]],
    going: Callable[[], bool],
) -> threading.Thread:
    """The sidecar in a thread of this process (the unit counter's: one Python with Ray's GCS client
    loaded on the head, not two)."""
    monitor = RayGpuMonitor(interval=interval, endpoints=endpoints)
    thread = threading.Thread(
        target=sample, args=(logs, node, monitor, idle, going), name="monitor", daemon=True
    )
    thread.start()
    return thread
