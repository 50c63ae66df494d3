"""Log lines as a terminal shows them, with where each came from set apart from what it says.

Every parser of ``raysub.health`` reads text through :func:`lines`, which undoes what sits between a
program's output and the log file:

- ANSI escape sequences (colours, tqdm's cursor moves);
- carriage-return debris: tqdm rewrites its bar with ``\\r`` and never ends the line, so a line is the
  last non-blank ``\\r`` segment; forwarders that spell ``\\r`` as ``#015`` or ``^M`` (and escape as
  ``#033``);
- prefixes added on the way: Ray's ``(pid=123)``, ``(TaskRunner pid=123)``, ``(RayTrainWorker pid=1,
  ip=10.0.0.2)`` and ``(raylet)``; torchrun's ``[rank0]:`` and ``[default0]:``; ``srun --label``'s
  ``0:``; mpirun's ``[1,0]<stdout>:`` (``[1,mpirank:0,algo-1]<stdout>:`` on SageMaker); several may
  stand in front of one another;
- Ray's ``[repeated 3x across cluster]`` note at the end of a deduplicated line.

The standard library only: ``raysub --help`` must stay light.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and two-character escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# One prefix at the start of a line, maybe after blanks (a launcher or a document that indents a whole
# log). Ray writes one space after its prefix; PyTorch one after "[rank0]:" before a traceback's lines and
# none before a warning's "[W326 ...]"; mpirun none; srun --label pads the task number on the left and
# writes one space after the colon.
_PREFIX = re.compile(
    r"[ \t]*(?:"
    r"\((?:[^()\n]*\s)?pid=\d+(?:,[^()\n]*)?\) ?"  # Ray: (pid=1), (Name pid=1), (Name pid=1, ip=...)
    r"|\((?:raylet|gcs_server|autoscaler|monitor|dashboard\w*|log_monitor|runtime_env\w*)\b[^()\n]*\) ?"
    r"|\[(?:rank|default)\d+\]: ?"  # torchrun
    r"|\[\d+,(?:mpirank:)?\d+(?:,[^\]\n]*)?\]<std(?:out|err)>:"  # mpirun; SageMaker's adds a host
    r"|\d+: "  # srun --label
    r")"
)
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")


@dataclass(frozen=True)
class Line:
    """One line of a log.

    ``number`` counts from 1; ``shown`` is the line as a terminal shows it (no escapes, only the last
    carriage-return segment, prefixes kept); ``source`` is the prefixes, the process that wrote it
    ("" when none); ``message`` is what that process wrote, its leading whitespace kept (tracebacks
    need it).
    """

    number: int
    shown: str
    source: str
    message: str


def strip_prefixes(text: str) -> tuple[str, str]:
    """``text`` without the prefixes at its start, and those prefixes."""
    source = ""
    while match := _PREFIX.match(text):
        if not match.group():
            break
        source += match.group()
        text = text[match.end() :]
    return text, source


def last_segment(text: str) -> str:
    """The last carriage-return segment of ``text`` that is not blank ("" when all are)."""
    for segment in reversed(text.split("\r")):
        if segment.strip():
            return segment
    return ""


def _forwarded(raw: str) -> str:
    """``raw`` with the control characters a log forwarder spelled out put back: syslog-style forwarders
    (SageMaker's, rsyslog's) write a carriage return as ``#015`` and an escape as ``#033``; ``cat -v``
    and some log viewers a carriage return as ``^M``."""
    if "#0" in raw:
        raw = raw.replace("#015", "\r").replace("#033", "\x1b")
    return raw.replace("^M", "\r") if "^M" in raw else raw


def clean(number: int, raw: str) -> Line:
    """``raw`` (one line of a log, without its newline) as a :class:`Line`."""
    text = _ANSI.sub("", _forwarded(raw))
    message, outer = strip_prefixes(text)
    message, inner = strip_prefixes(last_segment(message))
    message = _REPEATED.sub("", message).rstrip()
    return Line(number, outer + inner + message, (outer + inner).strip(), message)


def lines(text: str) -> Iterator[Line]:
    """The lines of ``text``, cleaned; one at a time, so that a long log is never held twice."""
    start = 0
    for number, end in enumerate(_ends(text), start=1):
        yield clean(number, text[start:end])
        start = end + 1


def _ends(text: str) -> Iterator[int]:
    """Where each line of ``text`` ends: at each newline, and at the end of the text."""
    end = text.find("\n")
    while end >= 0:
        yield end
        end = text.find("\n", end + 1)
    yield len(text)
