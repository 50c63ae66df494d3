"""smoke.json, the smoke test's result (raysub/job/programs/smoke.py runs the test): one JSON object saying
whether every check passed, what was asked of Ray, where each actor ran, what was wrong and how the all-reduce
went. Written atomically once the test ends; the writer and the reader are side by side with the types they
hold.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from raysub import protocol
from raysub.protocol import Node, one_line


@dataclass(frozen=True)
class Placement:
    """Where the actor of bundle ``bundle`` runs and which GPUs it sees."""

    bundle: int
    node_id: str
    node: str  # the Ray node's name
    hostname: str
    ip: str
    gpu_ids: tuple[str, ...]
    cuda_visible_devices: str | None


@dataclass(frozen=True)
class AllReduce:
    """The all-reduce's outcome. status: "off" (not asked), "ok", "skipped" (no torch) or "failed".
    ``seconds`` is one all-reduce of ``bytes`` on the slowest rank; the bandwidths are in GB/s (1e9),
    the bus bandwidth as nccl-tests counts it (what each rank sends and receives)."""

    status: str = "off"
    reason: str = ""
    backend: str | None = None
    world_size: int = 0
    bytes: int = 0
    seconds: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"


@dataclass(frozen=True)
class SmokeResult:
    """smoke.json: the outcome, what was asked of Ray, where each actor ran, what was wrong."""

    ok: bool
    strategy: str | None
    bundles: int
    bundle_resources: dict[str, float]
    nodes: list[Node]
    actors: list[Placement]
    problems: list[str]
    allreduce: AllReduce = field(default_factory=AllReduce)
    t: float = field(default_factory=time.time)
    # Each node's topology labels (raysub/switch, raysub/block, raysub/nvlink-domain), by node name; a
    # placement group selecting each value was checked to land on exactly its nodes (problems if not).
    topology: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        """Why the smoke test failed, on one line ("" when it passed)."""
        reasons = [*self.problems, *([self.allreduce.reason] if self.allreduce.failed else [])]
        if not reasons:
            return ""
        more = f" (and {len(reasons) - 1} more problems)" if len(reasons) > 1 else ""
        return one_line(reasons[0]) + more


def result_path(log_dir: str | os.PathLike[str] | None) -> Path | None:
    """LOG_DIR/smoke.json, for ``log_dir`` or else the job's LOG_DIR (set for the driver); None outside
    a job, where nothing is written."""
    directory = log_dir if log_dir is not None else os.environ.get(protocol.ENV_LOG_DIR)
    return Path(directory) / protocol.SMOKE if directory else None


def result_json(result: SmokeResult) -> str:
    return json.dumps(asdict(result), indent=1) + "\n"


def write_result(path: Path, result: SmokeResult) -> None:
    """``result`` into ``path`` atomically (a reader never sees half of it)."""
    protocol.write_atomic(path, result_json(result))


def read_result(path: Path) -> SmokeResult | None:
    """smoke.json as written by write_result; None when it is missing or not such a result."""
    try:
        record = json.loads(path.read_text())
        return SmokeResult(
            ok=bool(record["ok"]),
            strategy=record["strategy"],
            bundles=int(record["bundles"]),
            bundle_resources=dict(record["bundle_resources"]),
            nodes=[Node(**node) for node in record["nodes"]],
            actors=[Placement(**{**a, "gpu_ids": tuple(a["gpu_ids"])}) for a in record["actors"]],
            problems=[str(problem) for problem in record["problems"]],
            allreduce=AllReduce(**record["allreduce"]),
            t=float(record["t"]),
            topology={str(n): dict(labels) for n, labels in dict(record.get("topology") or {}).items()},
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
