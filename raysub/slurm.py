"""The one place that asks Slurm about jobs (squeue, scontrol, sacct) and builds srun command lines."""

import re
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT = 30


@dataclass(frozen=True)
class SlurmState:
    """What Slurm says of a job: its state (None when no tool knows it) and, once over, its exit code."""

    state: str | None
    exit_code: int | None = None
    source: str = ""


def _run(*args: str) -> str | None:
    if shutil.which(args[0]) is None:
        return None
    out = subprocess.run(
        args, capture_output=True, text=True, check=False, timeout=TIMEOUT, stdin=subprocess.DEVNULL
    )
    return out.stdout if out.returncode == 0 else None


def job_state(job_id: str) -> SlurmState:
    """squeue first (one cheap call while the job is queued or running), then scontrol, then sacct."""
    queued = _run("squeue", "-h", "-j", job_id, "-o", "%T")
    if queued and queued.strip():
        return SlurmState(queued.split()[0], None, "squeue")
    shown = _run("scontrol", "-o", "show", "job", job_id)
    if shown:
        state = re.search(r"\bJobState=(\S+)", shown)
        code = re.search(r"\bExitCode=(\d+):\d+", shown)
        if state:
            return SlurmState(state[1], int(code[1]) if code else None, "scontrol")
    accounted = _run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode")
    if accounted and accounted.strip():
        state_text, _, code_text = accounted.splitlines()[0].partition("|")
        return SlurmState(state_text.split()[0], int(code_text.split(":")[0] or 0), "sacct")
    return SlurmState(None)


def attach_command(job_id: str, node: str, container: list[str], command: list[str]) -> list[str]:
    """srun onto ``node`` of a running job, sharing its resources, with a terminal."""
    return [
        "srun",
        "--overlap",
        f"--jobid={job_id}",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--pty",
        *container,
        *(command or ["bash", "-l"]),
    ]
