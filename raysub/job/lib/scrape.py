"""Scraping every Ray node's metrics endpoint (Prometheus text) concurrently, each with a timeout: the job's
monitor sidecar (raysub/job/programs/monitor.py) takes a snapshot with it each --monitor-interval, and
raysub.gpu_monitor.RayGpuMonitor, for trainers, builds on it.
"""

from __future__ import annotations

import math
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from raysub.job.lib import gcs
from raysub.protocol.readings import NodeMetrics, parse_node_metrics


def gcs_endpoints(address: str) -> Callable[[], dict[str, str]]:
    """Every alive node's metrics URL by node name, read straight from the GCS at ``address`` (no
    driver): what the sidecar uses."""
    client = gcs.connect(address)
    return lambda: gcs.endpoints(client)


class Scraper:
    """Scrapes every Ray node's metrics endpoint, found through ``endpoints`` at the first collection and
    every ``rediscover`` seconds, so that nodes that join later appear; nodes are keyed by name or IP,
    never by position, and scraped concurrently, each with ``timeout``. A node that fails or serves
    malformed text is skipped that cycle and counted in ``failures``."""

    def __init__(
        self,
        endpoints: Callable[[], Mapping[str, str]],
        interval: float = 5.0,
        timeout: float = 3.0,
        rediscover: float = 30.0,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.rediscover = rediscover
        self.failures = 0
        self.latest: dict[str, NodeMetrics] = {}
        self.failed: list[str] = []
        self._endpoints_source = endpoints
        self._endpoints: dict[str, str] = {}
        self._discovered_at = -math.inf
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="raysub-monitor-scrape")

    @property
    def endpoints(self) -> dict[str, str]:
        return dict(self._endpoints)

    def _scrape(self, url: str) -> NodeMetrics:
        with urllib.request.urlopen(url, timeout=self.timeout) as response:  # noqa: S310 (http:// built by gcs.metrics_url)
            return parse_node_metrics(response.read().decode("utf-8", errors="replace"))

    def collected(self, nodes: Mapping[str, NodeMetrics], failed: list[str]) -> None:
        """Called with each cycle's readings, under the lock; a subclass keeps what it needs of them."""

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
            self.collected(nodes, failed)
        return nodes

    def stop(self) -> None:
        """A scrape in flight finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
