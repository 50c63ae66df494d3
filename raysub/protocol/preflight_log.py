"""preflight.jsonl, the GPU preflight gate's record (raysub/job/programs/preflight.py runs the gate): one line
per check of a node's GPUs, appended in one write under an flock on the file itself, so lines from different
nodes stay whole:

    {"t": <epoch s>, "node": <--node>, "check": <1, 2, ...>, "final": <the node's last check>,
     "gpus": [{"index", "uuid", "name", "util_pct", "mem_used_mib", "mem_total_mib", "temperature_c",
               "power_w", "power_limit_w", "score", "processes": [{"pid", "name", "used_mib"}]}],
     "findings": [{"severity": "info|warn|error", "gpu": <index or null>, "reason"}],
     "verdict": "ok|warn|fail"}

A reading nvidia-smi does not give is null, never 0. A GPU's score, from 0 (busy) to 1 (free), is
0.6 * its free memory's fraction + 0.4 * its idle fraction (100 % - utilisation); a part it does not
report counts as not free. The writer (append_check) and the reader (read_checks) are side by side, with
the gate's contract with the node scripts: its exit status when it fails the job, and its default.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from raysub import protocol

# The gate's exit status when --mode fail and an error remained (the node scripts end the job with it).
GATE_FAILED = 3
# The least free memory (MiB) a GPU must have (render's --min-free-gpu-mem and the gate's default). An idle
# GPU shows well under a GiB in use (the driver's reservations), so this never fails a free GPU of any size;
# below it, a GPU cannot even hold a CUDA context and NCCL's buffers. A GPU partly used by a process is
# caught by the process check instead, whatever its memory; raise this to what the job's model needs to
# catch use nvidia-smi cannot attribute.
DEFAULT_MIN_FREE_MIB = 1024
FREE_WEIGHT, IDLE_WEIGHT = 0.6, 0.4

Severity = str  # "info", "warn" or "error"


@dataclass(frozen=True)
class Process:
    """A compute process on a GPU, as nvidia-smi lists it (None: not reported)."""

    pid: int | None
    name: str | None
    used_mib: float | None
    gpu_uuid: str | None = None  # joins it to its GPU; not recorded

    def record(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "used_mib": self.used_mib}

    def label(self) -> str:
        """``pid 4242 (python3, 30000 MiB)``: the pid, the program's base name and the memory it holds."""
        parts = [self.name.rsplit("/", 1)[-1]] if self.name else []
        parts += [f"{self.used_mib:.0f} MiB"] if self.used_mib is not None else []
        who = "an unknown pid" if self.pid is None else f"pid {self.pid}"
        return f"{who} ({', '.join(parts)})" if parts else who


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it (None: not reported), with the processes on it."""

    index: int
    uuid: str | None
    name: str | None
    util_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    processes: tuple[Process, ...] = ()

    @property
    def free_mib(self) -> float | None:
        if self.mem_used_mib is None or self.mem_total_mib is None:
            return None
        return max(self.mem_total_mib - self.mem_used_mib, 0.0)

    @property
    def score(self) -> float:
        """0 (busy) to 1 (free): 0.6 * the free fraction of memory + 0.4 * the idle fraction; a part that
        is not reported counts as not free."""
        free = self.free_mib
        free_part = free / self.mem_total_mib if free is not None and self.mem_total_mib else 0.0
        idle_part = (100.0 - self.util_pct) / 100.0 if self.util_pct is not None else 0.0
        return round(FREE_WEIGHT * _fraction(free_part) + IDLE_WEIGHT * _fraction(idle_part), 3)

    def record(self) -> dict[str, Any]:
        record = {key: value for key, value in asdict(self).items() if key != "processes"}
        return {**record, "score": self.score, "processes": [p.record() for p in self.processes]}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Gpu:
        readings = {key: _optional(record.get(key), float) for key in READINGS}
        processes = tuple(
            Process(
                _optional(p.get("pid"), int),
                _optional(p.get("name"), str),
                _optional(p.get("used_mib"), float),
            )
            for p in record.get("processes", [])
        )
        name = _optional(record.get("name"), str)
        return cls(
            int(record["index"]), _optional(record.get("uuid"), str), name, **readings, processes=processes
        )


READINGS = ("util_pct", "mem_used_mib", "mem_total_mib", "temperature_c", "power_w", "power_limit_w")


def _fraction(part: float) -> float:
    return min(max(part, 0.0), 1.0)


def _optional(value: Any, kind: Callable[[Any], Any]) -> Any:
    return None if value is None else kind(value)


@dataclass(frozen=True)
class Finding:
    severity: Severity  # "info", "warn" or "error"
    gpu: int | None  # the GPU's index, None for the node
    reason: str


@dataclass(frozen=True)
class Check:
    """One line of preflight.jsonl: one check of one node's GPUs."""

    t: float  # epoch seconds
    node: str
    check: int  # 1 for the node's first check, 2 for the next (--wait-gpus), ...
    final: bool  # the node's last check: no other line for it follows
    gpus: tuple[Gpu, ...]
    findings: tuple[Finding, ...]
    verdict: str  # "ok", "warn" or "fail"

    def line(self) -> str:
        record = {
            "t": self.t,
            "node": self.node,
            "check": self.check,
            "final": self.final,
            "gpus": [gpu.record() for gpu in self.gpus],
            "findings": [asdict(finding) for finding in self.findings],
            "verdict": self.verdict,
        }
        return json.dumps(record, separators=(",", ":")) + "\n"

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Check:
        findings = tuple(
            Finding(str(f["severity"]), _optional(f.get("gpu"), int), str(f["reason"]))
            for f in record["findings"]
        )
        gpus = tuple(Gpu.from_record(gpu) for gpu in record["gpus"])
        t, check = float(record["t"]), int(record["check"])
        return cls(
            t, str(record["node"]), check, bool(record["final"]), gpus, findings, str(record["verdict"])
        )


def log_path(log_dir: Path) -> Path:
    """LOG_DIR's preflight.jsonl."""
    return log_dir / protocol.PREFLIGHT


def append_check(path: Path, check: Check) -> None:
    """Appends ``check``'s line in one write, holding an flock on the file (NFS clients emulate O_APPEND,
    so the lock keeps nodes that append at once from overwriting each other); written unlocked where
    flock fails or is not had within protocol.LOCK_WAIT_S, as the timeline's writers do."""
    with protocol.create(path, protocol.log_file_mode(path.parent)) as out:
        protocol.lock_within(out.fileno(), path)
        out.write(check.line())


def read_checks(path: Path) -> list[Check]:
    """Every whole check in ``path``, in file order ([] when there is none); a line still being written,
    or one that is not a check, is left out."""
    try:
        lines = path.read_text(errors="replace").split("\n")[:-1]
    except FileNotFoundError:
        return []
    checks = []
    for line in lines:
        try:
            checks.append(Check.from_record(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return checks
