"""raysub grow and shrink: more nodes for a running job's Ray cluster as jobs of their own (grow jobs), and
their release. Each grow job is listed in the grown job's LOG_DIR/grow/ as ``<its job id>.job`` (its node
count), written as it is submitted, so that a grow job still in the queue is known too."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from raysub import protocol, slurm
from raysub.job.grow import Grow, render_grow
from raysub.jobs import Job

MARK = ".job"


class GrowError(RuntimeError):
    pass


@dataclass(frozen=True)
class GrowJob:
    job_id: str
    nodes: int
    state: str  # Slurm's (PENDING, RUNNING, ...), or UNKNOWN once Slurm forgot it


def grow_dir(job: Job) -> Path:
    return job.logs.path / protocol.GROW_DIR


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
    return None


def grow(job: Job, request: Grow) -> str:
    """Submits a grow job for ``job``; its job id. GrowError saying why when it cannot be."""
    script = render_grow(request)  # a value it cannot use first: SpecError
    why = _why_not(job)
    if why is not None:
        raise GrowError(why)
    directory = grow_dir(job)
    mode = stat.S_IMODE(job.logs.path.stat().st_mode)
    try:
        directory.mkdir(mode=mode)
        directory.chmod(mode)  # mkdir's mode is cut by the umask; a default ACL is cut by chmod
    except FileExistsError:
        if directory.is_symlink() or not directory.is_dir() or directory.stat().st_uid != os.getuid():
            raise GrowError(f"{directory} is not this job's own directory") from None
    with tempfile.TemporaryDirectory(prefix="raysub-grow-") as tmp:
        path = Path(tmp) / "grow.sub"
        path.write_text(script)
        subprocess.run(["bash", "-n", str(path)], check=True)
        try:
            job_id = slurm.submit(path, job.logs.path)
        except slurm.SlurmError as error:
            raise GrowError(str(error)) from error
    protocol.write_atomic(
        directory / f"{job_id}{MARK}", f"{request.nodes}\n", protocol.log_file_mode(job.logs.path)
    )
    return job_id


def grow_jobs(job: Job) -> list[GrowJob]:
    """The grow jobs submitted for ``job``, oldest first, with Slurm's state of each."""
    found = []
    for mark in grow_dir(job).glob(f"*{MARK}"):
        job_id = mark.name.removesuffix(MARK)
        if not job_id.isdigit():
            continue
        try:
            nodes = int(mark.read_text(errors="replace").strip() or "0")
        except (OSError, ValueError):
            nodes = 0
        found.append(GrowJob(job_id, nodes, slurm.job_state(job_id).state or "UNKNOWN"))
    return sorted(found, key=lambda grown: int(grown.job_id))


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
