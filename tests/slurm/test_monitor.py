"""The monitor on the minicluster: RayGpuMonitor keys every node by name, skips a node that dies and
finds one that joins late; the job's sidecar writes metrics.jsonl, and raysub report turns it into a
page that Chromium draws without touching the network."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raysub.protocol.logdir import LogDir
from raysub.report import PALETTE
from tests.support.chromium import pixels_of, render_page
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, submit

pytestmark = pytest.mark.slurm

DRIVER = Path(__file__).parent / "jobs" / "monitor_driver.py"
JOB_NODES = ["node1", "node2", "node3"]
LATE = "node4"
LATE_IP = "198.18.0.14"


class Cycles:
    """The driver's output, one monitor cycle per line, read forward."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = 0

    def wait(self, ok: Callable[[dict[str, Any]], bool], timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.path.read_text().splitlines() if self.path.exists() else []
            for line in lines[self.seen :]:
                self.seen += 1
                record: dict[str, Any] = json.loads(line)
                if ok(record):
                    return record
            time.sleep(0.3)
        raise AssertionError(f"no such monitor cycle within {timeout} s; last lines: {lines[-3:]}")


def measured(record: dict[str, Any], names: list[str]) -> bool:
    """Every one of ``names`` has CPU and RAM in this cycle."""
    nodes = record["nodes"]
    return all(name in nodes and nodes[name]["cpu"] is not None and nodes[name]["ram"] for name in names)


def join_late(cluster: MiniCluster, logs: LogDir, tmp: Path) -> subprocess.Popen[bytes]:
    """A Ray node started by hand on a node outside the job, joining the job's cluster with its token."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(logs.auth_token),
    }
    command = [
        "ray", "start", "--block", f"--address={logs.started_ray_head.read_text().strip()}",
        f"--node-ip-address={LATE_IP}", f"--node-name={LATE}", f"--temp-dir=/tmp/rslate{os.getpid()}",
        "--num-cpus=1", "--num-gpus=0", "--metrics-export-port=8080", "--disable-usage-stats",
    ]  # fmt: skip
    return subprocess.Popen(
        [*cluster.enter_node_netns(LATE), *command],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def kill_node(cluster: MiniCluster, late: subprocess.Popen[bytes]) -> None:
    """SIGKILL to everything of the late node: its session, then whatever else runs in its namespace."""
    os.killpg(late.pid, signal.SIGKILL)
    late.wait()
    slurmd = cluster.slurmd_pid(LATE)
    for pid in cluster.processes(LATE):
        if pid != slurmd:
            os.kill(pid, signal.SIGKILL)


def test_monitor_follows_nodes_and_the_report_draws_them(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    out, release = slurm_tmp / "cycles.jsonl", slurm_tmp / "release"
    args = ["--nodes", "3", "--gpus-per-node", "0", "--monitor-interval", "1",
            "--", "python", str(DRIVER), str(out), str(release)]  # fmt: skip
    job_id, logs = submit(minicluster, slurm_tmp, args)
    cycles = Cycles(out)
    try:
        first = cycles.wait(lambda r: measured(r, JOB_NODES))
        assert sorted(first["nodes"]) == JOB_NODES  # keyed by node name
        assert {first["nodes"][n]["ip"] for n in JOB_NODES} == {"198.18.0.11", "198.18.0.12", "198.18.0.13"}

        late = join_late(minicluster, logs, slurm_tmp)
        try:
            cycles.wait(lambda r: measured(r, [*JOB_NODES, LATE]))
        finally:
            kill_node(minicluster, late)
        # The dead node fails its scrape; the cycle goes on for the others.
        cycles.wait(lambda r: LATE in r["failed"] and measured(r, JOB_NODES))
        cycles.wait(lambda r: measured(r, JOB_NODES))
    finally:
        release.touch()
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert_clean(minicluster, job_id)

    # The job's own monitor wrote metrics.jsonl all along; the report draws a line per node.
    snapshots = [json.loads(line) for line in logs.metrics.read_text().splitlines()]
    assert len(snapshots) >= 3
    assert all(sorted(s["nodes"])[:3] == JOB_NODES for s in snapshots[1:])
    page = slurm_tmp / "report.html"
    minicluster.run("raysub", "report", str(job_id), "--log-dir", str(slurm_tmp), "-o", str(page))
    image, requested = render_page(page, slurm_tmp)
    assert requested == set()
    for color in PALETTE[:3]:
        assert pixels_of(image, color) > 200, color
