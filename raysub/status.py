"""Where a job stands: Slurm's state plus what its LOG_DIR says (phase, who joined, why it ended)."""

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from raysub import protocol, slurm
from raysub.elastic import Member, members
from raysub.jobs import Job
from raysub.protocol import topology_log
from raysub.protocol.preflight_log import read_checks
from raysub.slurm import SlurmState

# Slurm states after which nothing of the job runs any more.
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
}
# Commands that follow a job (status, logs and monitor --follow) ask Slurm at most this often.
SLURM_MIN_INTERVAL = 2.0


class JobPoll:
    """Whether a job is over, for a command that asks again and again (a follow, a watch): the job's ENDED
    file on every call (cheap), Slurm at most once per ``min_interval`` seconds (between two asks, its last
    answer stands)."""

    def __init__(
        self,
        job: Job,
        min_interval: float = SLURM_MIN_INTERVAL,
        clock: Callable[[], float] | None = None,
        ask: Callable[[str], SlurmState] | None = None,
    ) -> None:
        self.job = job
        self.min_interval = min_interval
        self._clock = clock or time.monotonic
        self._ask = ask or (lambda job_id: slurm.job_state(job_id))
        self._last: tuple[float, SlurmState] | None = None

    def slurm_state(self) -> SlurmState:
        """Slurm's word on the job, asked anew only when the last answer is ``min_interval`` old."""
        now = self._clock()
        if self._last is None or now - self._last[0] >= self.min_interval:
            self._last = (now, self._ask(self.job.job_id))
        return self._last[1]

    def over(self) -> bool:
        return self.job.logs.ended.exists() or self.slurm_state().state in FINAL_STATES


class Phase(StrEnum):
    """Where a job stands, as raysub status says it (FINISHED is followed by the driver's exit code)."""

    QUEUED = "queued"
    HEAD_STARTING = "head starting"
    WORKERS_JOINING = "workers joining"
    CLUSTER_READY = "cluster ready"
    DRIVER_RUNNING = "driver running"
    ENDED = "ended"
    FINISHED = "finished with exit code"


# The phases of a job that is still coming up: status --follow redraws through them.
COMING_UP = frozenset({Phase.QUEUED, Phase.HEAD_STARTING, Phase.WORKERS_JOINING, Phase.CLUSTER_READY})


# Phase durations from the timeline: name -> (from phase, to phase).
SPANS = {
    "head_start": (protocol.PHASE_JOB_START, protocol.PHASE_HEAD_READY),
    "workers_join": (protocol.PHASE_HEAD_READY, protocol.PHASE_DRIVER_START),
    "driver": (protocol.PHASE_DRIVER_START, protocol.PHASE_DRIVER_END),
    "total": (protocol.PHASE_JOB_START, protocol.PHASE_ENDED),
}


@dataclass
class Status:
    job_id: str
    attempt: int
    log_dir: str
    slurm_state: str | None
    phase: str
    pending: str | None  # why Slurm keeps it queued, in words (slurm.SlurmState.pending)
    workers_joined: int
    workers_expected: int
    missing_nodes: list[str] = field(default_factory=list)
    sandboxes_ready: int = 0
    driver_exit_code: int | None = None
    ended: str | None = None
    exit_code: int | None = None
    durations: dict[str, float] = field(default_factory=dict)
    since_head_ready: float | None = None
    warnings: list[str] = field(default_factory=list)
    # Where each node sits (--topology): {node: {"switch", "block", "nvlink_domain", "rank"}}, in the
    # nodes' order; a value a node could not find is null.
    topology: dict[str, dict[str, object]] = field(default_factory=dict)
    # The job's grow jobs (raysub grow, --autoscale) as members of its cluster (raysub/elastic.py's Member).
    members: list[dict[str, object]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @staticmethod
    def list_json(statuses: list["Status"]) -> str:
        """The statuses of an array job's tasks, as a JSON list of what to_json prints for each."""
        return json.dumps([asdict(status) for status in statuses], indent=2)

    def describe(self) -> str:
        """A few lines for a person."""
        lines = [
            f"job {self.job_id} (attempt {self.attempt}): {self.phase}; Slurm: {self.slurm_state or '?'}"
        ]
        if self.pending:
            lines.append(f"pending: {self.pending}")
        lines.append(f"workers joined: {self.workers_joined}/{self.workers_expected}")
        if self.missing_nodes:
            lines.append(f"missing: {', '.join(self.missing_nodes)}")
        if self.since_head_ready is not None and self.phase == Phase.WORKERS_JOINING:
            lines.append(f"{self.since_head_ready:.0f} s since the head was ready")
        if self.sandboxes_ready:
            lines.append(f"sandboxes ready: {self.sandboxes_ready}")
        groups: dict[str, list[str]] = {}
        for node, where in self.topology.items():
            place = where["switch"] or where["block"] or "no switch"
            groups.setdefault(f"{place}, NVLink {where['nvlink_domain'] or 'per node'}", []).append(node)
        if groups:
            lines.append("topology: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in groups.items()))
        if self.members:
            lines.append("grow jobs (members of the cluster besides the job's own nodes):")
            lines += [f"  {Member(**member).describe()}" for member in self.members]  # type: ignore[arg-type]
        lines += [f"warning: {warning}" for warning in self.warnings]
        if self.ended:
            lines.append(f"ENDED: {self.ended}")
        if self.durations:
            lines.append(
                "durations: "
                + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in self.durations.items())
            )
        lines.append(f"logs: {self.log_dir}")
        return "\n".join(lines)


def first_times(events: list[protocol.TimelineEvent]) -> dict[str, float]:
    times: dict[str, float] = {}
    for event in events:
        times.setdefault(event.phase, event.t)
    return times


def preflight_warnings(job: Job) -> list[str]:
    """What each node's GPU preflight check found that was not fine (its last check only)."""
    last = {check.node: check for check in read_checks(job.logs.preflight)}
    return [
        f"GPU preflight on {node}: {finding.reason}"
        for node, check in sorted(last.items())
        for finding in check.findings
        if finding.severity != "info"
    ]


def read_status(job: Job, slurm: SlurmState, now: float) -> Status:
    """Combine Slurm's view with the job's files; ``now`` is the current time (epoch seconds)."""
    entries = job.logs.node_map()
    workers = [e.node for e in entries if e.role == protocol.ROLE_WORKER]
    joined = set(job.logs.joined_nodes())
    ended = job.logs.ended_reason()
    driver_exit = job.logs.driver_exit_code()
    head_started = job.logs.started_ray_head.exists()
    events = job.logs.timeline()
    times = first_times(events)

    phase: str
    if driver_exit is not None:
        phase = f"{Phase.FINISHED} {driver_exit}"
    elif ended is not None:
        phase = Phase.ENDED
    elif slurm.state in FINAL_STATES:
        phase = Phase.ENDED
        ended = f"Slurm says {slurm.state} and no node wrote ENDED"
    elif job.logs.file(protocol.DRIVER_STARTED).exists():
        phase = Phase.DRIVER_RUNNING
    elif head_started and joined.issuperset(e.node for e in entries):
        phase = Phase.CLUSTER_READY
    elif head_started:
        phase = Phase.WORKERS_JOINING
    elif slurm.state == "PENDING":
        phase = Phase.QUEUED
    else:
        phase = Phase.HEAD_STARTING

    durations = {name: times[b] - times[a] for name, (a, b) in SPANS.items() if a in times and b in times}
    ready = times.get(protocol.PHASE_HEAD_READY)
    return Status(
        job_id=job.job_id,
        attempt=job.attempt,
        log_dir=str(job.logs.path),
        slurm_state=slurm.state,
        phase=phase,
        pending=slurm.pending,
        workers_joined=sum(1 for w in workers if w in joined),
        workers_expected=len(workers),
        missing_nodes=[e.node for e in entries if e.node not in joined] if head_started else [],
        sandboxes_ready=len(list(job.logs.path.glob(f"{protocol.SANDBOX_READY_PREFIX}*"))),
        driver_exit_code=driver_exit,
        ended=ended,
        exit_code=slurm.exit_code,
        durations=durations,
        since_head_ready=now - ready if ready is not None and driver_exit is None else None,
        warnings=[f"GPUs idle: {e.detail}" for e in events if e.phase == protocol.PHASE_GPU_IDLE]
        + preflight_warnings(job),
        topology=node_topology(job, [e.node for e in entries]),
        members=[asdict(member) for member in members(job, joined)],
    )


def node_topology(job: Job, nodes: list[str]) -> dict[str, dict[str, object]]:
    """Where each node that wrote its topology sits (raysub/protocol/topology_log.py), in ``nodes``' order."""
    found = topology_log.read_all(job.logs.path)
    return {
        node: {"switch": t.switch, "block": t.block, "nvlink_domain": t.nvlink_domain, "rank": t.rank}
        for node in nodes
        if (t := found.get(node))
    }


def queued_status(job_id: str) -> Status | None:
    """A job that Slurm still holds in its queue, before it has a LOG_DIR; None when Slurm says otherwise."""
    slurm_state = slurm.job_state(job_id)
    if slurm_state.state != "PENDING":
        return None
    return Status(
        job_id=job_id,
        attempt=0,
        log_dir="none yet: the job has not started",
        slurm_state=slurm_state.state,
        phase=Phase.QUEUED,
        pending=slurm_state.pending,
        workers_joined=0,
        workers_expected=0,
    )


def progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def follow(job: Job, interval: float, once: bool = False) -> Iterator[Status]:
    """The job's status now and then every ``interval`` seconds while it is coming up (the first status
    after that included); only the first when ``once``. Slurm is asked at most once per refresh."""
    poll = JobPoll(job)
    while True:
        current = read_status(job, poll.slurm_state(), time.time())
        yield current
        if once or current.phase not in COMING_UP:
            return
        time.sleep(interval)
