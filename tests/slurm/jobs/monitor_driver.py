"""A driver for tests/slurm/test_monitor.py: RayGpuMonitor's collector thread inside a raysub job.

Usage: monitor_driver.py OUT RELEASE. Appends one JSON line to OUT every half second: each node's
reading ({"ip", "cpu", "ram"}, keyed by node name) and the nodes that failed, until RELEASE exists.
"""

import json
import sys
import time
from pathlib import Path

import ray

from raysub.monitor import RayGpuMonitor

out, release = Path(sys.argv[1]), Path(sys.argv[2])
ray.init()
deadline = time.time() + 240
with RayGpuMonitor(interval=0.5, timeout=2.0, rediscover=0) as monitor:
    while not release.exists() and time.time() < deadline:
        time.sleep(0.5)
        nodes = {
            name: {"ip": n.ip, "cpu": n.cpu_util_pct, "ram": n.ram_used_gib}
            for name, n in monitor.latest.items()
        }
        with out.open("a") as lines:
            lines.write(json.dumps({"nodes": nodes, "failed": monitor.failed}) + "\n")
