"""Lines that say a run is failing or has failed: NCCL timeouts and errors, CUDA out of memory, Ray nodes,
actors and workers that died, processes killed by a signal or crashed, and the exception that ends each
Python traceback.

Lines are read as :mod:`raysub.health.text` cleans them. The kinds below match lines that start without
whitespace, so a traceback's frames and an exception message's indented continuation lines do not count
twice; the one exception is the signal line of torchrun's failure table (``  traceback : Signal 9
(SIGKILL) received by PID 14750``), indented by torchrun itself. A kind is searched anywhere on its line,
so a line a progress bar was glued to (tqdm ends no line: ``... 4/7 [00:37<00:28, 9.42s/it]ERROR:...
failed (exitcode: -9)``) is found too.

A node death is named only when Ray says a node died: the node "has been marked dead", a
``NodeDiedError``, or an actor error whose message goes on to say "The actor died because its node has
died". An actor that failed in its constructor, or a worker process that died, is an actor death.
Launchers' exit codes count only when they name a signal (torchrun's negative ``exitcode``, its
``Received 1 death signal``, Python's ``died with <Signals.SIGKILL: 9>``); a rank that mpiexec reports
"died from signal 15" while a job is torn down is not a cause.

A traceback (``Traceback (most recent call last):``) ends at the first line of its process that is
not indented: its exception, e.g. ``ValueError: bad``. Ray's remote errors continue with the remote
frames after ``ray.exceptions.RayTaskError(ValueError): ...`` and chained exceptions ("During handling
of the above exception, ..." and "The above exception was the direct cause ...") with another
traceback: the last exception line of the whole is the one reported. Processes that Ray or torchrun
prefix are followed apart, so interleaved tracebacks of several ranks each find their own end. A line
reported as one of the kinds is not reported again as a traceback's end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from raysub.health.text import Line, lines

NCCL_TIMEOUT = "nccl_timeout"
NCCL_ERROR = "nccl_error"
CUDA_OOM = "cuda_oom"
NODE_DIED = "node_died"
ACTOR_DIED = "actor_died"
KILLED = "killed"  # by a signal, as a launcher reports it
CRASH = "crash"  # a segmentation fault or another fatal error of the interpreter
TRACEBACK = "traceback"

# Tried in this order: a line is of the first kind that matches it.
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (NCCL_TIMEOUT, re.compile(r"Watchdog caught collective operation timeout")),
    (CUDA_OOM, re.compile(r"CUDA out of memory|\btorch\.(?:cuda\.)?OutOfMemoryError\b")),
    (
        NCCL_ERROR,
        re.compile(
            r"NCCL error in:|DistBackendError|"
            r"\bnccl(?:Internal|System|Remote|InvalidUsage|UnhandledCuda)Error\b"
        ),
    ),
    (
        NODE_DIED,
        re.compile(r"has been marked dead|The actor died because its node has died|\bNodeDiedError\b"),
    ),
    (
        ACTOR_DIED,
        re.compile(
            r"\b(?:ActorDiedError|RayActorError)\b|A worker died or was killed while executing a task|"
            r"^The actor died because of an error raised in its creation task"
        ),
    ),
    (
        KILLED,
        re.compile(
            r"\bfailed \(exitcode: -\d+\)|\bReceived \d+ death signal\b|\bdied with <Signals\.SIG\w+: \d+>"
        ),
    ),
    (CRASH, re.compile(r"Fatal Python error: |\bSegmentation fault \(core dumped\)")),
    # Ray's report of a task's error that nobody retrieved with ray.get: its remote frames follow.
    (TRACEBACK, re.compile(r"^Unhandled error \(suppress with '?RAY_IGNORE_UNHANDLED_ERRORS")),
)
# torchrun's failure table indents its own lines: "  traceback : Signal 9 (SIGKILL) received by PID 1".
_TABLE_SIGNAL = re.compile(r"^ +traceback +: Signal \d+ \(SIG\w+\) received by PID \d+")
# An actor error's indented message that says the actor's node died (Ray's ActorDiedError).
_ITS_NODE_DIED = re.compile(r"^\s+The actor died because its node has died")
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


@dataclass(frozen=True)
class Fatal:
    """A line of ``kind`` (one of the constants above) at ``line_number`` (from 1), as a terminal shows it."""

    kind: str
    line: str
    line_number: int


def kind_of(message: str) -> str | None:
    """The kind of failure ``message`` (a cleaned line) reports, or None."""
    if not message:
        return None
    if message[0].isspace():
        return KILLED if _TABLE_SIGNAL.match(message) else None
    return next((kind for kind, pattern in KINDS if pattern.search(message)), None)


@dataclass
class _Traceback:
    """A traceback of one process being read.

    ``exception`` is its latest unindented line; ``frames`` says whether indented frame lines are
    expected (at its start, and again when Ray's remote frames or a chained traceback follow an
    exception); ``chained`` that a chained exception's header was seen.
    """

    exception: Line | None = None
    frames: bool = True
    chained: bool = False


class _Tracebacks:
    """The tracebacks open in each process (source) and the exception lines they ended with."""

    def __init__(self) -> None:
        self.open: dict[str, _Traceback] = {}
        self.ends: list[Line] = []

    def close(self, source: str) -> None:
        traceback = self.open.pop(source, None)
        if traceback is not None and traceback.exception is not None:
            self.ends.append(traceback.exception)

    def start(self, source: str) -> None:
        traceback = self.open.get(source)
        if traceback is not None and traceback.chained:
            traceback.frames, traceback.chained = True, False
            return
        self.close(source)
        self.open[source] = _Traceback()

    def read(self, line: Line) -> None:
        message = line.message
        if message.rstrip().endswith(_TRACEBACK):
            self.start(line.source)
            return
        traceback = self.open.get(line.source)
        if traceback is None or not message.strip():
            return
        if message.strip() in _CHAINED:
            traceback.chained = True
        elif message[0].isspace():
            if not traceback.frames and message.lstrip().startswith('File "'):
                traceback.frames = True  # Ray's remote frames follow its RayTaskError line
            elif not traceback.frames:
                self.close(line.source)  # the exception's message goes on, indented
        elif traceback.frames:
            traceback.exception, traceback.frames = line, False
        else:
            self.close(line.source)  # a second unindented line: the traceback ended before it


def fatal_lines(text: str) -> list[Fatal]:
    """The lines of ``text`` that report a failure, in order."""
    found: dict[int, Fatal] = {}
    tracebacks = _Tracebacks()
    actor_errors: dict[str, int] = {}  # the latest actor error of each process, by its line number
    for line in lines(text):
        tracebacks.read(line)
        kind = kind_of(line.message)
        if kind is not None:
            found[line.number] = Fatal(kind, line.shown, line.number)
            if kind == ACTOR_DIED:
                actor_errors[line.source] = line.number
        elif (number := actor_errors.get(line.source)) and _ITS_NODE_DIED.match(line.message):
            found[number] = replace(found[number], kind=NODE_DIED)
        elif line.message and not line.message[0].isspace():
            actor_errors.pop(line.source, None)  # the actor error's message ended
    for source in list(tracebacks.open):
        tracebacks.close(source)
    for end in tracebacks.ends:
        found.setdefault(end.number, Fatal(TRACEBACK, end.shown, end.number))
    return [found[number] for number in sorted(found)]
