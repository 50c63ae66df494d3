"""The one place that asks Slurm about jobs (squeue, scontrol, sacct), submits and cancels them (sbatch,
scancel) and builds srun command lines."""

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 30


@dataclass(frozen=True)
class SlurmState:
    """What Slurm says of a job: its state (None when no tool knows it) and, once over, its exit code;
    while it waits in the queue, squeue's reason code (Priority, Resources, ...) and the start time Slurm
    expects (None while it has none)."""

    state: str | None
    exit_code: int | None = None
    source: str = ""
    reason: str | None = None
    expected_start: str | None = None

    @property
    def pending(self) -> str | None:
        """Why the job waits, in words, with the code and the expected start; None unless it waits."""
        if self.state != "PENDING":
            return None
        code = self.reason or "None"
        said = f"{PENDING_REASONS[code]} ({code})" if code in PENDING_REASONS else f"reason {code}"
        return f"{said}; expected to start {self.expected_start}" if self.expected_start else said


# squeue's reason codes that a job waiting in the queue most often shows, in words a user acts on. Each code
# is spelled as job_state_reason_string() in Slurm's src/common/slurm_protocol_defs.c returns it.
PENDING_REASONS = {
    "None": "not yet looked at by the scheduler",
    "Priority": "jobs of higher priority go first",
    "Resources": "waiting for nodes to become free",
    "Dependency": "waiting for the job it depends on",
    "DependencyNeverSatisfied": "its dependency can never be met; cancel it",
    "BeginTime": "not to start before its --begin time",
    "JobHeldUser": "held by you: scontrol release JOB",
    "JobHeldAdmin": "held by an administrator (or root)",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "PartitionNodeLimit": "asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its --time is above the partition's limit",
    "PartitionDown": "the partition is down",
    "Reservation": "waiting for its reservation to start",
    "QOSMaxGRESPerUser": "your QOS's limit on GPUs (GRES) in use at once is reached",
    "QOSMaxJobsPerUserLimit": "your QOS's limit on jobs running at once is reached",
    "QOSMaxNodePerUserLimit": "your QOS's limit on nodes in use at once is reached",
    "AssocGrpGRES": "your account's limit on GPUs (GRES) in use is reached",
    "AssocMaxJobsLimit": "your account's limit on jobs running at once is reached",
    "BadConstraints": "its constraints cannot be met by any node",
}


def _run(*args: str) -> str | None:
    if shutil.which(args[0]) is None:
        return None
    out = subprocess.run(
        args, capture_output=True, text=True, check=False, timeout=TIMEOUT, stdin=subprocess.DEVNULL
    )
    return out.stdout if out.returncode == 0 else None


def squeue_state(line: str) -> SlurmState:
    """A line of ``squeue -o %T|%r|%S``: the state, the reason and the expected start ("N/A" while
    Slurm has none)."""
    state, _, rest = line.strip().partition("|")
    reason, _, start = rest.partition("|")
    known = start if start and start not in ("N/A", "Unknown", "None") else None
    return SlurmState(state, None, "squeue", reason or None, known)


def queue_states(job_ids: list[str]) -> dict[str, SlurmState] | None:
    """Slurm's state of each of ``job_ids`` still in its queue, by one squeue call; a job it has let go is
    not there. None when squeue did not answer (it refuses a lone job id it no longer knows, too)."""
    if not job_ids:
        return {}
    queued = _run("squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%r|%S")
    if queued is None:
        return None
    states = {}
    for line in queued.splitlines():
        job_id, _, rest = line.strip().partition("|")
        if job_id in job_ids:
            states[job_id] = squeue_state(rest)
    return states


def job_state(job_id: str) -> SlurmState:
    """squeue first (one cheap call while the job is queued or running), then scontrol, then sacct."""
    queued = _run("squeue", "-h", "-j", job_id, "-o", "%T|%r|%S")
    if queued and queued.strip():
        return squeue_state(queued.splitlines()[0])
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


def _ask(
    errors: list[str],
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[str] | None:
    """Run a Slurm tool (in ``cwd``, with ``env``); None (and why, in ``errors``) when it is missing, hangs
    past ``timeout`` seconds or cannot start."""
    if shutil.which(args[0]) is None:
        errors.append(f"{args[0]} is not installed here")
        return None
    try:
        return subprocess.run(  # check=False, the default: the caller reads the return code
            args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=cwd, env=env
        )
    except subprocess.TimeoutExpired:
        errors.append(f"{args[0]}: no answer in {timeout:g} s (timed out)")
        return None
    except OSError as error:
        errors.append(f"{args[0]}: {error}")
        return None


def _complaint(tool: str, stderr: str) -> str:
    """``tool``'s last line on stderr, with its name in front once."""
    lines = stderr.strip().splitlines()
    return f"{tool}: {(lines[-1] if lines else 'failed').removeprefix(f'{tool}: ')}"


def _show_job(errors: list[str], job_id: str) -> tuple[bool, dict[str, str]]:
    """`scontrol show job`: whether it answered (a job it does not know included), and the job's fields
    (none when it does not know the job any more: slurmctld forgets a job MinJobAge after it ended)."""
    shown = _ask(errors, "scontrol", "-o", "show", "job", job_id)
    if shown is not None and shown.returncode == 0 and shown.stdout.strip():
        return True, _scontrol_fields(shown.stdout.splitlines()[0])
    if shown is not None and "Invalid job id" in shown.stderr:
        return True, {}
    if shown is not None:
        errors.append(_complaint("scontrol", shown.stderr))
    return False, {}


def job_dirs(job_id: str) -> JobRecord:
    """Where a job's LOG_DIRs may be, from Slurm's record: `scontrol show job` (while slurmctld still holds
    the job) gives its WorkDir and the directory of its StdOut, then sacct its WorkDir (newest job of that
    id first)."""
    found: list[Path] = []
    errors: list[str] = []
    answered, fields = _show_job(errors, job_id)
    work_dir, stdout = fields.get("WorkDir", ""), fields.get("StdOut", "")
    found += [Path(work_dir)] if work_dir.startswith("/") else []
    found += [Path(stdout).parent] if stdout.startswith("/") else []
    accounted = _ask(errors, "sacct", "-n", "-X", "-P", "-j", job_id, "-o", "WorkDir")
    if accounted is not None and accounted.returncode == 0:
        answered = True
        found += [Path(line) for line in reversed(accounted.stdout.splitlines()) if line.startswith("/")]
    elif accounted is not None:
        errors.append(_complaint("sacct", accounted.stderr))
    return JobRecord(list(dict.fromkeys(found)), answered, errors)


@dataclass(frozen=True)
class BatchScript:
    """A job's batch script and the directory it was submitted from, as `scontrol show job` has them
    (Command=, WorkDir=); ``script`` is None when slurmctld no longer knows the job or the job had no script
    file (sbatch --wrap, a script on stdin); ``errors`` the tools that could not be asked and why."""

    script: Path | None
    workdir: Path | None
    errors: list[str]


def batch_script(job_id: str) -> BatchScript:
    errors: list[str] = []
    _, fields = _show_job(errors, job_id)
    command, work_dir = fields.get("Command", ""), fields.get("WorkDir", "")
    return BatchScript(
        Path(command) if command.startswith("/") else None,
        Path(work_dir) if work_dir.startswith("/") else None,
        errors,
    )


# What a Slurm tool says when the controller is down, busy or slow (src/common/slurm_errno.c, sbatch.c), and
# _ask's own word for a tool that did not answer in time: the same call may work later.
TRANSIENT = (
    "timed out",
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Communication connection failure",
    "Slurm backup controller in standby mode",
    "Rate limit exceeded",
    "MaxJobCount limit reached",
    "temporarily unable",
    "Resource temporarily unavailable",
    "Zero Bytes were transmitted or received",
)


class SlurmError(RuntimeError):
    """A Slurm command that had to succeed did not; the message is the tool's complaint."""

    @property
    def transient(self) -> bool:
        """The controller was down, busy or slow: asking again later may work (and a submission may have
        gone through although sbatch did not say so)."""
        return any(word in str(self) for word in TRANSIENT)


def _must(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT
) -> str:
    """Run a Slurm tool that has to succeed: its stdout, or SlurmError with its complaint."""
    errors: list[str] = []
    done = _ask(errors, *args, cwd=cwd, env=env, timeout=timeout)
    if done is None:
        raise SlurmError(errors[0])
    if done.returncode != 0:
        raise SlurmError(_complaint(args[0], done.stderr))
    return done.stdout


def submit(
    script: Path,
    cwd: Path,
    export: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    timeout: float = TIMEOUT,
) -> str:
    """``sbatch --parsable [options] script`` run in ``cwd`` (the job's submit directory); the new job's id.

    ``export`` adds variables to the job's environment on top of all of sbatch's own
    (--export=ALL,NAME=value). A value with a comma, which --export cannot carry, is put in sbatch's
    environment and named alone (--export=ALL,NAME), which makes sbatch pass on its value from there.
    SlurmError when sbatch fails or gives no answer in ``timeout`` seconds: the job may be queued even
    then (see job_with_comment)."""
    export = export or {}
    names = [name if "," in value else f"{name}={value}" for name, value in export.items()]
    exports = [f"--export={','.join(['ALL', *names])}"] if names else []
    out = _must(
        "sbatch",
        "--parsable",
        *exports,
        *options,
        str(script),
        cwd=cwd,
        env={**os.environ, **export},
        timeout=timeout,
    )
    # --parsable prints "jobid" or "jobid;cluster".
    job_id = (out.strip().splitlines() or [""])[-1].partition(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch: printed no job id ({out.strip()!r})")
    return job_id


def job_with_comment(comment: str) -> str | None:
    """The id of this user's job whose comment is ``comment`` (the newest, should there be several), None
    when Slurm knows none; SlurmError when squeue cannot be asked. Jobs that ended recently count too:
    slurmctld keeps them MinJobAge seconds."""
    out = _must("squeue", "-h", "--states=all", f"--user={os.getuid()}", "--format=%i|%k")
    found = [line.partition("|")[0] for line in out.splitlines() if line.partition("|")[2].strip() == comment]
    return max(found, key=_job_order, default=None)


def _job_order(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0].split("+")[0]
    return (int(head) if head.isdigit() else -1, job_id)


def cancel(job_id: str) -> None:
    """``scancel JOB``; SlurmError when scancel fails."""
    _must("scancel", job_id)


# How raysub attach and attach.sh reach a node of a running job: a job step beside the others, sharing their
# resources, with a terminal; and what it runs when given no command.
ATTACH_OPTIONS = ("--overlap", "--nodes=1", "--ntasks=1", "--pty")
ATTACH_SHELL = ("bash", "-l")


def attach_command(job_id: str, node: str, options: list[str], command: list[str]) -> list[str]:
    """srun onto ``node`` of a running job, with ``options`` (its component, its container)."""
    return [
        "srun",
        *ATTACH_OPTIONS,
        f"--jobid={job_id}",
        f"--nodelist={node}",
        *options,
        *(command or ATTACH_SHELL),
    ]
