"""metrics.jsonl, the monitor sidecar's record: one snapshot of every node's readings per line.

Each line is ``{"t": <epoch seconds>, "nodes": {<node>: {<NodeMetrics fields>, "url": ...}}, "failed":
[<node>, ...]}``. The writer (MetricsFile, snapshot_line) and the reader (read_snapshots) are side by side.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from raysub import protocol
from raysub.protocol.readings import NodeMetrics


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
        mode = protocol.log_file_mode(self.path.parent)
        with protocol.create(self.path, mode) as out:
            out.write(line)
        if self.path.stat().st_size > self.max_bytes:
            lines = self.path.read_text(errors="replace").splitlines(keepends=True)
            protocol.write_atomic(self.path, "".join(lines[::2]), mode)
            self.keep_every *= 2


def metrics_file(log_dir: Path) -> MetricsFile:
    """LOG_DIR's metrics.jsonl, for its writer (the monitor sidecar)."""
    return MetricsFile(log_dir / protocol.METRICS, protocol.MONITOR_MAX_BYTES)


@dataclass(frozen=True)
class Snapshot:
    """One line of metrics.jsonl: when, every node's reading and endpoint, and the nodes that failed."""

    t: float
    nodes: dict[str, NodeMetrics]
    urls: dict[str, str]
    failed: list[str]


def read_snapshots(path: Path) -> list[Snapshot]:
    """Every whole snapshot in ``path``, oldest first: a line still being written, or one that is no
    snapshot (damaged bytes, another writer's), is left out."""
    snapshots = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
            nodes = record.get("nodes", {})
            failed = list(record.get("failed", []))
            snapshot = Snapshot(
                t=float(record["t"]),
                nodes={name: NodeMetrics.from_dict(data) for name, data in nodes.items()},
                urls={name: data["url"] for name, data in nodes.items() if data.get("url")},
                failed=failed,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if not all(isinstance(name, str) for name in failed):  # node names, as the writer writes them
            continue
        snapshots.append(snapshot)
    return snapshots
