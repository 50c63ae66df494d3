"""raysub watch: keep a job script's run going through failures, time limits, preemption and stalls.

A run submits the script (or adopts a job already submitted), asks Slurm about the job every interval, and
when the job ends badly waits a backoff and submits the script again, until a job succeeds or a resubmission
is not worth it. Each job finds its own resume point in the checkpoint directory when its driver starts
(RAYSUB_CHECKPOINT_DIR, read by the head): watch never fixes one at submit time, so a job Slurm requeues
resumes from the newest checkpoint too. raysub.watch_rules decides what to do (the run's state, the
backoff, :func:`~raysub.watch_rules.decide`); here :class:`Watcher` does it (the I/O: Slurm through
raysub.slurm, the state file, the decision log), and :func:`run` adds the lock and resuming.
docs/watch.md describes the run for users.
"""

import importlib
import itertools
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from raysub import jobs, protocol, slurm
from raysub.jobs import Job
from raysub.protocol.job_index import job_index_path, read_job_index
from raysub.protocol.logdir import LogDir
from raysub.resume import checkpoint_dir_problem
from raysub.status import JobPoll
from raysub.watch_files import KeptScript, WatchError, WatchFiles, locked
from raysub.watch_rules import (
    FAULT_BRING_UP,
    INTERVAL,
    OVER,
    Action,
    Attempt,
    Backoff,
    Do,
    Next,
    Rules,
    Seen,
    WatchState,
    decide,
)

if TYPE_CHECKING:
    from raysub.health.checkup import Finding

# Lines of the driver's log quoted when watch gives up on quick failures.
LAST_LINES = 8


def never_stalled(job: Job) -> "Finding | None":
    """The stall check a watcher uses unless given one: no job ever counts as stalled. raysub health's
    stall check plugs in here, as ``Settings(stalled=...)``: a finding of severity error is a stall, a
    warning (a step much slower than the ones before) is said and waited out."""
    return None


@dataclass(frozen=True)
class Checkpoints:
    """The run's checkpoint directory (absolute) and marker, passed on to every job it submits: the head
    finds the newest complete checkpoint in it each time a driver starts (docs/watch.md, Checkpoints)."""

    directory: Path
    marker: str | None = None
    create: bool = False  # the jobs' heads may make the directory (this host could not)

    @classmethod
    def from_options(cls, directory: Path | None, marker: str | None, create: bool) -> "Checkpoints | None":
        """--checkpoint-dir, --checkpoint-marker and --create-checkpoint-dir: None without a directory (and
        then neither of the others may be given), else :meth:`checked`."""
        if directory is None:
            if marker or create:
                raise WatchError("--checkpoint-marker and --create-checkpoint-dir need --checkpoint-dir")
            return None
        return cls.checked(directory, marker, create)

    @classmethod
    def checked(cls, directory: Path, marker: str | None, create: bool) -> "Checkpoints":
        """The directory, refused (WatchError) when it is missing or holds several runs' checkpoints.
        With ``create`` a missing one is made here or, when this host cannot (a file system only the
        compute nodes mount), left for each job's head to make."""
        if create and checkpoint_dir_problem(directory) is not None:
            try:
                directory.mkdir(parents=True)
            except FileExistsError as error:
                raise WatchError(f"--checkpoint-dir: {directory} is not a directory") from error
            except OSError:
                return cls(directory.absolute(), marker, create=True)
        problem = checkpoint_dir_problem(directory)
        if problem is not None:
            raise WatchError(f"--checkpoint-dir: {problem}")
        found = cls(directory.absolute(), marker)
        try:
            found.latest()
        except ValueError as error:  # several runs' checkpoints side by side
            raise WatchError(f"--checkpoint-dir: {error}") from error
        return found

    def env(self) -> dict[str, str]:
        """What each job is given: the directory and, if any, the marker."""
        marker = {protocol.CHECKPOINT_MARKER_ENV: self.marker} if self.marker else {}
        create = {protocol.CREATE_CHECKPOINT_DIR_ENV: "1"} if self.create else {}
        return {protocol.CHECKPOINT_DIR_ENV: str(self.directory), **marker, **create}

    def latest(self) -> Path | None:
        """The newest complete checkpoint now, by raysub.job.lib.checkpoints (imported when first asked)."""
        checkpoints = importlib.import_module("raysub.job.lib.checkpoints")
        found = checkpoints.latest_checkpoint(self.directory, self.marker)
        return None if found is None else Path(found.path).absolute()


def _silent(line: str) -> None:
    pass


@dataclass(frozen=True)
class Settings:
    """How a run goes (its rules, backoff and interval) and what it calls outside: the checkpoint finder,
    the stall check, the clock, sleep and where each logged line is printed. Tests inject fakes."""

    rules: Rules = field(default_factory=Rules)
    backoff: Backoff = field(default_factory=Backoff)
    interval: float = INTERVAL  # seconds between two questions to Slurm
    checkpoints: Checkpoints | None = None
    stalled: Callable[[Job], "Finding | None"] = never_stalled
    # Seconds sbatch may take; then watch asks Slurm whether it queued the job anyway.
    submit_timeout: float = slurm.TIMEOUT
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
            entries = read_job_index(index or job_index_path())
            place = jobs.indexed_dir(entries, job_id)
            found = jobs.attempts(place.parent, job_id) if place is not None else []
    except (OSError, jobs.JobNotFound):
        return None
    return found[-1] if found else None


def load_state(files: WatchFiles) -> "WatchState | None":
    """The run the state file holds; None when there is none."""
    text = files.load_text()
    if text is None:
        return None
    try:
        return WatchState.from_json(text)
    except ValueError as error:
        raise WatchError(f"{files.state} is not a raysub watch state ({error}); move it away") from error


def stamp(when: float) -> str:
    """An epoch time as the log writes it: local ISO 8601 with the UTC offset."""
    return datetime.fromtimestamp(when).astimezone().isoformat(timespec="seconds")


class Watcher:
    """Carries out a run: submits, polls, cancels and resubmits as :func:`decide` says, saving the state
    after every step and writing every decision to the log file and ``settings.echo``. Slurm is asked at
    most once per ``settings.interval`` (one :class:`raysub.status.JobPoll` per job)."""

    def __init__(
        self, files: WatchFiles, state: WatchState, settings: Settings, base: Path, kept: KeptScript
    ) -> None:
        self.files, self.state, self.base, self.kept = files, state, base, kept
        self.settings, self.rules, self.clock = settings, settings.rules, settings.clock
        self._poll: JobPoll | None = None
        self._said = ""
        self._warned = ""

    def note(self, message: str) -> None:
        """One decision, with its time, into the log file and to ``echo``."""
        line = f"{stamp(self.clock())} {message}"
        self.files.append(line)
        self.settings.echo(line)

    def save(self) -> None:
        self.state.watcher = f"{os.getpid()}@{socket.gethostname()}"
        self.files.save(self.state.to_json())

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
        delay = self.settings.backoff.delay(self.state.resubmissions)
        self._next(Next.SUBMIT, now + delay)
        self.note(f"submitting {self.state.script} again in {delay:.0f} s, at {stamp(now + delay)}")

    def _say_checkpoint(self) -> None:
        """Notes the newest checkpoint now: the job finds its own when its driver starts."""
        if self.settings.checkpoints is None:
            return
        try:
            found = self.settings.checkpoints.latest()
        except Exception as error:  # a watcher that runs for days outlives a bad checkpoint directory
            self.note(f"looking for the newest checkpoint failed ({error}); the job looks again as it starts")
            return
        newest = f"the newest checkpoint is {found}" if found is not None else "no checkpoint yet"
        self.note(f"{newest}; the job resumes from the newest one when its driver starts")

    def _say_changed(self) -> None:
        """Notes it when the script is no longer what the run checked at its start: the copy goes."""
        how = self.kept.changed()
        if how is not None:
            self.note(
                f"{self.state.script} {how} since the run started; submitting the copy checked then, "
                f"{self.kept.copy}"
            )

    def _options(self) -> list[str]:
        """sbatch's options for the next submission: its token, and the nodes to leave out."""
        excluded = [*script_excludes(self.kept.copy), *self.state.excluded]
        return [f"--comment={self.state.token}", *([f"--exclude={','.join(excluded)}"] if excluded else [])]

    def _queued_already(self) -> str | None:
        """The job an earlier sbatch of this submission queued although it failed, timed out or its
        watcher was stopped before it answered, if any. SlurmError when Slurm cannot say."""
        if self.state.token is None:
            return None
        return slurm.job_with_comment(self.state.token)

    def submit(self) -> None:
        """Submit the script, unless Slurm has the job of an sbatch that seemed to fail: then adopt it.
        The submission's token is in the state file before sbatch runs, so that a watcher stopped while
        sbatch hangs leaves its successor the means to find the job."""
        state, settings = self.state, self.settings
        try:
            job_id = self._queued_already()
            if job_id is not None:
                self.note(f"job {job_id} carries this submission's comment {state.token}: sbatch queued it")
            else:
                if state.token is None:
                    state.token = f"raysub-watch-{secrets.token_hex(6)}"
                    self.save()
                self._say_checkpoint()
                self._say_changed()
                env = settings.checkpoints.env() if settings.checkpoints else {}
                job_id = slurm.submit(
                    self.kept.copy, Path(state.workdir), env, self._options(), settings.submit_timeout
                )
        except slurm.SlurmError as error:
            self._submit_failed(error)
            return
        self._submitted(job_id)

    def _submit_failed(self, error: slurm.SlurmError) -> None:
        """A submission failed: stop when it is the run's first and the error is not the controller's,
        else try again after a backoff, until --submit-retry-for has passed. No resubmission is used up."""
        state, now = self.state, self.clock()
        if not state.history and not error.transient and not state.submit_failures:
            raise WatchError(f"could not submit {state.script}: {error}")
        state.submit_failures += 1
        state.submit_failing_since = state.submit_failing_since or now
        failing = now - state.submit_failing_since
        self.note(f"could not submit {state.script} ({error}); failing for {failing:.0f} s")
        try:
            job_id = slurm.job_with_comment(state.token) if state.token else None
        except slurm.SlurmError as asking:
            job_id = None
            self.note(f"could not ask Slurm whether it queued the job anyway ({asking})")
        if job_id is not None:
            self.note(f"job {job_id} carries this submission's comment {state.token}: sbatch queued it")
            self._submitted(job_id)
            return
        if failing >= self.rules.submit_retry_for:
            reason = f"could not submit {state.script} for {failing:.0f} s (--submit-retry-for): {error}"
            self.note(reason)
            self._stop(reason, False)
            return
        delay = self.settings.backoff.delay(state.submit_failures - 1)
        self._next(Next.SUBMIT, now + delay)
        self.note(f"asking Slurm again in {delay:.0f} s, at {stamp(now + delay)}; no resubmission is used up")

    def _submitted(self, job_id: str) -> None:
        state, now = self.state, self.clock()
        first = not state.history
        if not first:
            state.resubmissions += 1
        state.token, state.submit_failures, state.submit_failing_since = None, 0, None
        state.history.append(Attempt(job_id, now))
        state.job_id = job_id
        self._next(Next.POLL, now + self.settings.interval)
        counted = (
            f" (resubmission {state.resubmissions} of {self.rules.max_resubmissions})" if not first else ""
        )
        without = f", leaving out {','.join(state.excluded)}" if state.excluded else ""
        self.note(f"submitted {state.script} as job {job_id}{counted}{without}")

    def _slurm_state(self, job_id: str) -> slurm.SlurmState:
        if self._poll is None or self._poll.job.job_id != job_id:
            placeholder = Job(job_id, 0, LogDir(self.base))
            self._poll = JobPoll(
                placeholder, self.settings.interval, self.clock, lambda asked: slurm.job_state(asked)
            )
        return self._poll.slurm_state()

    def _is_stalled(self, job: Job) -> bool:
        try:
            finding = self.settings.stalled(job)
        except Exception as error:  # a broken stall check must not end a run that is fine
            self.note(f"the stall check failed on job {job.job_id} ({error!r}); taking it as not stalled")
            return False
        if finding is None:
            return False
        if finding.severity != "error":
            # Once per job, kind and step line: the reason counts the seconds, and changes every look.
            said = f"{job.job_id} {finding.kind} {finding.line}"
            if said != self._warned:
                self._warned = said
                self.note(f"warning: job {job.job_id}: {finding.reason}")
            return False
        return True

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
        seen = Seen()
        if found is not None:
            seen = self._read(found.logs, current, answer.state in OVER)
        elif answer.state == "RUNNING" and current.started_at is None:
            current.started_at = now
        if found is None:
            seen = Seen(started=current.started_at)
        driver_exit = found.logs.driver_exit_code() if found is not None else None
        exit_code = answer.exit_code if driver_exit is None else driver_exit
        stalled = answer.state == "RUNNING" and found is not None and self._is_stalled(found)
        action = decide(
            state, answer.state, exit_code, None, now, rules=self.rules, stalled=stalled, seen=seen
        )
        if action.do is Do.STOP and found is not None:
            if action.quick:
                action = replace(action, reason=f"{action.reason}\n{last_lines(found.logs)}")
            elif action.fault == FAULT_BRING_UP and found.logs.ended.exists():
                said = found.logs.ended.read_text(errors="replace").strip()
                action = replace(action, reason=f"{action.reason}\n    the last job's ENDED: {said}")
        self._apply(action, current, exit_code, now)

    def _read(self, logs: LogDir, current: Attempt, over: bool) -> Seen:
        """What the job's LOG_DIR says, and what the history keeps of it."""
        events = logs.timeline()
        runs = [e for e in events if e.phase in (protocol.PHASE_DRIVER_START, protocol.PHASE_DRIVER_RESTART)]
        ends = [e.t for e in events if e.phase == protocol.PHASE_DRIVER_END]
        starts = [e.t for e in runs]
        if not runs and ends:
            # An early driver that ended before the cluster was whole: it started as the head got ready.
            starts = [e.t for e in events if e.phase == protocol.PHASE_HEAD_READY][:1] or ends[:1]
        current.started_at = starts[0] if starts else None
        resumed = [e.detail.partition("resuming from ")[2] for e in runs]
        current.resume_from = (resumed[-1] or None) if resumed else current.resume_from
        current.failed_nodes = failed_nodes(events)
        interrupted = logs.file(protocol.SIGNAL_DELIVERED).exists()
        return Seen(
            started=starts[-1] if starts else None,
            ended=ends[-1] if ends else None,
            interrupted=interrupted and not logs.file(protocol.DRIVER_FINISHED).exists(),
            bring_up=over and not starts,
        )

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
        current.quick, current.fault = action.quick, action.fault
        if not action.succeeded:
            self._exclude(current.failed_nodes)
        self.state.job_id = None
        self._said = ""
        if action.do is Do.STOP:
            self._stop(action.reason, action.succeeded)
        else:
            self._back_off(now)

    def _exclude(self, nodes: Sequence[str]) -> None:
        """Leaves ``nodes`` out of every later job, up to Rules.max_excluded nodes in all."""
        for node in nodes:
            if node in self.state.excluded:
                continue
            if len(self.state.excluded) >= self.rules.max_excluded:
                self.note(f"not leaving out {node}: --max-excluded {self.rules.max_excluded} are left out")
                continue
            self.state.excluded.append(node)
            self.note(f"leaving {node} out of the next jobs: the job named it as failed")


def failed_nodes(events: Sequence[protocol.TimelineEvent]) -> list[str]:
    """The nodes a job's timeline names as failed (protocol.PHASE_NODE_FAILED), in order, once each."""
    named = (e.detail.partition(":")[0].strip() for e in events if e.phase == protocol.PHASE_NODE_FAILED)
    return list(dict.fromkeys(node for node in named if node))


def last_lines(logs: LogDir, count: int = LAST_LINES) -> str:
    """The last ``count`` non-blank lines of the job's last driver log, indented, for a person."""
    path = logs.driver_logs()[-1]
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 64 * 1024))
            text = log.read().decode(errors="replace")
    except OSError:
        return f"    ({path} cannot be read)"
    lines = [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()][-count:]
    return "\n".join(f"    {line}" for line in [f"the last lines of {path}:", *lines])


# An exclusion in a job script's header: "#SBATCH --exclude=LIST", "--exclude LIST" or "-x LIST".
_SCRIPT_EXCLUDE = re.compile(r"^#SBATCH\s+(?:--exclude[=\s]|-x\s*)\s*(\S+)")


# An array job's header line: "#SBATCH --array=SPEC", "--array SPEC" or "-a SPEC".
_SCRIPT_ARRAY = re.compile(r"^#SBATCH\s+(?:--array[=\s]|-a\s*)")


def script_header(script: Path) -> list[str]:
    """The lines of the job script's header, which sbatch reads for #SBATCH up to the first command
    ([] when the script cannot be read)."""
    try:
        lines = script.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return list(
        itertools.takewhile(lambda line: not line.strip() or line.lstrip().startswith("#"), lines[1:])
    )


def script_excludes(script: Path) -> list[str]:
    """The nodes the job script itself leaves out (its #SBATCH --exclude), which watch's --exclude would
    otherwise replace: an option on sbatch's command line wins over the script's."""
    return [m[1] for m in map(_SCRIPT_EXCLUDE.match, script_header(script)) if m]


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
        return _one_job(Target(path.resolve(), Path.cwd()))
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
    return _one_job(Target(record.script, record.workdir or Path.cwd(), ref))


def _one_job(target: Target) -> Target:
    """``target``, unless its script is an array job's, which watch cannot keep going."""
    if any(map(_SCRIPT_ARRAY.match, script_header(target.script))):
        raise WatchError(
            f"{target.script} is an array job (#SBATCH --array): raysub watch keeps one job going, not an "
            "array's tasks; render it without --array to watch it"
        )
    return target


def _holder(files: WatchFiles) -> str:
    """ " (pid@host)" of the watcher that last wrote the state file, if it says."""
    try:
        state = load_state(files)
    except WatchError:
        return ""
    return f" ({state.watcher})" if state is not None and state.watcher else ""


def open_run(files: WatchFiles, target: Target, now: float) -> tuple[WatchState, str, KeptScript]:
    """The run to carry on: the state file's, or a new run when it has none or its run is over; a line for
    the log saying which; and the script it submits, as the run read it at its start. A job to adopt
    becomes the job watched, unless the run watches another."""
    previous = load_state(files)
    # A job id's script, as Slurm has it, is the copy its run submitted.
    if previous is not None and str(target.script) not in (previous.script, previous.script_copy):
        raise WatchError(
            f"{files.state} belongs to another script, {previous.script}: pass another --log-dir"
        )
    if previous is None or previous.next_action is Next.NONE:
        kept = KeptScript.make(target.script)
        state = WatchState(
            str(target.script), str(target.workdir), next_action_at=now, script_copy=str(kept.copy)
        )
        start = (
            f"a new run of {target.script}, submitted from {target.workdir}; it submits the copy {kept.copy}"
        )
        if previous is not None:
            start = f"the last run ended ({previous.stopped}); {start}"
    else:
        state = previous
        doing = f"watching job {state.job_id}" if state.job_id else f"next: {state.next_action}"
        start = f"resuming the run of {state.script}: {state.resubmissions} resubmissions so far, {doing}"
        if state.script_copy is None:  # a run from before watch kept copies
            kept = KeptScript.make(Path(state.script))
            state.script_copy = str(kept.copy)
            start += f"; from now on it submits {state.script} as it is now, kept at {kept.copy}"
        else:
            kept = KeptScript.reopen(Path(state.script), Path(state.script_copy))
    if target.job_id is not None and state.job_id not in (None, target.job_id):
        raise WatchError(
            f"{files.state} watches job {state.job_id}, not {target.job_id}: pass the script to go on "
            f"with it, or stop that job first"
        )
    if target.job_id is not None and state.job_id is None:
        state.adopt(target.job_id, now)
        start += f"; adopting job {target.job_id}"
    return state, start, kept


def run(target: Target, base: Path | None, settings: Settings) -> WatchState:
    """Watch ``target``'s run to its end, holding its lock; its files are in ``base`` (default: the
    submit directory), beside the jobs' LOG_DIRs. The final state."""
    where = target.workdir if base is None else base
    if not where.is_dir():
        raise WatchError(f"{where} is not a directory: the run's files go there (--log-dir)")
    files = WatchFiles.beside(where, target.script)
    with locked(files, settings.echo, lambda: _holder(files)):
        state, start, kept = open_run(files, target, settings.clock())
        watcher = Watcher(files, state, settings, where, kept)
        watcher.note(start)
        watcher.save()
        return watcher.run()
