"""The one place that asks Slurm about jobs (squeue, scontrol, sacct) and builds srun command lines."""

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

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


# One "Key=Value" pair of `scontrol -o show job`; a value runs up to the next " Key=" (paths may hold spaces).
_PAIR_START = re.compile(r" (?=[A-Za-z][\w:/]*=)")


def _scontrol_fields(line: str) -> dict[str, str]:
    pairs = (pair.partition("=") for pair in _PAIR_START.split(line.strip()))
    return {key: value for key, sep, value in pairs if sep}


@dataclass(frozen=True)
class JobRecord:
    """The directories Slurm has on record for a job; ``answered`` when a tool answered at all (a job it
    does not know included), ``errors`` the tools that could not be asked and why."""

    dirs: list[Path]
    answered: bool
    errors: list[str]


def _ask(errors: list[str], *args: str) -> subprocess.CompletedProcess[str] | None:
    """Run a Slurm tool; None (and why, in ``errors``) when it is missing, hangs or cannot start."""
    if shutil.which(args[0]) is None:
        errors.append(f"{args[0]} is not installed here")
        return None
    try:
        return subprocess.run(
            args, capture_output=True, text=True, check=False, timeout=TIMEOUT, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        errors.append(f"{args[0]}: {error}")
        return None


def _complaint(tool: str, stderr: str) -> str:
    """``tool``'s last line on stderr, with its name in front once."""
    lines = stderr.strip().splitlines()
    return f"{tool}: {(lines[-1] if lines else 'failed').removeprefix(f'{tool}: ')}"


def job_dirs(job_id: str) -> JobRecord:
    """Where a job's LOG_DIRs may be, from Slurm's record: `scontrol show job` (while slurmctld still holds
    the job) gives its WorkDir and the directory of its StdOut, then sacct its WorkDir (newest job of that
    id first)."""
    found: list[Path] = []
    errors: list[str] = []
    answered = False
    shown = _ask(errors, "scontrol", "-o", "show", "job", job_id)
    if shown is not None and shown.returncode == 0 and shown.stdout.strip():
        answered = True
        fields = _scontrol_fields(shown.stdout.splitlines()[0])
        work_dir, stdout = fields.get("WorkDir", ""), fields.get("StdOut", "")
        found += [Path(work_dir)] if work_dir.startswith("/") else []
        found += [Path(stdout).parent] if stdout.startswith("/") else []
    elif shown is not None and "Invalid job id" in shown.stderr:
        answered = True
    elif shown is not None:
        errors.append(_complaint("scontrol", shown.stderr))
    accounted = _ask(errors, "sacct", "-n", "-X", "-P", "-j", job_id, "-o", "WorkDir")
    if accounted is not None and accounted.returncode == 0:
        answered = True
        found += [Path(line) for line in reversed(accounted.stdout.splitlines()) if line.startswith("/")]
    elif accounted is not None:
        errors.append(_complaint("sacct", accounted.stderr))
    return JobRecord(list(dict.fromkeys(found)), answered, errors)


# How raysub attach and attach.sh reach a node of a running job: a step beside the others, sharing their
# resources, with a terminal; and what it runs when given no command.
ATTACH_OPTIONS = ("--overlap", "--nodes=1", "--ntasks=1", "--pty")
ATTACH_SHELL = ("bash", "-l")


def attach_command(job_id: str, node: str, container: list[str], command: list[str]) -> list[str]:
    """srun onto ``node`` of a running job, in the container ``container`` describes, if any."""
    return [
        "srun",
        *ATTACH_OPTIONS,
        f"--jobid={job_id}",
        f"--nodelist={node}",
        *container,
        *(command or ATTACH_SHELL),
    ]
