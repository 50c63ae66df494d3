"""raysub watch: keep a job script's run going through failures, time limits, preemption and stalls.

A run submits the script (or adopts a job already submitted), asks Slurm about the job every interval, and
when the job ends badly waits a backoff and submits the script again, with the latest checkpoint in
RAYSUB_RESUME_FROM, until a job succeeds or a restart is not worth it. Three parts: :class:`Backoff` (how
long to wait), :func:`decide` (what to do: a pure function of the run's state and what Slurm says) and
:class:`Watcher` (the I/O: Slurm through raysub.slurm, the state file, the decision log). :func:`run` adds
the lock and resuming. docs/watch.md describes the run for users.
"""

import importlib
import json
import os
import random
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import filelock

from raysub import jobs, protocol, slurm
from raysub.jobs import Job
from raysub.status import FINAL_STATES, JobWatch, first_times

# The variable a resubmitted job finds its checkpoint in: the driver reads it.
STATE_VERSION = 1
# Slurm states after which a job is over: raysub status's, and DEADLINE (sbatch --deadline passed).
OVER = FINAL_STATES | {"DEADLINE"}
# Over for a reason outside the driver: the same script will likely get further next time.
RETRY = frozenset({"TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
# Over because the job failed: restarted unless the failure looks like one that will happen again.
FAILED = frozenset({"FAILED", "OUT_OF_MEMORY"})
# The outcome recorded for a job that watch cancelled because it stalled.
STALLED = "STALLED"
# The outcome recorded for a job Slurm stopped knowing before watch saw it end.
LOST = "LOST"


class WatchError(Exception):
    """A run that cannot start or go on; the message says what to do."""


class Backoff:
    """How long to wait before a restart: exponential, with equal jitter, inside [base, maximum].

    Before restart ``attempt`` (0 for the first) the ceiling is ``base * 2 ** (attempt + 1)``, at most
    ``maximum``; the delay is drawn uniformly from the upper half of the ceiling and is never below
    ``base``. So the first restart waits base to 2·base, the second 2·base to 4·base, and so on up to
    maximum/2 to maximum. Half of each delay is fixed (a restart never follows a failure at once) and half
    random (watchers whose jobs a broken node took down together do not resubmit together).
    """

    def __init__(self, base: float, maximum: float, rng: random.Random | None = None) -> None:
        if not 0 <= base <= maximum:
            raise ValueError(f"the backoff base ({base:g} s) must be from 0 to the maximum ({maximum:g} s)")
        self.base = base
        self.maximum = maximum
        self.rng = rng or random.Random()  # noqa: S311 (jitter, not cryptography)

    def delay(self, attempt: int) -> float:
        # Past 2**64 every ceiling is the maximum; the bound keeps the float finite.
        ceiling = min(self.maximum, self.base * 2.0 ** (min(max(attempt, 0), 64) + 1))
        return self.rng.uniform(max(self.base, ceiling / 2), ceiling)


@dataclass(frozen=True)
class Rules:
    """When a run stops short of success."""

    max_restarts: int = 5
    no_retry_exit_codes: frozenset[int] = frozenset()
    # A driver that fails this soon after it started failed "quickly"; two such jobs in a row end the run.
    quick_failure: float = 60.0
    # A job Slurm has not known for this long (no squeue, scontrol or sacct answer) ends the run.
    lost_after: float = 600.0


class Next(StrEnum):
    """What the watcher does at ``next_action_at``."""

    SUBMIT = "submit"  # submit the job script
    POLL = "poll"  # ask Slurm about job_id
    NONE = "none"  # nothing: the run is over (see ``stopped``)


@dataclass
class Attempt:
    """One job of the run, as the history keeps it; times are epoch seconds."""

    job_id: str
    submitted_at: float | None = None  # None for a job watch adopted
    resume_from: str | None = None
    # The driver's start from its LOG_DIR's timeline.jsonl; for a job without a LOG_DIR that watch finds,
    # when watch first saw it RUNNING.
    started_at: float | None = None
    ended_at: float | None = None  # when watch saw it over
    outcome: str | None = None  # Slurm's final state, STALLED or LOST; None while the job is on
    exit_code: int | None = None
    quick: bool = False  # its driver failed within Rules.quick_failure of starting


@dataclass
class WatchState:
    """The run, as the state file keeps it: enough for a new watcher to go on where the last one was."""

    script: str
    workdir: str  # where sbatch runs: the jobs' submit directory
    job_id: str | None = None  # the job being watched; None while none is
    restarts: int = 0  # submissions after the first (failed ones included)
    next_action: Next = Next.SUBMIT
    next_action_at: float | None = None
    stopped: str | None = None  # why the run is over
    succeeded: bool = False
    unknown_since: float | None = None  # since when Slurm has not known job_id
    watcher: str = ""  # pid@host of the watcher that wrote the file last
    history: list[Attempt] = field(default_factory=list)

    @property
    def current(self) -> Attempt | None:
        """The history's entry of the job being watched."""
        last = self.history[-1] if self.history else None
        return last if last is not None and last.job_id == self.job_id else None

    @property
    def previous(self) -> Attempt | None:
        """The job before the one being watched."""
        return self.history[-2] if self.current is not None and len(self.history) > 1 else None

    def to_json(self) -> str:
        return json.dumps({"version": STATE_VERSION, **asdict(self)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "WatchState":
        """The state ``to_json`` wrote; ValueError when ``text`` is not one."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.pop("version", None) != STATE_VERSION:
            raise ValueError(f"not a raysub watch state of version {STATE_VERSION}")
        try:
            history = [Attempt(**entry) for entry in data.pop("history", [])]
            state = cls(**data, history=history)
            state.next_action = Next(state.next_action)
        except TypeError as error:
            raise ValueError(str(error)) from error
        return state

    def adopt(self, job_id: str, now: float) -> None:
        """Watch ``job_id`` (a job this run did not submit) from now on."""
        self.job_id = job_id
        self.history.append(Attempt(job_id))
        self.next_action, self.next_action_at = Next.POLL, now


class Do(StrEnum):
    WAIT = "wait"  # ask Slurm again after the interval
    RESTART = "restart"  # back off, then submit the script again
    STOP = "stop"  # the run is over


@dataclass(frozen=True)
class Action:
    """What :func:`decide` says to do about the current job, and why."""

    do: Do
    reason: str
    cancel: bool = False  # scancel the job first (it stalled)
    outcome: str | None = None  # how the job ended, for the history; None while it is on
    succeeded: bool = False
    quick: bool = False


def _restart(state: WatchState, rules: Rules, action: Action) -> Action:
    """``action`` (a restart), or a stop when no restarts are left."""
    if state.restarts >= rules.max_restarts:
        reason = f"{action.reason}; no restarts left (--max-restarts {rules.max_restarts})"
        return replace(action, do=Do.STOP, reason=reason)
    return replace(action, reason=f"{action.reason}; restart {state.restarts + 1} of {rules.max_restarts}")


def _failed(state: WatchState, slurm_state: str, exit_code: int | None, quick: bool, rules: Rules) -> Action:
    code = f" with exit code {exit_code}" if exit_code is not None else ""
    what = f"job {state.job_id} {slurm_state}{code}"
    if exit_code is not None and exit_code in rules.no_retry_exit_codes:
        return Action(Do.STOP, f"{what}, which --no-retry-exit-codes lists", outcome=slurm_state, quick=quick)
    previous = state.previous
    if quick and previous is not None and previous.quick:
        reason = f"{what} within {rules.quick_failure:g} s of its driver's start, as did the job before"
        return Action(Do.STOP, f"{reason}: it will fail again", outcome=slurm_state, quick=quick)
    return _restart(state, rules, Action(Do.RESTART, what, outcome=slurm_state, quick=quick))


def decide(
    state: WatchState,
    slurm_state: str | None,
    exit_code: int | None,
    started: float | None,
    now: float,
    *,
    rules: Rules | None = None,
    stalled: bool = False,
    ended: float | None = None,
) -> Action:
    """What to do about the job the run is watching (``state.job_id``), given Slurm's state of it (None
    when Slurm does not know it), its exit code (the driver's when known), when its driver started and, if
    known, ``ended``, when the driver ended (default ``now``); ``stalled`` when the stall check says so.
    Pure: the caller does what the action says."""
    rules = rules or Rules()
    job = f"job {state.job_id}"
    if slurm_state is None:
        since = now if state.unknown_since is None else state.unknown_since
        if now - since >= rules.lost_after:
            reason = (
                f"Slurm has not known {job} for {now - since:.0f} s: check it, then run raysub watch again"
            )
            return Action(Do.STOP, reason, outcome=LOST)
        return Action(Do.WAIT, f"Slurm does not know {job}")
    if slurm_state not in OVER:
        if stalled:
            stall = f"{job} stalled ({slurm_state}): cancelling it"
            return _restart(state, rules, Action(Do.RESTART, stall, cancel=True, outcome=STALLED))
        return Action(Do.WAIT, f"{job} is {slurm_state}")
    if slurm_state == "COMPLETED" and not exit_code:
        return Action(Do.STOP, f"{job} completed", outcome=slurm_state, succeeded=True)
    if slurm_state in RETRY:
        return _restart(state, rules, Action(Do.RESTART, f"{job} ended {slurm_state}", outcome=slurm_state))
    if slurm_state in FAILED or slurm_state == "COMPLETED":
        quick = started is not None and (now if ended is None else ended) - started < rules.quick_failure
        return _failed(state, slurm_state, exit_code, quick, rules)
    reason = f"{job} ended {slurm_state}, which raysub watch does not restart"
    return Action(Do.STOP, reason, outcome=slurm_state)


def never_stalled(job: Job) -> bool:
    """The stall check a watcher uses unless given one: no job ever counts as stalled. raysub health's
    stall check plugs in here, as ``Settings(stalled=...)``."""
    return False


def no_checkpoint() -> Path | None:
    """The checkpoint finder a watcher uses unless given one: there never is a checkpoint."""
    return None


def latest_in(directory: Path) -> Callable[[], Path | None]:
    """A checkpoint finder: the absolute path of the latest checkpoint in ``directory``, by
    raysub.node.checkpoints.latest_checkpoint (imported when first asked)."""

    def latest() -> Path | None:
        checkpoints = importlib.import_module("raysub.node.checkpoints")
        found = checkpoints.latest_checkpoint(directory)
        return None if found is None else Path(found.path).absolute()

    return latest


def _silent(line: str) -> None:
    pass


@dataclass(frozen=True)
class Settings:
    """How a run goes (its rules, backoff and interval) and what it calls outside: the checkpoint finder,
    the stall check, the clock, sleep and where each logged line is printed. Tests inject fakes."""

    rules: Rules = field(default_factory=Rules)
    backoff: Backoff = field(default_factory=lambda: Backoff(60, 1800))
    interval: float = 60.0  # seconds between two questions to Slurm
    latest: Callable[[], Path | None] = no_checkpoint
    stalled: Callable[[Job], bool] = never_stalled
    # Epoch seconds, not a monotonic clock: the state file's times outlive the watcher's process.
    clock: Callable[[], float] = field(default_factory=lambda: time.time)
    sleep: Callable[[float], None] = field(default_factory=lambda: time.sleep)
    echo: Callable[[str], None] = _silent


def log_dir_of(job_id: str, base: Path, index: Path | None = None) -> Job | None:
    """The newest attempt of ``job_id`` under ``base``, else where the job index saw it; None when neither
    has it (yet). Never asks Slurm: watch asks Slurm only for the job's state."""
    try:
        found = jobs.attempts(base, job_id)
        if not found:
            entries = protocol.read_job_index(index or protocol.job_index_path())
            place = jobs.indexed_dir(entries, job_id)
            found = jobs.attempts(place.parent, job_id) if place is not None else []
    except (OSError, jobs.JobNotFound):
        return None
    return found[-1] if found else None


@dataclass(frozen=True)
class WatchFiles:
    """The files of one run, side by side: <base>/<script name>.watch.{json,lock,log}."""

    state: Path
    lock: Path
    log: Path

    @classmethod
    def beside(cls, base: Path, script: Path) -> "WatchFiles":
        stem = base / f"{script.name}.watch"
        return cls(Path(f"{stem}.json"), Path(f"{stem}.lock"), Path(f"{stem}.log"))

    def load(self) -> WatchState | None:
        """The run the state file holds; None when there is none."""
        try:
            return WatchState.from_json(self.state.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise WatchError(f"{self.state} is not a raysub watch state ({error}); move it away") from error


def stamp(when: float) -> str:
    """An epoch time as the log writes it: local ISO 8601 with the UTC offset."""
    return datetime.fromtimestamp(when).astimezone().isoformat(timespec="seconds")


class Watcher:
    """Carries out a run: submits, polls, cancels and resubmits as :func:`decide` says, saving the state
    after every step and writing every decision to the log file and ``settings.echo``. Slurm is asked at
    most once per ``settings.interval`` (one :class:`raysub.status.JobWatch` per job)."""

    def __init__(self, files: WatchFiles, state: WatchState, settings: Settings, base: Path) -> None:
        self.files, self.state, self.base = files, state, base
        self.settings, self.rules, self.clock = settings, settings.rules, settings.clock
        self._watch: JobWatch | None = None
        self._said = ""

    def note(self, message: str) -> None:
        """One decision, with its time, into the log file and to ``echo``."""
        line = f"{stamp(self.clock())} {message}"
        with self.files.log.open("a") as log:
            log.write(line + "\n")
        self.settings.echo(line)

    def save(self) -> None:
        self.state.watcher = f"{os.getpid()}@{socket.gethostname()}"
        protocol.write_atomic(self.files.state, self.state.to_json())

    def run(self) -> WatchState:
        """Go on until the run is over; the final state."""
        while self.state.next_action is not Next.NONE:
            wait = (self.state.next_action_at or 0) - self.clock()
            if wait > 0:
                self.settings.sleep(wait)
            if self.state.next_action is Next.SUBMIT:
                self.submit()
            else:
                self.poll()
            self.save()
        return self.state

    def _next(self, action: Next, at: float | None) -> None:
        self.state.next_action, self.state.next_action_at = action, at

    def _stop(self, reason: str, succeeded: bool) -> None:
        self.state.stopped, self.state.succeeded = reason, succeeded
        self._next(Next.NONE, None)
        self.note("the run succeeded" if succeeded else "the run gave up")

    def _back_off(self, now: float) -> None:
        delay = self.settings.backoff.delay(self.state.restarts)
        self._next(Next.SUBMIT, now + delay)
        self.note(f"submitting {self.state.script} again in {delay:.0f} s, at {stamp(now + delay)}")

    def _checkpoint(self) -> Path | None:
        try:
            found = self.settings.latest()
        except Exception as error:  # a watcher that runs for days outlives a bad checkpoint directory
            self.note(f"no checkpoint: finding the latest one failed ({error!r})")
            return None
        if found is None:
            self.note("no checkpoint yet: the job starts from the beginning")
        return found

    def submit(self) -> None:
        """Submit the script: the run's first job as it is, a restart with the latest checkpoint."""
        state, first = self.state, not self.state.history
        resume = None if first else self._checkpoint()
        export = {protocol.RESUME_FROM: str(resume)} if resume is not None else {}
        if not first:
            state.restarts += 1
        try:
            job_id = slurm.submit(Path(state.script), Path(state.workdir), export)
        except slurm.SlurmError as error:
            if first:
                raise WatchError(f"could not submit {state.script}: {error}") from error
            action = _restart(state, self.rules, Action(Do.RESTART, f"restart {state.restarts}: {error}"))
            self.note(action.reason)
            if action.do is Do.STOP:
                self._stop(action.reason, False)
            else:
                self._back_off(self.clock())
            return
        now = self.clock()
        state.history.append(Attempt(job_id, now, None if resume is None else str(resume)))
        state.job_id = job_id
        self._next(Next.POLL, now + self.settings.interval)
        with_resume = f" with {protocol.RESUME_FROM}={resume}" if resume is not None else ""
        restart = f" (restart {state.restarts} of {self.rules.max_restarts})" if not first else ""
        self.note(f"submitted {state.script} as job {job_id}{with_resume}{restart}")

    def _slurm_state(self, job_id: str) -> slurm.SlurmState:
        if self._watch is None or self._watch.job.job_id != job_id:
            placeholder = Job(job_id, 0, protocol.LogDir(self.base))
            self._watch = JobWatch(
                placeholder, self.settings.interval, self.clock, lambda asked: slurm.job_state(asked)
            )
        return self._watch.slurm_state()

    def _is_stalled(self, job: Job) -> bool:
        try:
            return self.settings.stalled(job)
        except Exception as error:  # a broken stall check must not end a run that is fine
            self.note(f"the stall check failed on job {job.job_id} ({error!r}); taking it as not stalled")
            return False

    def poll(self) -> None:
        """Ask Slurm about the current job once and do what :func:`decide` says."""
        state, now = self.state, self.clock()
        current = state.current
        if state.job_id is None or current is None:
            raise WatchError(f"{self.files.state} says to poll, but names no job; move it away")
        answer = self._slurm_state(state.job_id)
        if answer.state is None:
            state.unknown_since = now if state.unknown_since is None else state.unknown_since
        else:
            state.unknown_since = None
        found = log_dir_of(state.job_id, self.base)
        times = first_times(found.logs.timeline()) if found is not None else {}
        if found is not None:
            current.started_at = times.get(protocol.PHASE_DRIVER_START)
        elif answer.state == "RUNNING" and current.started_at is None:
            current.started_at = now
        driver_exit = found.logs.driver_exit_code() if found is not None else None
        exit_code = answer.exit_code if driver_exit is None else driver_exit
        stalled = answer.state == "RUNNING" and found is not None and self._is_stalled(found)
        action = decide(
            state,
            answer.state,
            exit_code,
            current.started_at,
            now,
            rules=self.rules,
            stalled=stalled,
            ended=times.get(protocol.PHASE_DRIVER_END),
        )
        self._apply(action, current, exit_code, now)

    def _apply(self, action: Action, current: Attempt, exit_code: int | None, now: float) -> None:
        if action.do is Do.WAIT:
            if action.reason != self._said:
                self._said = action.reason
                self.note(action.reason)
            self._next(Next.POLL, now + self.settings.interval)
            return
        self.note(action.reason)
        if action.cancel:
            try:
                slurm.cancel(current.job_id)
            except slurm.SlurmError as error:
                self.note(f"could not cancel job {current.job_id} ({error}); asking Slurm again")
                self._next(Next.POLL, now + self.settings.interval)
                return
            self.note(f"cancelled job {current.job_id}")
        current.outcome, current.exit_code, current.ended_at = action.outcome, exit_code, now
        current.quick = action.quick
        self.state.job_id = None
        self._said = ""
        if action.do is Do.STOP:
            self._stop(action.reason, action.succeeded)
        else:
            self._back_off(now)


@dataclass(frozen=True)
class Target:
    """What to watch: a job script, the directory its jobs are submitted from, and a job to adopt."""

    script: Path
    workdir: Path
    job_id: str | None = None


def find_target(ref: str) -> Target:
    """JOB_SCRIPT (submitted from the current directory) or JOB, a job id whose script and submit
    directory Slurm still has on record (`scontrol show job`)."""
    path = Path(ref)
    if path.is_file():
        return Target(path.resolve(), Path.cwd())
    if not ref.isdigit():
        raise WatchError(f"{ref}: no such job script, and not a job id")
    record = slurm.batch_script(ref)
    if record.script is None:
        trouble = f" ({'; '.join(record.errors)})" if record.errors else ""
        raise WatchError(
            f"Slurm has no script of job {ref} on record{trouble}: pass the job script instead, "
            f"raysub watch JOB_SCRIPT"
        )
    if not record.script.is_file():
        raise WatchError(f"job {ref}'s script {record.script} is gone: pass the job script instead")
    return Target(record.script, record.workdir or Path.cwd(), ref)


def _holder(files: WatchFiles) -> str:
    """ " (pid@host)" of the watcher that last wrote the state file, if it says."""
    try:
        state = files.load()
    except WatchError:
        return ""
    return f" ({state.watcher})" if state is not None and state.watcher else ""


@contextmanager
def locked(files: WatchFiles) -> Iterator[None]:
    """Hold the run's lock: one watcher per run. WatchError at once when another watcher holds it."""
    lock = filelock.FileLock(files.lock, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise WatchError(
            f"another raysub watch{_holder(files)} is watching this run: {files.lock} is locked; "
            "stop that watcher first, or leave it be"
        ) from None
    try:
        yield
    finally:
        lock.release()


def open_run(files: WatchFiles, target: Target, now: float) -> tuple[WatchState, str]:
    """The run to carry on: the state file's, or a new run when it has none or its run is over; and a line
    for the log saying which. A job to adopt becomes the job watched, unless the run watches another."""
    previous = files.load()
    if previous is not None and Path(previous.script) != target.script:
        raise WatchError(
            f"{files.state} belongs to another script, {previous.script}: pass another --log-dir"
        )
    if previous is None or previous.next_action is Next.NONE:
        state = WatchState(str(target.script), str(target.workdir), next_action_at=now)
        start = f"a new run of {target.script}, submitted from {target.workdir}"
        if previous is not None:
            start = f"the last run ended ({previous.stopped}); {start}"
    else:
        state = previous
        doing = f"watching job {state.job_id}" if state.job_id else f"next: {state.next_action}"
        start = f"resuming the run of {state.script}: {state.restarts} restarts so far, {doing}"
    if target.job_id is not None and state.job_id not in (None, target.job_id):
        raise WatchError(
            f"{files.state} watches job {state.job_id}, not {target.job_id}: pass the script to go on "
            f"with it, or stop that job first"
        )
    if target.job_id is not None and state.job_id is None:
        state.adopt(target.job_id, now)
        start += f"; adopting job {target.job_id}"
    return state, start


def run(target: Target, base: Path | None, settings: Settings) -> WatchState:
    """Watch ``target``'s run to its end, holding its lock; its files are in ``base`` (default: the
    submit directory), beside the jobs' LOG_DIRs. The final state."""
    where = target.workdir if base is None else base
    if not where.is_dir():
        raise WatchError(f"{where} is not a directory: the run's files go there (--log-dir)")
    files = WatchFiles.beside(where, target.script)
    with locked(files):
        state, start = open_run(files, target, settings.clock())
        watcher = Watcher(files, state, settings, where)
        watcher.note(start)
        watcher.save()
        return watcher.run()
