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
from raysub.protocol.grow_jobs import By, GrowMark


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


def shrink(job: Job, job_ids: tuple[str, ...] = (), nodes: int | None = None) -> list[GrowJob]:
    """Cancels grow jobs of ``job``: those named, else the newest until ``nodes`` nodes are released, else
    all; the ones cancelled. GrowError for a named job that is not one of its grow jobs."""
    live = [grown for grown in grow_jobs(job) if grown.state in ("PENDING", "RUNNING", "CONFIGURING")]
    if job_ids:
        known = {grown.job_id: grown for grown in grow_jobs(job)}
        unknown = [job_id for job_id in job_ids if job_id not in known]
        if unknown:
            raise GrowError(
                f"{', '.join(unknown)}: not a grow job of job {job.job_id} (raysub shrink --list shows them)"
            )
        chosen = [known[job_id] for job_id in job_ids]
    elif nodes is not None:
        chosen, released = [], 0
        for grown in reversed(live):
            if released >= nodes:
                break
            chosen.append(grown)
            released += grown.nodes
    else:
        chosen = live
    for grown in chosen:
        try:
            slurm.cancel(grown.job_id)
        except slurm.SlurmError as error:
            raise GrowError(str(error)) from error
    return chosen
