"""Lines that say a run is failing or has failed: NCCL timeouts and errors, CUDA out of memory, Ray nodes
and actors that died, and the exception that ends each Python traceback.

Lines are read as :mod:`raysub.health.text` cleans them. The kinds below match lines that start without
whitespace, so a traceback's frames and an exception message's indented continuation lines (Ray's
``ActorDiedError`` spells out "The actor died because its node has died" there) do not count twice.

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
from dataclasses import dataclass

from raysub.health.text import Line, lines

NCCL_TIMEOUT = "nccl_timeout"
NCCL_ERROR = "nccl_error"
CUDA_OOM = "cuda_oom"
NODE_DIED = "node_died"
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
        re.compile(
            r"has been marked dead|The actor died because its node has died|"
            r"\b(?:ActorDiedError|RayActorError|NodeDiedError)\b"
        ),
    ),
)
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
    if not message or message[0].isspace():
        return None
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
    for line in lines(text):
        tracebacks.read(line)
        kind = kind_of(line.message)
        if kind is not None:
            found[line.number] = Fatal(kind, line.shown, line.number)
    for source in list(tracebacks.open):
        tracebacks.close(source)
    for end in tracebacks.ends:
        found.setdefault(end.number, Fatal(TRACEBACK, end.shown, end.number))
    return [found[number] for number in sorted(found)]
