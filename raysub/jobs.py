"""Find a job's LOG_DIR from what the user gives: a job id, a directory, or nothing (the most recent)."""

import re
from dataclasses import dataclass
from pathlib import Path

from raysub import protocol
from raysub.protocol import LogDir

_ATTEMPT_DIR = re.compile(rf"(?P<job>\d+)(?:-(?P<restart>\d+))?{re.escape(protocol.LOG_DIR_SUFFIX)}")


class JobNotFound(LookupError):
    pass


@dataclass(frozen=True)
class Job:
    job_id: str
    attempt: int
    logs: LogDir

    @classmethod
    def from_dir(cls, path: Path) -> "Job":
        match = _ATTEMPT_DIR.fullmatch(path.name)
        if not match or not path.is_dir():
            raise JobNotFound(
                f"{path} is not a raysub log directory (<jobid>[-<restart>]{protocol.LOG_DIR_SUFFIX})"
            )
        return cls(match["job"], int(match["restart"] or 0), LogDir(path))


def attempts(base: Path, job_id: str) -> list[Job]:
    """Every attempt of ``job_id`` under ``base``, oldest first."""
    found = [
        Job.from_dir(p)
        for p in base.glob(f"{job_id}*{protocol.LOG_DIR_SUFFIX}")
        if _ATTEMPT_DIR.fullmatch(p.name)
    ]
    return sorted((j for j in found if j.job_id == job_id), key=lambda j: j.attempt)


def resolve(ref: str | None, base: Path, attempt: int | None = None) -> Job:
    """The job ``ref`` names: a LOG_DIR, a job id (its newest attempt, or ``attempt``), or, for None, the
    newest job under ``base`` (its ``latest`` link, else the most recently changed log directory)."""
    if ref is None:
        latest = base / protocol.LATEST
        if latest.is_dir():
            job = Job.from_dir(latest.resolve())
        else:
            dirs = [p for p in base.glob(f"*{protocol.LOG_DIR_SUFFIX}") if _ATTEMPT_DIR.fullmatch(p.name)]
            if not dirs:
                raise JobNotFound(f"no raysub job under {base}; give a job id or a log directory")
            job = Job.from_dir(max(dirs, key=lambda p: p.stat().st_mtime))
        ref = job.job_id
    elif not ref.isdigit():
        job = Job.from_dir(Path(ref))
        if attempt is None:
            return job
        ref = job.job_id
        base = job.logs.path.parent
    found = attempts(base, ref)
    if not found:
        raise JobNotFound(f"no log directory of job {ref} under {base}")
    if attempt is None:
        return found[-1]
    for job in found:
        if job.attempt == attempt:
            return job
    raise JobNotFound(f"job {ref} has no attempt {attempt} (has {', '.join(str(j.attempt) for j in found)})")
