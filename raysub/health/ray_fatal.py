"""The lines of Ray's own logs (kept in LOG_DIR/ray-logs: raysub/protocol/ray_logs.py) that say why a
node's Ray died, as Ray writes them:

- its C++ processes (raylet, gcs_server, the workers' core: python-core-worker-*.log) log a fatal error
  with severity C, ``[2023-06-27 07:56:04,042 C 1257 1257] (raylet) local_task_manager.cc:431:  Check
  failed: ...`` (before Ray 2.x without the ``(raylet)``), and a crash as ``*** SIGSEGV received at
  time=1647977864 on cpu 0 ***`` or ``*** SIGABRT (@0x3e8...) received by PID 30268 ...``, alone or after
  such a prefix (ray-project/ray issues 15990, 22425, 23410, 28562, 36884, 45642);
- ``ray start`` writes ``ray_process_exit.log`` when one of its processes exits:
  ``... ERROR scripts.py:100 -- Some Ray subprocesses exited unexpectedly:`` and, indented below, each
  process, ``raylet [exit code=-9 (signal 9)]``; the node's dashboard agent logs ``Raylet is terminated.
  Termination is unexpected. ...`` (both seen on the minicluster, Ray 2.60, after a raylet was killed).

Only the files that hold such lines are read (FILES); the workers' own output (worker-*.out/.err) reaches
the driver's log, where raysub/health/fatal.py reads it. One line per kind and file: the first, which
is the cause; a crash's stack and a repeated check are the same failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatch

from raysub.health.text import lines

RAY_FATAL = "ray_fatal"  # a C++ fatal error (RAY_CHECK, RAY_LOG(FATAL))
RAY_CRASH = "ray_crash"  # a Ray process got a fatal signal
RAY_PROCESS_DIED = "ray_process_died"  # a process of the node's Ray exited unexpectedly

FILES = (
    "raylet.out",
    "raylet.err",
    "gcs_server.out",
    "gcs_server.err",
    "ray_process_exit.log",
    "dashboard_agent.log",
    "python-core-worker-*.log",
    "python-core-driver-*.log",
)
_FATAL = re.compile(r"\[\d{4}-\d\d-\d\d [\d:,.]+ C \d+ \d+\] ")
_CRASH = re.compile(r"\*\*\* (?:SIG[A-Z]+ .*received|Aborted at )")
_DIED = re.compile(
    r"Some Ray subprocesses exited unexpectedly:|Raylet is terminated\. Termination is unexpected\."
)
# What every line of those kinds holds, looked for in a file's whole text at once before its lines are
# read one by one: a healthy node's raylet.out of tens of MiB then costs one scan in C. Ray writes these
# files itself, with no colours or forwarders' spellings in between.
# (One search for each: an alternation of them scans several times slower.)
_ANY_FATAL = re.compile(r" C \d+ \d+\] ")
_ANY_OTHER = ("*** ", "exited unexpectedly:", "Raylet is terminated.")
_LISTS = "exited unexpectedly:"  # ray start's line, with the processes indented below it
_MOST = 400  # characters of a quoted line: Ray's agent adds the raylet's last 20 lines to its own


@dataclass(frozen=True)
class RayFatal:
    kind: str
    name: str  # the file, as kept (e.g. "raylet.out")
    line: str


def read_by_name(name: str) -> bool:
    """Whether a kept log of this name (its path in Ray's logs directory) is one FILES says to read."""
    return any(fnmatch(name.rsplit("/", 1)[-1], pattern) for pattern in FILES)


def _kind(message: str) -> str | None:
    if _FATAL.search(message):
        return RAY_FATAL
    if _CRASH.search(message):
        return RAY_CRASH
    return RAY_PROCESS_DIED if _DIED.search(message) else None


def fatal_lines(name: str, text: str) -> Iterator[RayFatal]:
    """The first line of each kind in the kept log ``name``; the processes ray start lists, indented,
    joined to the line that introduces them."""
    if not _ANY_FATAL.search(text) and not any(token in text for token in _ANY_OTHER):
        return
    found: dict[str, str] = {}
    cleaned = [line.shown for line in lines(text)]
    for number, message in enumerate(cleaned):
        kind = _kind(message)
        if kind is None or kind in found:
            continue
        if message.rstrip().endswith(_LISTS):
            following = []
            for after in cleaned[number + 1 :]:
                if not after[:1].isspace() or not after.strip():
                    break
                following.append(after.strip())
            message = " ".join([message.rstrip(), *following])
        found[kind] = message if len(message) <= _MOST else message[: _MOST - 3] + "..."
    for kind, line in found.items():
        yield RayFatal(kind, name, line)
