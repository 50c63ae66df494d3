"""raysub submit: a rendered script, checked and handed to sbatch, then followed through its bring-up, one
line per stage (queued with Slurm's reason, head starting, workers K/N with who is missing, driver
running), and with --wait to its end."""

import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from raysub import jobs, slurm
from raysub.jobs import Job
from raysub.log_base import swappable
from raysub.protocol.logdir import LogDir
from raysub.spec import JobSpec
from raysub.status import COMING_UP, JobPoll, Phase, Status, read_status
from raysub.validate import validate

# How many of the nodes missing from Ray a stage line names (a 512-node job may miss a hundred).
MISSING_SHOWN = 3


class SubmitError(RuntimeError):
    pass


def log_base(spec: JobSpec, cwd: Path) -> Path:
    """Where the job submitted from ``cwd`` puts its LOG_DIR: its --log-dir (a relative one is taken from
    ``cwd``, where the job starts), or --private-log-dir when another user could swap the former
    (raysub.log_base). SubmitError, saying why, when the job would not start for that reason."""
    base = cwd / Path(spec.log_dir).expanduser() if spec.log_dir else cwd
    why = swappable(base)
    if why is None:
        return base
    if spec.private_log_base is None:
        raise SubmitError(
            f"the job would not start: {why}, and so could put a LOG_DIR of its own in its place; submit "
            "from, or pass --log-dir, a directory only you can write, or pass --private-log-dir DIR "
            "(docs/security.md)"
        )
    private = cwd / spec.private_log_base
    why_private = swappable(private)
    if why_private is not None:
        raise SubmitError(f"the job would not start: {why_private} (--private-log-dir)")
    return private


def sbatch(script: str, cwd: Path, keep: Path | None = None) -> str:
    """``script`` checked (bash -n, and shellcheck where there is one) and submitted from ``cwd``, its
    submit directory; kept at ``keep`` when given. The new job's id; SubmitError when either fails."""
    with tempfile.TemporaryDirectory(prefix="raysub-submit-") as tmp:
        path = keep or Path(tmp) / "job.sub"
        try:
            path.write_text(script)
        except OSError as error:
            raise SubmitError(f"cannot write {path}: {error.strerror or error}") from error
        problems, _ = validate(path)
        if problems:
            raise SubmitError(f"the rendered script does not pass raysub validate: {problems[0]}")
        try:
            return slurm.submit(path, cwd)
        except slurm.SlurmError as error:
            raise SubmitError(str(error)) from error


def exit_status(status: Status) -> int:
    """What submit --wait exits with: the driver's exit code, else Slurm's, else 1 (the job ended without
    a driver that said)."""
    if status.driver_exit_code is not None:
        return status.driver_exit_code
    return status.exit_code if status.exit_code else 1


def stage(status: Status) -> str:
    """Where a job stands in its bring-up, in one line."""
    if status.phase == Phase.QUEUED:
        return f"queued: {status.pending}" if status.pending else "queued"
    if status.phase == Phase.HEAD_STARTING:
        return "head starting"
    if status.phase in (Phase.WORKERS_JOINING, Phase.CLUSTER_READY):
        missing = status.missing_nodes
        shown = ", ".join(missing[:MISSING_SHOWN])
        if len(missing) > MISSING_SHOWN:
            shown += f" and {len(missing) - MISSING_SHOWN} more"
        joined = f"workers {status.workers_joined}/{status.workers_expected}"
        return f"{joined} (missing {shown})" if missing else joined
    if status.phase == Phase.ENDED:
        return f"ended: {status.ended}"
    return str(status.phase)


def dashboard_line(status: Status) -> str | None:
    """Where the job's dashboard is, once its head is up and has said so (None before, and in a job
    without one)."""
    if status.phase in (Phase.QUEUED, Phase.HEAD_STARTING) or not status.log_dir:
        return None
    address = LogDir(Path(status.log_dir)).dashboard_address()
    if address is None:
        return None
    return f"dashboard: http://{address} (from your laptop: raysub dashboard {status.job_id})"


def follow(
    job_id: str,
    base: Path,
    until_end: bool,
    interval: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Status]:
    """The job's status each time its stage line changes, until the driver runs (``until_end``: until the
    job ends), the last one included. A requeued job's newest attempt is followed once its LOG_DIR exists."""
    job = Job(job_id, 0, LogDir.of(base, job_id))
    poll = JobPoll(job)
    said = None
    while True:
        newest = ([job, *jobs.attempts(base, job_id)])[-1]  # no LOG_DIR yet while it is queued
        if newest != job:
            job, poll = newest, JobPoll(newest)
        current = read_status(job, poll.slurm_state(), time.time())
        line = stage(current)
        done = current.phase not in COMING_UP and (not until_end or current.phase != Phase.DRIVER_RUNNING)
        if line != said or done:
            said = line
            yield current
        if done:
            return
        sleep(interval)
