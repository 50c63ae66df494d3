"""A job's metrics.jsonl (the monitor sidecar's, raysub/monitor.py): read back, and shown as a table."""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from raysub.monitor import NodeMetrics


@dataclass(frozen=True)
class Snapshot:
    """One line of metrics.jsonl: when, every node's reading and endpoint, and the nodes that failed."""

    t: float
    nodes: dict[str, NodeMetrics]
    urls: dict[str, str]
    failed: list[str]


def read_snapshots(path: Path) -> list[Snapshot]:
    """Every whole snapshot in ``path``, oldest first (a line still being written is left out)."""
    snapshots = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        nodes = record.get("nodes", {})
        snapshots.append(
            Snapshot(
                t=float(record["t"]),
                nodes={name: NodeMetrics.from_dict(data) for name, data in nodes.items()},
                urls={name: data["url"] for name, data in nodes.items() if data.get("url")},
                failed=list(record.get("failed", [])),
            )
        )
    return snapshots


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
