"""LOG_DIR/grow/<id>.job: a job's grow jobs, one file each, written as each is submitted (so that one still in
the queue is known too) by raysub grow or by the autoscaler's node provider (--autoscale). One line:
'<nodes> <by> <submitted, epoch seconds>'.

LOG_DIR/grow/<id>.leave: grow job <id>'s nodes are to leave Ray through Ray's drain, by a deadline. One line:
'<deadline, epoch seconds> <why>'. Written by raysub shrink, and by the grow job's batch script (bash, on
Slurm's warning signal: templates/grow.sub.j2); read by the worker script on each of its nodes (leave_ray),
which hands the deadline and reason to the node program leave.py."""

from __future__ import annotations

import os
import re
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from raysub.protocol import (
    GROW_DIR,
    GROW_LEAVE,
    PHASE_GROW_SUBMITTED,
    STEP_ENV,
    append_timeline,
    log_file_mode,
    write_atomic,
)

MARK = ".job"
# The line of LOG_DIR/step_env (the batch script's record_step_env, bash's declare -p) that names the job's
# --env values, which step_env leaves out: a grow job must bring them in its own environment.
_ENV_NAMES = re.compile(r"^declare -a grown_env_names=\((.*)\)$", re.MULTILINE)
By = Literal["grow", "autoscale"]


@dataclass(frozen=True)
class GrowMark:
    job_id: str
    nodes: int
    by: By  # raysub grow, or the autoscaler
    submitted: float


def grow_directory(log_dir: Path) -> Path:
    """LOG_DIR/GROW_DIR, made with LOG_DIR's own mode (whatever the umask or a default ACL) when missing;
    PermissionError when what is there is not the owner's own directory."""
    directory = log_dir / GROW_DIR
    mode = stat.S_IMODE(log_dir.stat().st_mode)
    try:
        directory.mkdir(mode=mode)
        directory.chmod(mode)  # mkdir's mode is cut by the umask; a default ACL is cut by chmod
    except FileExistsError:
        if directory.is_symlink() or not directory.is_dir() or directory.stat().st_uid != os.getuid():
            raise PermissionError(f"{directory} is not this job's own directory") from None
    return directory


def write(log_dir: Path, mark: GrowMark) -> None:
    """``mark`` into LOG_DIR/grow/<its job id>.job, with the mode of LOG_DIR's logs, and its submission on
    the job's timeline."""
    text = f"{mark.nodes} {mark.by} {mark.submitted:.0f}\n"
    write_atomic(grow_directory(log_dir) / f"{mark.job_id}{MARK}", text, log_file_mode(log_dir))
    detail = f"{mark.job_id}: {mark.nodes} node(s), by {mark.by}"
    append_timeline(log_dir, PHASE_GROW_SUBMITTED, socket.gethostname(), detail)


def _read(path: Path) -> GrowMark | None:
    job_id = path.name.removesuffix(MARK)
    try:
        nodes, by, submitted = path.read_text(errors="replace").split()
        mark = GrowMark(job_id, int(nodes), "autoscale" if by == "autoscale" else "grow", float(submitted))
    except (OSError, ValueError):
        return None
    return mark if job_id.isdigit() and mark.nodes > 0 else None


def read_all(log_dir: Path) -> list[GrowMark]:
    """Every grow job of the job whose LOG_DIR is ``log_dir``, oldest first; a file that is not one is
    passed over."""
    try:
        paths = list((log_dir / GROW_DIR).glob(f"*{MARK}"))
    except OSError:
        return []
    marks = [mark for mark in map(_read, paths) if mark is not None]
    return sorted(marks, key=lambda mark: int(mark.job_id))


def env_names(log_dir: Path) -> list[str]:
    """The names of the job's --env values, from its LOG_DIR/step_env; none for a file without the line."""
    try:
        found = _ENV_NAMES.search((log_dir / STEP_ENV).read_text(errors="replace"))
    except OSError:
        return []
    return re.findall(r'\[\d+\]="(\w+)"', found.group(1)) if found else []


@dataclass(frozen=True)
class Leave:
    """Why a grow job's nodes leave Ray, and by when (epoch seconds) each must be gone."""

    deadline: float
    why: str


def leave_path(log_dir: Path, job_id: str) -> Path:
    return log_dir / GROW_DIR / f"{job_id}{GROW_LEAVE}"


def write_leave(log_dir: Path, job_id: str, leave: Leave) -> None:
    """Tells grow job ``job_id``'s nodes to leave (the first word wins: a later call changes nothing)."""
    path = leave_path(log_dir, job_id)
    if read_leave(path) is None:
        write_atomic(path, f"{leave.deadline:.0f} {leave.why}\n", log_file_mode(log_dir))


def read_leave(path: Path) -> Leave | None:
    """The leave file at ``path``; None when there is none, or not a whole one."""
    try:
        deadline, _, why = path.read_text(errors="replace").strip().partition(" ")
        return Leave(float(int(deadline)), why.strip() or "no reason given")
    except (OSError, ValueError):
        return None


# The first line a grow node's worker script logs (templates/lib.sh.j2's log) in its grow job's
# LOG_DIR/grow/<id>/worker-<k>.log: "<time> raysub worker <k> on <host>: ...".
_NODE_LOG_HOST = re.compile(r"^\S+ raysub worker \S+ on (\S+): ", re.MULTILINE)


def hosts(log_dir: Path, job_id: str) -> list[str]:
    """The nodes of grow job ``job_id`` that have logged, in task order."""
    found = []
    for log in sorted((log_dir / GROW_DIR / job_id).glob("worker-*.log")):
        try:
            with log.open(errors="replace") as text:
                named = _NODE_LOG_HOST.search(text.read(4096))
        except OSError:
            continue
        if named:
            found.append(named[1])
    return found


def all_hosts(log_dir: Path) -> set[str]:
    """Every node any grow job of the job has had."""
    return {host for mark in read_all(log_dir) for host in hosts(log_dir, mark.job_id)}
