"""LOG_DIR/topology/: where each node sits and what Ray was told of it, written by the node's topology program
(raysub/job/programs/topology.py) before its first 'ray start', one set of files per node:

    <node>.json              {"node", "rank", "switch", "block", "nvlink_domain", "nvlink_clique",
                              "fabric": "<state>/<status>" or null, "resources": {...}, "labels": {...}}
    <node>.labels            the node's Ray labels, a YAML mapping (JSON), for 'ray start --labels-file'
    <node>.gpu_cpu_affinity  "<gpu>:<cpulist>" per GPU, NeMo-RL's NRL_GPU_CPU_AFFINITY_FILE (none when
                             nvidia-smi topo -m said nothing of the GPUs' NUMA nodes)

``nvlink_domain`` is the ClusterUUID the node's GPUs share, or null when they name none (the node is then a
domain of its own); ``switch``/``block`` what Slurm's topology plugin says is right above the node, or null.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from raysub import protocol

LABELS_SUFFIX = ".labels"
AFFINITY_SUFFIX = ".gpu_cpu_affinity"


@dataclass(frozen=True)
class NodeTopology:
    node: str
    rank: int | None = None
    switch: str | None = None
    block: str | None = None
    nvlink_domain: str | None = None
    nvlink_clique: str | None = None
    fabric: str | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> NodeTopology:
        def text(key: str) -> str | None:
            return None if record.get(key) is None else str(record[key])

        rank = record.get("rank")
        return cls(
            str(record["node"]),
            rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
            text("switch"),
            text("block"),
            text("nvlink_domain"),
            text("nvlink_clique"),
            text("fabric"),
            {str(k): float(v) for k, v in dict(record.get("resources") or {}).items()},
            {str(k): str(v) for k, v in dict(record.get("labels") or {}).items()},
        )


def directory(log_dir: Path) -> Path:
    return log_dir / protocol.TOPOLOGY_DIR


def write(log_dir: Path, topology: NodeTopology, affinity: str) -> tuple[Path, Path | None]:
    """Writes the node's files (each atomically); returns its labels file and its GPU-to-CPU file (None when
    ``affinity`` is empty)."""
    where = directory(log_dir)
    mode = protocol.log_file_mode(log_dir)
    if not where.is_dir():  # as LOG_DIR itself, whatever the umask or a default ACL would make it
        where.mkdir(exist_ok=True)
        where.chmod(stat.S_IMODE(log_dir.stat().st_mode))
    labels = where / f"{topology.node}{LABELS_SUFFIX}"
    protocol.write_atomic(labels, json.dumps(dict(topology.labels), sort_keys=True) + "\n", mode)
    affinity_file = where / f"{topology.node}{AFFINITY_SUFFIX}" if affinity else None
    if affinity_file:
        protocol.write_atomic(affinity_file, affinity, mode)
    protocol.write_atomic(where / f"{topology.node}.json", json.dumps(asdict(topology)) + "\n", mode)
    return labels, affinity_file


def read_all(log_dir: Path) -> dict[str, NodeTopology]:
    """Every node's record, by node ({} before any node wrote one); an unreadable record is left out."""
    found = {}
    for path in sorted(directory(log_dir).glob("*.json")):
        try:
            topology = NodeTopology.from_record(json.loads(path.read_text(errors="replace")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found[topology.node] = topology
    return found
