"""raysub grow and shrink: more nodes for a running job's Ray cluster as jobs of their own (grow jobs), and
their release. Each grow job is listed in the grown job's LOG_DIR/grow/ (raysub/protocol/grow_jobs.py)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from raysub import protocol, slurm
from raysub.job.grow import Grow, render_grow
from raysub.jobs import Job
from raysub.protocol import grow_jobs as grow_jobs_file
from raysub.protocol.grow_jobs import By, GrowMark, Leave, leave_path, read_leave
from raysub.timing import Timing


class GrowError(RuntimeError):
    pass


@dataclass(frozen=True)
class GrowJob:
    job_id: str
    nodes: int
    state: str  # Slurm's (PENDING, RUNNING, ...), or UNKNOWN once Slurm forgot it
    by: By  # raysub grow, or Ray's autoscaler (--autoscale)


def _why_not(job: Job) -> str | None:
    logs = job.logs
    if logs.ended.exists():
        return f"job {job.job_id} has ended: {logs.ended.read_text(errors='replace').strip()}"
    if not logs.file(protocol.STARTED_RAY_HEAD).exists():
        return f"job {job.job_id}'s Ray has not started yet: grow it once its head is up (raysub status)"
    if not logs.file(protocol.STEP_ENV).exists():
        return (
            f"job {job.job_id} was rendered by a raysub without grow (its LOG_DIR has no {protocol.STEP_ENV})"
        )
    missing = [name for name in grow_jobs_file.env_names(logs.path) if name not in os.environ]
    if missing:
        return (
            f"job {job.job_id} has --env {', '.join(missing)}, which its LOG_DIR does not keep (they may be "
            "secrets): set them in this environment, and a grow job brings them to its nodes"
        )
    return None


def grow(job: Job, request: Grow) -> str:
    """Submits a grow job for ``job``; its job id. GrowError saying why when it cannot be."""
    script = render_grow(request)  # a value it cannot use first: SpecError
    why = _why_not(job)
    if why is not None:
        raise GrowError(why)
    try:
        grow_jobs_file.grow_directory(job.logs.path)  # before sbatch: Slurm writes the job's output there
    except PermissionError as error:
        raise GrowError(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="raysub-grow-") as tmp:
        path = Path(tmp) / "grow.sub"
        path.write_text(script)
        subprocess.run(["bash", "-n", str(path)], check=True)
        try:
            job_id = slurm.submit(path, job.logs.path)
        except slurm.SlurmError as error:
            raise GrowError(str(error)) from error
    grow_jobs_file.write(job.logs.path, GrowMark(job_id, request.nodes, "grow", time.time()))
    return job_id


def grow_jobs(job: Job) -> list[GrowJob]:
    """The grow jobs submitted for ``job``, oldest first, with Slurm's state of each."""
    return [
        GrowJob(mark.job_id, mark.nodes, slurm.job_state(mark.job_id).state or "UNKNOWN", mark.by)
        for mark in grow_jobs_file.read_all(job.logs.path)
    ]


LIVE = ("PENDING", "RUNNING", "CONFIGURING")
TIMING = Timing()
SHRINK_LOOK_S = 2  # how often raysub shrink asks Slurm whether a draining grow job has left


def _chosen(job: Job, job_ids: tuple[str, ...], nodes: int | None) -> list[GrowJob]:
    known = grow_jobs(job)
    if job_ids:
        by_id = {grown.job_id: grown for grown in known}
        unknown = [job_id for job_id in job_ids if job_id not in by_id]
        if unknown:
            raise GrowError(
                f"{', '.join(unknown)}: not a grow job of job {job.job_id} (raysub shrink --list shows them)"
            )
        return [by_id[job_id] for job_id in job_ids]
    live = [grown for grown in known if grown.state in LIVE]
    if nodes is None:
        return live
    chosen, released = [], 0
    for grown in reversed(live):
        if released >= nodes:
            break
        chosen.append(grown)
        released += grown.nodes
    return chosen


def _cancel(grown: GrowJob) -> None:
    try:
        slurm.cancel(grown.job_id)
    except slurm.SlurmError as error:
        raise GrowError(str(error)) from error


def shrink(
    job: Job, job_ids: tuple[str, ...] = (), nodes: int | None = None, drain: float = TIMING.grow_drain_s
) -> list[GrowJob]:
    """Ends grow jobs of ``job``: those named, else the newest until ``nodes`` nodes are released, else all;
    the ones ended. A running one's nodes first leave Ray through its drain (its leave file), with ``drain``
    seconds for what runs there; it is cancelled when it has not left the queue by then. GrowError for a
    named job that is not one of its grow jobs."""
    chosen = _chosen(job, job_ids, nodes)
    deadline = time.time() + drain
    draining = [grown for grown in chosen if grown.state == "RUNNING" and drain > 0]
    for grown in draining:
        try:
            grow_jobs_file.write_leave(job.logs.path, grown.job_id, Leave(deadline, "raysub shrink"))
        except OSError as error:  # another user's job, a read-only LOG_DIR
            raise GrowError(f"cannot tell grow job {grown.job_id} to leave: {error}") from None
    for grown in chosen:
        if grown not in draining:
            _cancel(grown)
    while draining and time.time() < deadline + TIMING.grow_leave_s:
        time.sleep(SHRINK_LOOK_S)
        draining = [grown for grown in draining if slurm.job_state(grown.job_id).state in LIVE]
    for grown in draining:
        _cancel(grown)
    return chosen


@dataclass(frozen=True)
class Member:
    """A grow job as a member of the cluster: queued, joining, up, draining or gone, with what explains it
    (Slurm's pending reason, how many nodes are in Ray, why it leaves) and its nodes."""

    job_id: str
    by: By
    nodes: int
    state: str
    detail: str
    hosts: list[str]

    def describe(self) -> str:
        where = f" ({' '.join(self.hosts)})" if self.hosts else ""
        said = f": {self.detail}" if self.detail else ""
        return f"grow job {self.job_id} ({self.by}): {self.nodes} node(s){where}, {self.state}{said}"


def members(job: Job, joined: set[str]) -> list[Member]:
    """Each grow job of ``job``, oldest first, as a member of its cluster: one squeue call for all of them;
    ``joined``, the nodes in Ray as the head's counter last saw them."""
    marks = grow_jobs_file.read_all(job.logs.path)
    queued = slurm.queue_states([mark.job_id for mark in marks])
    found = []
    for mark in marks:
        hosts = grow_jobs_file.hosts(job.logs.path, mark.job_id)
        leave = read_leave(leave_path(job.logs.path, mark.job_id))
        # squeue did not answer: each job asked on its own (squeue, scontrol, then sacct)
        slurm_state = queued.get(mark.job_id) if queued is not None else slurm.job_state(mark.job_id)
        if slurm_state is not None and slurm_state.state is None:
            state, detail = "unknown", "no Slurm tool knows the job"
        elif slurm_state is None or slurm_state.state not in LIVE:
            state, detail = "gone", f"left Ray: {leave.why}" if leave else "not in Slurm's queue"
        elif slurm_state.state == "PENDING":
            state, detail = "queued", slurm_state.pending or ""
        elif leave is not None:
            state, detail = "draining", leave.why
        else:
            up = len(joined.intersection(hosts))
            state = "up" if up >= mark.nodes else "joining"
            detail = f"{up} of {mark.nodes} in Ray" if state == "joining" else ""
        found.append(Member(mark.job_id, mark.by, mark.nodes, state, detail, hosts))
    return found
