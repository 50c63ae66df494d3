"""The per-user job index (docs/protocol.md, "Finding a job"): one line per attempt, appended by the batch
script, read by raysub's commands to find a job from any directory. Its reader and its writer.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from raysub.protocol import JOB_ID, JOB_INDEX, JOB_INDEX_DIR, STATE_HOME_DEFAULT


@dataclass(frozen=True)
class IndexEntry:
    """One line of the job index: attempt ``requeues`` of job ``job_id`` (0: the first, k: after the k-th
    requeue), its LOG_DIR, when it started."""

    job_id: str
    requeues: int
    log_dir: Path
    started: int  # epoch seconds

    def line(self) -> bytes:
        """The line as the batch script writes it (its printf and this must agree; a unit test checks)."""
        fields = [self.job_id, str(self.requeues), os.fsdecode(self.log_dir), str(self.started)]
        return os.fsencode("\t".join(fields) + "\n")


def job_index_path(environ: Mapping[str, str] | None = None) -> Path:
    """The job index of the user whose environment ``environ`` is (default: this process's)."""
    env = os.environ if environ is None else environ
    state = Path(env.get("XDG_STATE_HOME", ""))
    if not state.is_absolute():  # unset, empty or relative: the XDG spec says to ignore it
        # Without HOME (sbatch --export=NONE) the passwd entry, like the batch script's getent.
        state = Path(env.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir) / STATE_HOME_DEFAULT
    return state / JOB_INDEX_DIR / JOB_INDEX


def read_job_index(path: Path) -> list[IndexEntry]:
    """Every well-formed line of the job index, oldest first ([] when there is none). A line that is not
    four fields of the right kinds, or not yet ended by a newline, is skipped: appends from other jobs
    never make the index unreadable. A LOG_DIR may hold tabs: it is everything between the second field
    and the last."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    for raw in data.split(b"\n")[:-1]:  # after the last newline: a line still being written
        fields = raw.split(b"\t")
        if len(fields) < 4:
            continue
        job_id, requeues, started, log_dir = fields[0], fields[1], fields[-1], b"\t".join(fields[2:-1])
        if (
            JOB_ID.fullmatch(job_id.decode("ascii", "replace"))
            and requeues.isdigit()
            and started.isdigit()
            and log_dir.startswith(b"/")
        ):
            path = Path(os.fsdecode(log_dir))
            entries.append(IndexEntry(job_id.decode(), int(requeues), path, int(started)))
    return entries


def append_job_index(path: Path, entry: IndexEntry) -> None:
    """Append ``entry`` as the batch script does: the directory 0700, one write of the whole line."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, entry.line())
    finally:
        os.close(fd)
