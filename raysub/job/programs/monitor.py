"""The head's unit counter with the monitor sidecar, for every job with --monitor (the default): the counter
(raysub/job/lib/counter.py) and, once every unit has joined, a thread that writes a snapshot of every node's
GPU, CPU and memory into metrics.jsonl each --monitor-interval, and one timeline warning when the GPUs idle
while the driver runs. Run by the head script as ``python -m raysub.job.programs.monitor`` while its Ray
starts, with the counter's arguments and the sidecar's; it ends with the counter.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from raysub import protocol
from raysub.job.lib import counter
from raysub.job.lib.scrape import Scraper, gcs_endpoints
from raysub.job.lib.waits import Background
from raysub.protocol.metrics_log import metrics_file, snapshot_line
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
    log_dir: Path,
    node: str,
    monitor: Scraper,
    idle: IdleAlarm,
    going: Callable[[], bool],
) -> None:
    """Snapshots into metrics.jsonl every ``monitor.interval`` seconds while ``going()`` says so."""
    driver_started = log_dir / protocol.DRIVER_STARTED
    metrics = metrics_file(log_dir)
    try:
        while going():
            started = time.monotonic()
            nodes = monitor.collect_once()
            metrics.append(snapshot_line(nodes, monitor.endpoints, monitor.failed))
            if driver_started.exists() and (warning := idle.update(nodes, time.monotonic())):
                protocol.append_timeline(log_dir, protocol.PHASE_GPU_IDLE, node, warning)
            time.sleep(max(0.0, monitor.interval - (time.monotonic() - started)))
    finally:
        monitor.stop()


def start(
    log_dir: Path,
    node: str,
    interval: float,
    idle: IdleAlarm,
    endpoints: Callable[[], Mapping[str, str]],
    going: Callable[[], bool],
) -> threading.Thread:
    """The sidecar in a thread of this process (the unit counter's: one Python with Ray's GCS client
    loaded on the head, not two)."""
    monitor = Scraper(endpoints, interval)
    thread = threading.Thread(
        target=sample, args=(log_dir, node, monitor, idle, going), name="monitor", daemon=True
    )
    thread.start()
    return thread


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = counter.parser("python -m raysub.job.programs.monitor", __doc__)
    parser.add_argument("--monitor-interval", type=float, required=True, help="seconds between snapshots")
    parser.add_argument(
        "--idle-threshold", type=float, required=True, help="GPU utilisation %% below which it idles"
    )
    parser.add_argument(
        "--idle-after", type=float, required=True, help="seconds of idling before the warning"
    )
    return parser.parse_args(argv)


def sidecar(args: argparse.Namespace) -> counter.OnWhole:
    """What the counter calls once every unit has joined: the sidecar's start."""

    def on_whole(address: str, going: Callable[[], bool]) -> None:
        idle = IdleAlarm(args.idle_threshold, args.idle_after)
        start(args.log_dir, args.node, args.monitor_interval, idle, gcs_endpoints(address), going)

    return on_whole


if __name__ == "__main__":
    arguments = parse(None)
    sys.exit(counter.run(arguments, Background(), sidecar(arguments)))
