"""Where a run resumes from: the checks a checkpoint directory passes on the submit host.

A checkpoint directory that does not exist makes every attempt start from scratch, silently, and one
the login node cannot see looks the same from here. Both raysub render and raysub watch refuse it, and
the job itself refuses it again on the head (raysub/job/templates/head.sh.j2, find_checkpoint), where it
matters.
"""

import socket
from pathlib import Path

from raysub.spec import JobSpec, SpecError


def checkpoint_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a run's checkpoint directory, or None when it can."""
    try:
        if path.is_dir():
            return None
        if path.exists() or path.is_symlink():
            return f"{path} is not a directory"
    except OSError as error:  # a parent this user may not search
        return f"cannot look at {path}: {error.strerror}"
    return (
        f"{path} does not exist on {socket.gethostname()}: check the path; if it is on a file system only "
        "the compute nodes mount, or the run has not made it yet, pass --create-checkpoint-dir"
    )


def refuse_missing_checkpoint_dir(spec: JobSpec) -> None:
    """SpecError when the job's --checkpoint-dir cannot be one here and the job may not make it
    (--create-checkpoint-dir): raysub render refuses what the job's head would refuse anyway."""
    if not spec.checkpoint_dir or spec.create_checkpoint_dir:
        return
    problem = checkpoint_dir_problem(Path(spec.checkpoint_dir))
    if problem is not None:
        raise SpecError("--checkpoint-dir", problem)
