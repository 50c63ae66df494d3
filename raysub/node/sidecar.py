"""The monitor sidecar every job with --monitor runs on its head: a snapshot of every node's GPU, CPU and
memory into metrics.jsonl each --interval, and one timeline warning when the GPUs idle while the driver
runs. Run by the head script as ``python -m raysub.node.sidecar``; it ends when ENDED appears or the head
script goes away.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from raysub import protocol
from raysub.monitor import RayGpuMonitor, gcs_endpoints
from raysub.node.metrics_log import MetricsFile, snapshot_line
from raysub.node.readings import NodeMetrics


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


def main(argv: Sequence[str] | None = None, endpoints: Callable[[], Mapping[str, str]] | None = None) -> int:
    """Snapshots into metrics.jsonl until ENDED appears or the head script goes away. Nodes come from
    the GCS (--gcs) unless ``endpoints`` is given (tests)."""
    parser = argparse.ArgumentParser(prog="python -m raysub.node.sidecar", description=__doc__)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--gcs", required=True, help="the GCS address, ip:port")
    parser.add_argument("--node", required=True, help="this node's name, for the timeline")
    parser.add_argument("--interval", type=float, required=True, help="seconds between snapshots")
    parser.add_argument(
        "--idle-threshold", type=float, required=True, help="GPU utilisation %% below which it idles"
    )
    parser.add_argument(
        "--idle-after", type=float, required=True, help="seconds of idling before the warning"
    )
    args = parser.parse_args(argv)

    logs = protocol.LogDir(args.log_dir)
    driver_started = logs.file(protocol.DRIVER_STARTED)
    parent = os.getppid()
    monitor = RayGpuMonitor(interval=args.interval, endpoints=endpoints or gcs_endpoints(args.gcs))
    metrics = MetricsFile(logs.metrics, protocol.MONITOR_MAX_BYTES)
    idle = IdleWatch(args.idle_threshold, args.idle_after)
    while os.getppid() == parent and not logs.ended.exists():
        started = time.monotonic()
        nodes = monitor.collect_once()
        metrics.append(snapshot_line(nodes, monitor.endpoints, monitor.failed))
        if driver_started.exists() and (warning := idle.update(nodes, time.monotonic())):
            logs.append_timeline(protocol.PHASE_GPU_IDLE, args.node, warning)
        time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    monitor.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
