"""A job's readings for raysub monitor and report: from its metrics.jsonl or, live, from its nodes; and
shown as a table. A trainer's own monitor is here too: RayGpuMonitor and tokens_per_second_per_gpu
(docs/monitor.md).
"""

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from raysub.gpu_monitor import RayGpuMonitor, tokens_per_second_per_gpu
from raysub.jobs import Job
from raysub.protocol.metrics_log import Snapshot, read_snapshots
from raysub.protocol.preflight_log import read_checks
from raysub.protocol.readings import NodeMetrics
from raysub.status import JobPoll

__all__ = [
    "NoReadings",
    "RayGpuMonitor",
    "Reading",
    "follow_readings",
    "latest",
    "power_caps",
    "snapshots",
    "table",
    "tokens_per_second_per_gpu",
]


class NoReadings(Exception):
    """The job has no metrics.jsonl, or nothing in it yet."""


@dataclass(frozen=True)
class Reading:
    """Every node's reading at one time, and the nodes that did not answer."""

    when: float  # epoch seconds
    nodes: dict[str, NodeMetrics]
    failed: list[str]


def snapshots(job: Job) -> list[Snapshot]:
    """Everything the job's monitor recorded."""
    if not job.logs.metrics.exists():
        raise NoReadings(
            f"job {job.job_id} has no {job.logs.metrics} (yet): was it rendered with --no-monitor?"
        )
    return read_snapshots(job.logs.metrics)


def power_caps(job: Job) -> dict[tuple[str, str], float]:
    """Each GPU's power cap in W, by (node, GPU index), as the GPU preflight check's nvidia-smi saw it."""
    caps = {}
    for check in read_checks(job.logs.preflight):
        for gpu in check.gpus:
            if gpu.power_limit_w is not None:
                caps[check.node, str(gpu.index)] = gpu.power_limit_w
    return caps


def latest(job: Job, live: bool) -> Reading:
    """The job's last snapshot or (``live``) a scrape now of the endpoints that snapshot names."""
    recorded = snapshots(job)
    if not recorded:
        raise NoReadings(f"{job.logs.metrics} has no snapshot yet")
    last = recorded[-1]
    if not live:
        return Reading(last.t, last.nodes, last.failed)
    scraper = RayGpuMonitor(endpoints=last.urls.copy)
    try:
        return Reading(time.time(), scraper.collect_once(), scraper.failed)
    finally:
        scraper.stop()


def follow_readings(job: Job, live: bool, interval: float, once: bool = False) -> Iterator[Reading]:
    """The latest reading now and every ``interval`` seconds until the job is over; only one if ``once``."""
    poll = JobPoll(job)
    while True:
        yield latest(job, live)
        if once or poll.over():
            return
        time.sleep(interval)


def _number(value: float | None, digits: int = 1) -> str:
    return "?" if value is None else f"{value:.{digits}f}"


def _pair(used: float | None, total: float | None) -> str:
    return f"{_number(used)}/{_number(total)}"


def table(nodes: Mapping[str, NodeMetrics], failed: list[str] | None = None) -> str:
    """One row per node and one per GPU under it; '?' is a reading Ray did not give."""
    rows = [("NODE", "GPU", "NAME", "UTIL %", "MEM GiB", "CPU %", "RAM GiB")]
    for name, node in sorted(nodes.items()):
        rows.append(
            (
                name,
                "",
                node.ip or "",
                "",
                "",
                _number(node.cpu_util_pct),
                _pair(node.ram_used_gib, node.ram_total_gib),
            )
        )
        for gpu in node.gpus:
            memory = _pair(gpu.mem_used_gib, gpu.mem_total_gib)
            rows.append(("", gpu.index, gpu.name or "", _number(gpu.util_pct), memory, "", ""))
    for name in sorted(failed or []):
        rows.append((name, "", "(no answer)", "", "", "", ""))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)
