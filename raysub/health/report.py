"""One health report of a job: Slurm's state, training progress and stalls, idle GPUs, the NCCL transport of
each node, fatal log lines, Ray's resources and the latest checkpoint, as findings (docs/health.md).

Everything is read from LOG_DIR and one Slurm query; nothing connects to Ray from the login node.
"""

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import IntEnum, StrEnum
from pathlib import Path

from raysub import protocol
from raysub.health.fatal import fatal_lines
from raysub.health.nccl import transport_findings, transports_by_node
from raysub.health.progress import Progress, progress
from raysub.jobs import Job
from raysub.node.checkpoints import latest_checkpoint
from raysub.node.metrics_log import Snapshot, read_snapshots
from raysub.slurm import SlurmState


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Verdict(IntEnum):
    """raysub health's exit status."""

    HEALTHY = 0
    UNHEALTHY = 1
    CANNOT_TELL = 2


# Slurm's many states, as the report names them; anything else is UNKNOWN.
STATES = {
    **{s: s for s in ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED")},
    **{s: s for s in ("NODE_FAIL", "OUT_OF_MEMORY", "REQUEUED")},
    "CONFIGURING": "RUNNING",
    "COMPLETING": "RUNNING",
    "RESIZING": "RUNNING",
    "REQUEUE_HOLD": "REQUEUED",
    "REQUEUE_FED": "REQUEUED",
    "BOOT_FAIL": "NODE_FAIL",
    "DEADLINE": "TIMEOUT",
}
FAILED_STATES = {"FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}


@dataclass(frozen=True)
class Finding:
    severity: Severity
    kind: str  # state, stall, progress, gpu_idle, nccl, fatal, checkpoint
    reason: str  # one line
    node: str | None = None
    line: str | None = None  # the log line that shows it


@dataclass(frozen=True)
class Options:
    step_regex: str | None = None
    stall_after: float = 1800.0
    gpu_idle_threshold: float = 5.0
    gpu_idle_after: float = 600.0
    checkpoint_dir: Path | None = None
    checkpoint_marker: str | None = None


@dataclass
class Report:
    job_id: str
    state: str
    verdict: Verdict
    findings: list[Finding] = field(default_factory=list)
    step: int | None = None
    total_steps: int | None = None
    steps_per_second: float | None = None
    checkpoint: str | None = None
    resources: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.verdict == Verdict.HEALTHY

    def to_json(self) -> str:
        data = asdict(self)
        data["healthy"] = self.healthy
        data["verdict"] = self.verdict.name.lower().replace("_", " ")
        return json.dumps(data, indent=2)

    def describe(self) -> str:
        """A few lines for a person."""
        word = {
            Verdict.HEALTHY: "healthy",
            Verdict.UNHEALTHY: "UNHEALTHY",
            Verdict.CANNOT_TELL: "cannot tell",
        }
        lines = [f"job {self.job_id}: {word[self.verdict]} (Slurm: {self.state})"]
        if self.step is not None:
            total = f"/{self.total_steps}" if self.total_steps else ""
            rate = f", {self.steps_per_second:.3g} steps/s" if self.steps_per_second else ""
            lines.append(f"step {self.step}{total}{rate}")
        for name, use in sorted(self.resources.items()):
            lines.append(f"{name}: {use.get('used', 0):g} of {use.get('total', 0):g} in use")
        if self.checkpoint:
            lines.append(f"latest checkpoint: {self.checkpoint}")
        for finding in self.findings:
            where = f" on {finding.node}" if finding.node else ""
            lines.append(f"{finding.severity}: {finding.reason}{where}")
            if finding.line:
                lines.append(f"    {finding.line}")
        return "\n".join(lines)


def state_name(slurm: SlurmState) -> str:
    return STATES.get(slurm.state or "", "UNKNOWN")


def state_findings(state: str, slurm: SlurmState, logs: protocol.LogDir) -> list[Finding]:
    if state in FAILED_STATES:
        return [Finding(Severity.ERROR, "state", f"Slurm says {state}", line=logs.ended_reason())]
    if state == "COMPLETED" and (logs.driver_exit_code() or slurm.exit_code):
        reason = logs.ended_reason() or f"exit code {slurm.exit_code}"
        return [Finding(Severity.ERROR, "state", f"the job completed with a failure: {reason}")]
    return []


def driver_running(logs: protocol.LogDir) -> bool:
    return (
        logs.file(protocol.DRIVER_STARTED).exists()
        and logs.driver_exit_code() is None
        and not logs.ended.exists()
    )


def driver_text(logs: protocol.LogDir) -> tuple[str, float | None]:
    """The current run's driver log and when it last changed (None before there is one)."""
    path = logs.driver_logs()[-1]
    try:
        return path.read_text(errors="replace"), path.stat().st_mtime
    except FileNotFoundError:
        return "", None


def stall_finding(
    logs: protocol.LogDir, seen: Progress | None, changed: float | None, options: Options, now: float
) -> Finding | None:
    """Stalled: the driver runs, and its step has not moved (or, before any step, its log has not grown)
    for ``stall_after`` seconds. When the step last moved is remembered across reports in LOG_DIR; the
    first report takes the log's last change (so it never calls a stall early)."""
    if not driver_running(logs) or changed is None:
        return None
    step = seen.step if seen else None
    remembered = logs.progress_seen()
    if remembered is None or remembered[0] != step:
        since = changed if remembered is None else now
        logs.write_progress_seen(step, since)
    else:
        since = remembered[1]
    quiet = now - max(since, changed) if step is None else now - since
    if quiet < options.stall_after:
        return None
    what = f"no new step after step {step}" if step is not None else "no output from the driver"
    return Finding(Severity.ERROR, "stall", f"{what} for {quiet:.0f} s", line=seen.line if seen else None)


def idle_finding(
    logs: protocol.LogDir, snapshots: list[Snapshot], options: Options, now: float
) -> Finding | None:
    """Every GPU with a reading below the threshold in every snapshot of the last ``gpu_idle_after`` s,
    while the driver ran all that time (a GPU with no reading is unknown, not idle)."""
    started = next((e.t for e in logs.timeline() if e.phase == protocol.PHASE_DRIVER_START), None)
    window_start = now - options.gpu_idle_after
    if started is None or started > window_start or not driver_running(logs):
        return None
    window = [s for s in snapshots if s.t >= window_start]
    utils = [[g.util_pct for n in s.nodes.values() for g in n.gpus if g.util_pct is not None] for s in window]
    if len(window) < 2 or not all(utils) or max(max(u) for u in utils) >= options.gpu_idle_threshold:
        return None
    gpus = len(utils[-1])
    reason = (
        f"all {gpus} GPUs below {options.gpu_idle_threshold:g}% for the last {options.gpu_idle_after:.0f} s"
    )
    return Finding(Severity.WARNING, "gpu_idle", reason)


# Ray's prefix on lines from its workers: "(RayTrainWorker pid=123, ip=10.0.0.2) ..."
_RAY_PREFIX_IP = re.compile(r"^\((?:[^()]*?)\bip=(?P<ip>[0-9a-fA-F.:]+)\)")


def texts_by_node(logs: protocol.LogDir, ip_names: dict[str, str]) -> dict[str, str]:
    """Every log that may hold NCCL or error lines, by node: the driver's lines by the ip= of Ray's prefix
    (named as in ``ip_names`` when known; the driver's own lines: the head), and each Ray node's own log
    by its Slurm node name."""
    entries = logs.node_map()
    head = next((e.node for e in entries if e.role == protocol.ROLE_HEAD), protocol.ROLE_HEAD)
    parts: dict[str, list[str]] = {}
    for path in logs.driver_logs():
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                match = _RAY_PREFIX_IP.match(line)
                node = ip_names.get(match["ip"], match["ip"]) if match else head
                parts.setdefault(node, []).append(line)
    workers = len([e for e in entries if e.role == protocol.ROLE_WORKER])
    for entry in entries:
        path = logs.log_of(entry, workers)
        if path.exists():
            parts.setdefault(entry.node, []).extend(path.read_text(errors="replace").splitlines())
    return {node: "\n".join(lines) for node, lines in parts.items()}


def log_findings(texts: dict[str, str], gpu_job: bool) -> Iterator[Finding]:
    for node, text in texts.items():
        for fatal in fatal_lines(text):
            yield Finding(Severity.ERROR, "fatal", fatal.kind, node=node, line=fatal.line)
    by_node = transports_by_node(texts)
    for reason in transport_findings(by_node, multi_node_gpu_job=gpu_job and len(texts) > 1):
        yield Finding(Severity.WARNING, "nccl", reason)


def resources(snapshots: list[Snapshot]) -> dict[str, dict[str, float]]:
    """Ray's GPUs and CPUs in use and in all, summed over the nodes of the last snapshot."""
    totals: dict[str, dict[str, float]] = {}
    for node in snapshots[-1].nodes.values() if snapshots else ():
        for name, use in node.resources.items():
            total = totals.setdefault(name, {"used": 0.0, "total": 0.0})
            total["used"] += use.get("used", 0.0)
            total["total"] += use.get("used", 0.0) + use.get("available", 0.0)
    return totals


def verdict(state: str, findings: list[Finding], logs: protocol.LogDir) -> Verdict:
    if any(f.severity != Severity.INFO for f in findings):
        return Verdict.UNHEALTHY
    if state in ("UNKNOWN", "PENDING", "REQUEUED") and not logs.ended.exists():
        return Verdict.CANNOT_TELL
    return Verdict.HEALTHY


def check(job: Job, slurm: SlurmState, options: Options, now: float | None = None) -> Report:
    """The job's health now (``now``: epoch seconds, default the clock)."""
    now = time.time() if now is None else now
    logs = job.logs
    state = state_name(slurm)
    findings = state_findings(state, slurm, logs)
    text, changed = driver_text(logs)
    seen = progress(text, options.step_regex)
    stall = stall_finding(logs, seen, changed, options, now)
    snapshots = read_snapshots(logs.metrics) if logs.metrics.exists() else []
    idle = idle_finding(logs, snapshots, options, now)
    findings += [f for f in (stall, idle) if f is not None]
    used = resources(snapshots)
    ip_names = {node.ip: name for name, node in snapshots[-1].nodes.items() if node.ip} if snapshots else {}
    findings += log_findings(texts_by_node(logs, ip_names), gpu_job=used.get("GPU", {}).get("total", 0) > 0)
    found = (
        latest_checkpoint(options.checkpoint_dir, options.checkpoint_marker)
        if options.checkpoint_dir
        else None
    )
    return Report(
        job_id=job.job_id,
        state=state,
        verdict=verdict(state, findings, logs),
        findings=findings,
        step=seen.step if seen else None,
        total_steps=seen.total if seen else None,
        steps_per_second=seen.rate if seen else None,
        checkpoint=str(found.path) if found else None,
        resources=used,
    )


def stall_check(options: Options) -> Callable[[Job], bool]:
    """Whether a job has stalled, from its LOG_DIR alone (no Slurm query): for raysub watch."""

    def stalled(job: Job) -> bool:
        text, changed = driver_text(job.logs)
        seen = progress(text, options.step_regex)
        return stall_finding(job.logs, seen, changed, options, time.time()) is not None

    return stalled
