"""How busy a job's GPUs were, from the monitor's snapshots (metrics.jsonl): each node's average and least
busy GPU over a span of time, and the nodes whose GPUs all sat idle and since when.

A GPU whose utilisation is unknown (no reading) is left out: it is neither busy nor idle.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from raysub.protocol.metrics_log import Snapshot


@dataclass(frozen=True)
class GpuUse:
    """Utilisation in percent over a span: ``average`` of every reading, ``minimum`` the average of the
    least busy GPU (the one holding the others back, or left out of the work)."""

    average: float
    minimum: float
    gpus: int


def _readings(snapshots: Sequence[Snapshot], node: str) -> dict[str, list[float]]:
    """Each GPU's readings on ``node`` (GPU index → utilisations), unknown ones left out."""
    readings: dict[str, list[float]] = {}
    for snapshot in snapshots:
        for gpu in snapshot.nodes[node].gpus if node in snapshot.nodes else ():
            if gpu.util_pct is not None:
                readings.setdefault(gpu.index, []).append(gpu.util_pct)
    return readings


def _use(readings: dict[str, list[float]]) -> GpuUse | None:
    if not readings:
        return None
    every = [value for values in readings.values() for value in values]
    least = min(statistics.fmean(values) for values in readings.values())
    return GpuUse(round(statistics.fmean(every), 1), round(least, 1), len(readings))


def nodes_of(snapshots: Sequence[Snapshot]) -> list[str]:
    return sorted({node for snapshot in snapshots for node in snapshot.nodes})


def use_by_node(snapshots: Sequence[Snapshot]) -> dict[str, GpuUse | None]:
    """Each node's GPU use over ``snapshots`` (None: no GPU of it has a reading)."""
    return {node: _use(_readings(snapshots, node)) for node in nodes_of(snapshots)}


def overall(snapshots: Sequence[Snapshot]) -> GpuUse | None:
    """The job's GPU use over ``snapshots``: every GPU of every node together."""
    readings = {
        f"{node}/{index}": values
        for node in nodes_of(snapshots)
        for index, values in _readings(snapshots, node).items()
    }
    return _use(readings)


def idle_since(snapshots: Sequence[Snapshot], node: str, threshold: float) -> float | None:
    """Since when every GPU of ``node`` with a reading has stayed below ``threshold`` %: the time of the
    first snapshot after its last busy one (the first snapshot when it was never busy); None when it is
    busy now or none of its GPUs has a reading in the latest snapshot that shows the node."""
    since: float | None = None
    for snapshot in snapshots:
        metrics = snapshot.nodes.get(node)
        utils = [g.util_pct for g in metrics.gpus if g.util_pct is not None] if metrics else []
        if not utils:
            continue
        if max(utils) >= threshold:
            since = None
        elif since is None:
            since = snapshot.t
    return since
