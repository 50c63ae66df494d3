"""Find a job's LOG_DIR from what the user gives: a job id, a directory, or nothing (the most recent).

A job id is looked for in order under an explicit --log-dir, in the current directory, where the per-user
job index last saw it, and in the directories Slurm has on record for it (docs/protocol.md, "Finding a
job"), so that every command works from anywhere, while the job runs and after it ended.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from raysub import protocol, slurm
from raysub.protocol.job_index import IndexEntry, job_index_path, read_job_index
from raysub.protocol.logdir import LogDir

_ATTEMPT_DIR = re.compile(
    rf"(?P<job>{protocol.JOB_ID.pattern})(?:-(?P<requeues>\d+))?{re.escape(protocol.LOG_DIR_SUFFIX)}"
)


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
                f"{path} is not a raysub log directory (<jobid>[-<requeues>]{protocol.LOG_DIR_SUFFIX})"
            )
        return cls(match["job"], int(match["requeues"] or 0), LogDir(path))


def attempts(base: Path, job_id: str) -> list[Job]:
    """Every attempt of ``job_id`` under ``base``, oldest first."""
    found = [
        Job.from_dir(p)
        for p in base.glob(f"{job_id}*{protocol.LOG_DIR_SUFFIX}")
        if _ATTEMPT_DIR.fullmatch(p.name)
    ]
    return sorted((j for j in found if j.job_id == job_id), key=lambda j: j.attempt)


# Shell completion offers at most this many job ids of the job index (which keeps every job ever run).
KNOWN_IDS_MAX = 50


def known_ids(base: Path, index: Path | None = None) -> list[str]:
    """The job ids a JOB argument may name, for shell completion: those with a LOG_DIR under ``base``,
    newest first, then the newest KNOWN_IDS_MAX of the job index whose LOG_DIR is still there; each once.
    Never raises: an unreadable place adds none."""
    here: list[tuple[float, str]] = []
    try:
        for path in base.iterdir():
            match = _ATTEMPT_DIR.fullmatch(path.name)
            if match:
                here.append((path.stat().st_mtime, match["job"]))
    except OSError:
        pass
    try:
        entries = read_job_index(index or job_index_path())
    except OSError:
        entries = []
    indexed: list[str] = []
    for entry in reversed(entries):  # the index is oldest first
        if len(indexed) == KNOWN_IDS_MAX:
            break
        if entry.job_id not in indexed and entry.log_dir.is_dir():
            indexed.append(entry.job_id)
    return list(dict.fromkeys([job_id for _, job_id in sorted(here, reverse=True)] + indexed))


def _pick(found: list[Job], attempt: int | None, where: Path) -> Job:
    if attempt is None:
        return found[-1]
    for job in found:
        if job.attempt == attempt:
            return job
    have = ", ".join(str(j.attempt) for j in found)
    raise JobNotFound(f"job {found[0].job_id} has no attempt {attempt} under {where} (has {have})")


def _names(entry_id: str, job_id: str) -> bool:
    """A job index line or LOG_DIR of ``entry_id`` belongs to ``job_id``: the job itself, or a task of it
    when ``job_id`` is an array job's."""
    return entry_id == job_id or entry_id.startswith(f"{job_id}_")


def indexed_dir(entries: list[IndexEntry], job_id: str) -> Path | None:
    """The LOG_DIR of the job index's newest line for ``job_id`` (or a task of it) whose directory still
    exists: a later line wins, since Slurm reuses job ids (after a wrap-around, or on another cluster
    sharing the home)."""
    for entry in reversed(entries):
        if _names(entry.job_id, job_id) and entry.log_dir.is_dir():
            return entry.log_dir
    return None


def array_tasks(base: Path, job_id: str) -> list[Job]:
    """The newest attempt of every task of array job ``job_id`` under ``base`` (<job_id>_<task>-logs), in
    task order."""
    found = [
        Job.from_dir(p)
        for p in base.glob(f"{job_id}_*{protocol.LOG_DIR_SUFFIX}")
        if _ATTEMPT_DIR.fullmatch(p.name)
    ]
    newest: dict[str, Job] = {}
    for job in sorted(found, key=lambda j: j.attempt):
        if job.job_id.partition("_")[0] == job_id:
            newest[job.job_id] = job
    return sorted(newest.values(), key=lambda j: int(j.job_id.partition("_")[2]))


def _places(job_id: str, base: Path | None, index: Path) -> Iterator[tuple[Path | None, str]]:
    """Where to look for ``job_id``, best first: (a base directory, what it is), or (None, why a source had
    none). Lazy: the index is read and Slurm asked only when the places before them had nothing."""
    if base is not None:
        yield base, f"under {base.absolute()} (--log-dir)"
    try:
        cwd = Path.cwd()
    except OSError:
        yield None, "not in the current directory (it no longer exists)"
    else:
        yield cwd, f"under {cwd} (the current directory)"
    try:
        entries = read_job_index(index)
    except OSError as error:
        yield None, f"the job index {index} is unreadable ({error.strerror})"
    else:
        found = indexed_dir(entries, job_id)
        if found is not None:
            yield found.parent, f"under {found.parent} (the job index {index})"
        elif any(_names(e.job_id, job_id) for e in entries):
            yield None, f"the job index {index} lists job {job_id} only in directories that are gone"
        else:
            yield None, f"the job index {index} has no job {job_id}"
    record = slurm.job_dirs(job_id)
    trouble = f" ({'; '.join(record.errors)})" if record.errors else ""
    if not record.answered:
        yield None, f"Slurm could not be asked{trouble}"
    elif not record.dirs:
        yield None, f"Slurm does not know job {job_id}{trouble}"
    for path in record.dirs:
        yield path, f"under {path} (Slurm's record of the job)"


def find_by_id(job_id: str, base: Path | None, attempt: int | None, index: Path | None = None) -> Job:
    """Attempt ``attempt`` (default: the newest) of ``job_id``, from the first place that has the job;
    JobNotFound lists every place looked."""
    [job] = find_all_by_id(job_id, base, attempt, index, tasks=False)
    return job


def find_all_by_id(
    job_id: str, base: Path | None, attempt: int | None, index: Path | None = None, tasks: bool = True
) -> list[Job]:
    """[the job ``job_id``] as find_by_id finds it; or, with ``tasks``, for an array job's id, each of its
    tasks (the newest attempt of each), from the first place that has any."""
    index = job_index_path() if index is None else index
    looked: list[str] = []
    seen: set[Path] = set()
    for place, what in _places(job_id, base, index):
        if place is None:
            looked.append(what)
            continue
        if place.absolute() in seen:
            continue
        seen.add(place.absolute())
        looked.append(what)
        found = attempts(place, job_id)
        if found:
            return [_pick(found, attempt, place)]
        every = array_tasks(place, job_id) if tasks and "_" not in job_id else []
        if every and attempt is not None:
            raise JobNotFound(
                f"job {job_id} is an array job: --attempt takes one task, {every[0].job_id} say"
            )
        if every:
            return every
    raise JobNotFound(f"no log directory of job {job_id}: looked {'; '.join(looked)}")


def resolve_all(ref: str | None, base: Path | None, attempt: int | None = None) -> tuple[list[Job], bool]:
    """([the job ``ref`` names], False) as resolve finds it, or (every task of it, True) when ``ref`` is an
    array job's id: one task or many."""
    if ref is not None and protocol.JOB_ID.fullmatch(ref):
        found = find_all_by_id(ref, base, attempt)
        return found, "_" not in ref and "_" in found[0].job_id
    return [resolve(ref, base, attempt)], False


def resolve(ref: str | None, base: Path | None, attempt: int | None = None, index: Path | None = None) -> Job:
    """The job ``ref`` names: a LOG_DIR; a job id (its newest attempt, or ``attempt``), looked for under
    ``base`` (an explicit --log-dir, or None), the current directory, the job ``index`` (default: this
    user's) and Slurm's record; or, for None, the newest job under ``base`` (default: the current
    directory): its ``latest`` link, else the most recently changed log directory."""
    if ref is None:
        where = (base if base is not None else Path()).absolute()
        latest = where / protocol.LATEST
        if latest.is_dir():
            newest = Job.from_dir(latest.resolve())
        else:
            dirs = [p for p in where.glob(f"*{protocol.LOG_DIR_SUFFIX}") if _ATTEMPT_DIR.fullmatch(p.name)]
            if not dirs:
                raise JobNotFound(f"no raysub job under {where}; give a job id or a log directory")
            newest = Job.from_dir(max(dirs, key=lambda p: p.stat().st_mtime))
        return _pick(attempts(where, newest.job_id), attempt, where)
    if not protocol.JOB_ID.fullmatch(ref):
        job = Job.from_dir(Path(ref))
        if attempt is None:
            return job
        return _pick(attempts(job.logs.path.parent, job.job_id), attempt, job.logs.path.parent)
    return find_by_id(ref, base, attempt, index)
