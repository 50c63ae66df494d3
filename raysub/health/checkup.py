"""One checkup of a job's health: Slurm's state, training progress and stalls, idle GPUs, the NCCL transport
of each node, fatal log lines, Ray's resources and the latest checkpoint, as findings and a verdict
(docs/health.md).

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
from raysub.health import gpu_use, ray_fatal
from raysub.health.fatal import NODE_DIED, fatal_lines
from raysub.health.nccl import transport_findings, transports_by_node
from raysub.health.options import (
    SLOW_STEP_FACTOR,
    SLOW_STEP_LIMIT_FACTOR,
    SLOW_STEP_LIMIT_FLOOR,
    SLOW_STEP_MIN,
    Options,
)
from raysub.health.progress import Progress, Throughput
from raysub.health.stall import StepSources, median_step_time
from raysub.job.lib.checkpoints import AmbiguousCheckpoints, latest_checkpoint
from raysub.jobs import Job
from raysub.protocol import grow_jobs
from raysub.protocol.logdir import LogDir, ProgressSeen
from raysub.protocol.metrics_log import Snapshot, read_snapshots
from raysub.protocol.ray_logs import kept_logs, read_text
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


# Slurm's many states, as a checkup names them; anything else is UNKNOWN.
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
    kind: str  # state, stall, slow_step, progress, gpu_idle, nccl, fatal, grow, checkpoint
    reason: str  # one line
    node: str | None = None
    line: str | None = None  # the log line that shows it


# The version of ``raysub health --json``'s layout (docs/health.md): raised when a field changes meaning or
# goes away; new fields do not raise it.
SCHEMA_VERSION = 2


@dataclass(frozen=True)
class NodeHealth:
    """One node as a checkup sees it: the network NCCL uses from it (None: its logs do not say) and its
    GPUs' use over the last ``gpu_idle_after`` seconds (None: no reading)."""

    transport: str | None = None
    gpu_utilization: gpu_use.GpuUse | None = None


@dataclass
class Checkup:
    """What raysub health says of a job: its verdict and the findings behind it, with its progress (step,
    total, seconds per step and the throughput the log states), GPU use, each node's NCCL transport, Ray's
    resources in use and the newest complete checkpoint."""

    job_id: str
    state: str
    verdict: Verdict
    findings: list[Finding] = field(default_factory=list)
    step: int | None = None
    # Where the step came from: "trainer (<who reported it>)" (raysub.trainer), "tensorboard", "metrics
    # file" or "driver log" (its text).
    step_source: str | None = None
    # Why there is no step though the driver's text shows a count: it is an epoch's past the first, a bar
    # that may have closed at the end, a bar that counts validation batches too.
    step_unknown: str | None = None
    total_steps: int | None = None
    seconds_per_step: float | None = None
    throughput: Throughput | None = None
    gpu_utilization: gpu_use.GpuUse | None = None
    nodes: dict[str, NodeHealth] = field(default_factory=dict)
    checkpoint: str | None = None
    resources: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.verdict == Verdict.HEALTHY

    def to_json(self) -> str:
        data = {"schema_version": SCHEMA_VERSION, **asdict(self)}
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
            took = f", {_seconds(self.seconds_per_step)} per step" if self.seconds_per_step else ""
            rate = f", {self.throughput}" if self.throughput else ""
            source = f" (from the {self.step_source})" if self.step_source != "driver log" else ""
            lines.append(f"step {self.step}{total}{took}{rate}{source}")
        elif self.step_unknown:
            lines.append(f"step unknown: {self.step_unknown}")
        if gpus := self.gpu_utilization:
            lines.append(
                f"GPU utilisation: {gpus.average:g}% on average, {gpus.minimum:g}% on the least busy GPU"
            )
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


def state_findings(state: str, slurm: SlurmState, logs: LogDir) -> list[Finding]:
    if state in FAILED_STATES:
        return [Finding(Severity.ERROR, "state", f"Slurm says {state}", line=logs.ended_reason())]
    if state == "COMPLETED" and (logs.driver_exit_code() or slurm.exit_code):
        reason = logs.ended_reason() or f"exit code {slurm.exit_code}"
        return [Finding(Severity.ERROR, "state", f"the job completed with a failure: {reason}")]
    ended = logs.ended_reason()
    if state == "UNKNOWN" and ended is not None and logs.driver_exit_code() != 0:
        # Slurm forgot the job (MinJobAge, a controller reset): only LOG_DIR can say how it ended, and
        # anything but the driver's success is a failure.
        reason = f"the job ended without the driver's success: {ended or 'ENDED is empty'}"
        return [Finding(Severity.ERROR, "state", reason)]
    return []


def driver_running(logs: LogDir) -> bool:
    return (
        logs.file(protocol.DRIVER_STARTED).exists()
        and logs.driver_exit_code() is None
        and not logs.ended.exists()
    )


def remember(logs: LogDir, step: int | None, changed: float, now: float) -> ProgressSeen:
    """LOG_DIR's memory of the step (health_progress.json), brought up to date with ``step``, so that
    checkups and watch intervals add up. A step first seen is dated by the log's last change on the first
    checkup (so that a stall is never called early), by ``now`` on later ones; each new step joins the
    sightings the step time is measured from."""
    before = logs.progress_seen()
    if before is not None and before.step == step:
        return before
    since = changed if before is None else now
    steps = before.steps if before else ()
    seen = ProgressSeen(step, since, steps if step is None else (*steps, (step, since)))
    logs.write_progress_seen(seen)
    return seen


def slow_step_limit(options: Options, median: float | None) -> float:
    """How long a step may take while the driver keeps printing: ``options.slow_step_limit``, or
    SLOW_STEP_LIMIT_FACTOR median steps but at least SLOW_STEP_LIMIT_FLOOR (the floor alone when the step
    time is unknown)."""
    if options.slow_step_limit is not None:
        return options.slow_step_limit
    return max(SLOW_STEP_LIMIT_FLOOR, SLOW_STEP_LIMIT_FACTOR * (median or 0.0))


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.2g} s"


def slow_step_finding(
    step: int, taken: float, median: float | None, options: Options, line: str | None
) -> Finding | None:
    """The step after ``step``, ``taken`` seconds so far, its driver not silent for ``stall_after``: a
    stall past the slow-step limit, a slow_step warning past SLOW_STEP_FACTOR median steps and
    SLOW_STEP_MIN seconds."""
    limit = slow_step_limit(options, median)
    usual = f", the median step time {_seconds(median)}" if median is not None else ""
    if taken >= limit:
        reason = (
            f"no new step after step {step} for {_seconds(taken)} while the driver keeps printing: "
            f"past the slow-step limit of {_seconds(limit)}{usual}"
        )
        return Finding(Severity.ERROR, "stall", reason, line=line)
    if median is None or taken <= max(SLOW_STEP_FACTOR * median, SLOW_STEP_MIN):
        return None
    reason = (
        f"no new step after step {step} for {_seconds(taken)}, {taken / median:.0f} times the median step "
        f"time ({_seconds(median)}); a stall after {_seconds(options.stall_after)} without output, or at "
        f"{_seconds(limit)}"
    )
    return Finding(Severity.WARNING, "slow_step", reason, line=line)


def stall_finding(
    logs: LogDir, seen: Progress | None, changed: float | None, options: Options, now: float
) -> Finding | None:
    """Stalled: the driver runs, and has printed no new step and nothing else either for ``stall_after``
    seconds (``changed``: when its log last grew). A step that takes long while output keeps coming is
    not silence: an evaluation, a rollout or a checkpoint save looks just like that, so it is only a
    slow_step warning, and a stall past the much larger slow-step limit (:func:`slow_step_finding`).
    Before the first step only silence counts: loading a model and compiling may print for hours."""
    if not driver_running(logs) or changed is None:
        return None
    step = seen.step if seen else None
    memory = remember(logs, step, changed, now)
    line = seen.line if seen else None
    silent = now - max(memory.since, changed)
    if silent >= options.stall_after:
        what = "no output from the driver" if step is None else f"no new step after step {step} and no output"
        return Finding(Severity.ERROR, "stall", f"{what} for {_seconds(silent)}", line=line)
    if step is None:
        return None
    median = median_step_time(memory.steps, seen.seconds_per_step if seen else None)
    return slow_step_finding(step, now - memory.since, median, options, line)


WHOLE_RUN_SLACK = 120.0


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _names(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 4 else f"{', '.join(nodes[:4])} and {len(nodes) - 4} more"


def idle_finding(logs: LogDir, snapshots: list[Snapshot], options: Options, now: float) -> Finding | None:
    """GPUs allocated but idle: the nodes whose every GPU with a reading stayed below the threshold in
    every snapshot of the last ``gpu_idle_after`` s while the driver ran (a GPU with no reading is
    unknown, not idle), with how long and whether the whole time since the driver started."""
    started = next((e.t for e in logs.timeline() if e.phase == protocol.PHASE_DRIVER_START), None)
    window_start = now - options.gpu_idle_after
    if started is None or started > window_start or not driver_running(logs):
        return None
    running = [s for s in snapshots if s.t >= started]
    window = [s for s in running if s.t >= window_start]
    if len(window) < 2:
        return None
    since = {
        node: gpu_use.idle_since(running, node, options.gpu_idle_threshold)
        for node in gpu_use.nodes_of(window)
    }
    idle = sorted(node for node, t in since.items() if t is not None and t <= window[0].t)
    if not idle:
        return None
    use = gpu_use.use_by_node(window)
    measured = [node for node, u in use.items() if u is not None]
    gpus = sum(u.gpus for node, u in use.items() if u is not None and node in idle)
    first = min(t for node, t in since.items() if node in idle and t is not None)
    # Idle from the first reading after the driver started (the monitor samples every few seconds).
    whole = first <= running[0].t and running[0].t - started <= WHOLE_RUN_SLACK
    since_start = ", every reading since the driver started" if whole else ""
    how = f"below {options.gpu_idle_threshold:g}% for {_seconds(now - first)}{since_start}"
    count = "the GPU" if gpus == 1 else f"all {gpus} GPUs"
    if len(idle) == len(measured):
        reason = f"GPUs allocated but idle: {count} of {_names(idle)} {how}"
    else:
        others = len(measured) - len(idle)
        reason = (
            f"GPUs allocated but idle on {_names(idle)} ({_plural(gpus, 'GPU')}): {how}, while the GPUs of "
            f"{_plural(others, 'other node')} work"
        )
    return Finding(Severity.WARNING, "gpu_idle", reason, node=idle[0] if len(idle) == 1 else None)


# Ray's prefix on lines from its workers: "(RayTrainWorker pid=123, ip=10.0.0.2) ..."
_RAY_PREFIX_IP = re.compile(r"^\((?:[^()]*?)\bip=(?P<ip>[0-9a-fA-F.:]+)\)")


def texts_by_node(logs: LogDir, ip_names: dict[str, str]) -> dict[str, str]:
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


def log_findings(
    texts: dict[str, str], by_node: dict[str, str | None], gpu_job: bool, grow_hosts: set[str] | None = None
) -> Iterator[Finding]:
    """Fatal lines in each node's logs, and the NCCL transports of the nodes (``by_node``) found wanting. A
    node of a grow job (``grow_hosts``) that Ray marked dead left the cluster as grow nodes do (a plain
    scancel, a preemption): a warning, not the run failing."""
    for node, text in texts.items():
        for fatal in fatal_lines(text):
            dead = fatal.kind == NODE_DIED
            left = next((host for host in grow_hosts or () if dead and _names_host(fatal.line, host)), None)
            if left is not None:
                reason = f"{left}, a grow job's node, left Ray without Ray's drain (raysub shrink drains)"
                yield Finding(Severity.WARNING, "grow", reason, node=node, line=fatal.line)
            else:
                yield Finding(Severity.ERROR, "fatal", fatal.kind, node=node, line=fatal.line)
    for reason in transport_findings(by_node, multi_node_gpu_job=gpu_job and len(texts) > 1):
        yield Finding(Severity.WARNING, "nccl", reason)


def _names_host(line: str, host: str) -> bool:
    """Whether Ray's line of a node marked dead names ``host`` ("... and node name: <host> has been ...")."""
    return f"node name: {host} " in line


def ray_log_findings(logs: LogDir) -> Iterator[Finding]:
    """What Ray's own logs, kept as each node left (--keep-ray-logs), say killed a node's Ray."""
    for kept in kept_logs(logs.path):
        if ray_fatal.read_by_name(kept.name):
            for fatal in ray_fatal.fatal_lines(kept.name, read_text(kept.path)):
                reason = f"{fatal.kind} in Ray's {fatal.name}"
                yield Finding(Severity.ERROR, "fatal", reason, node=kept.node, line=fatal.line)


def node_health(transports: dict[str, str | None], recent: list[Snapshot]) -> dict[str, NodeHealth]:
    """Each node's transport and GPU use (from the recent snapshots)."""
    use = gpu_use.use_by_node(recent)
    return {node: NodeHealth(transports.get(node), use.get(node)) for node in sorted({*transports, *use})}


def resources(snapshots: list[Snapshot]) -> dict[str, dict[str, float]]:
    """Ray's GPUs and CPUs in use and in all, summed over the nodes of the last snapshot."""
    totals: dict[str, dict[str, float]] = {}
    for node in snapshots[-1].nodes.values() if snapshots else ():
        for name, use in node.resources.items():
            total = totals.setdefault(name, {"used": 0.0, "total": 0.0})
            total["used"] += use.get("used", 0.0)
            total["total"] += use.get("used", 0.0) + use.get("available", 0.0)
    return totals


def verdict(state: str, findings: list[Finding], logs: LogDir) -> Verdict:
    if any(f.severity != Severity.INFO for f in findings):
        return Verdict.UNHEALTHY
    if state in ("UNKNOWN", "PENDING", "REQUEUED") and not logs.ended.exists():
        return Verdict.CANNOT_TELL
    return Verdict.HEALTHY


def check(job: Job, slurm: SlurmState, options: Options, now: float | None = None) -> Checkup:
    """The job's health now (``now``: epoch seconds, default the clock)."""
    now = time.time() if now is None else now
    logs = job.logs
    state = state_name(slurm)
    findings = state_findings(state, slurm, logs)
    sources = StepSources(options)
    seen, changed, source = sources.read(logs, now)
    stall = stall_finding(logs, seen, changed, options, now)
    snapshots = read_snapshots(logs.metrics) if logs.metrics.exists() else []
    idle = idle_finding(logs, snapshots, options, now)
    findings += [f for f in (stall, idle) if f is not None]
    used = resources(snapshots)
    ip_names = {node.ip: name for name, node in snapshots[-1].nodes.items() if node.ip} if snapshots else {}
    texts = texts_by_node(logs, ip_names)
    by_node = transports_by_node(texts)
    gpu_job = used.get("GPU", {}).get("total", 0) > 0
    findings += log_findings(texts, by_node, gpu_job, grow_jobs.all_hosts(logs.path))
    findings += ray_log_findings(logs)
    recent = [s for s in snapshots if s.t >= now - options.gpu_idle_after]
    found = None
    if options.checkpoint_dir:
        try:
            found = latest_checkpoint(options.checkpoint_dir, options.checkpoint_marker)
        except AmbiguousCheckpoints as error:
            findings.append(Finding(Severity.WARNING, "checkpoint", str(error)))
    return Checkup(
        job_id=job.job_id,
        state=state,
        verdict=verdict(state, findings, logs),
        findings=findings,
        step=seen.step if seen else None,
        step_source=source,
        step_unknown=None if seen else sources.unknown,
        total_steps=seen.total if seen else None,
        seconds_per_step=seen.seconds_per_step if seen else None,
        throughput=seen.throughput if seen else None,
        gpu_utilization=gpu_use.overall(recent),
        nodes=node_health(by_node, recent),
        checkpoint=str(found.path) if found else None,
        resources=used,
    )


class StallCheck:
    """raysub health's stall rule (:func:`stall_finding`) for a job asked about again and again, from its
    LOG_DIR alone (no Slurm query): each job's driver log is read on from where the previous call stopped
    (:class:`DriverTail`), so a call costs what the driver wrote since, never the whole log. The readers of
    the last MAX_JOBS jobs asked about are kept."""

    MAX_JOBS = 16

    def __init__(self, options: Options) -> None:
        self.options = options
        self.tails: dict[Path, StepSources] = {}

    def __call__(self, job: Job, now: float | None = None) -> Finding | None:
        """None when the job is fine; an error (kind stall) when it stalled; a warning (slow_step) when
        its step takes much longer than its steps did."""
        now = time.time() if now is None else now
        if not driver_running(job.logs):
            return None
        tail = self.tails.pop(job.logs.path, None) or StepSources(self.options)
        self.tails[job.logs.path] = tail  # the most recent last
        while len(self.tails) > self.MAX_JOBS:
            del self.tails[next(iter(self.tails))]
        seen, changed, _ = tail.read(job.logs, now)
        return stall_finding(job.logs, seen, changed, self.options, now)


def stall_check(options: Options) -> Callable[[Job], Finding | None]:
    """raysub watch's stall check: a :class:`StallCheck`, called with each job every interval."""
    return StallCheck(options)
