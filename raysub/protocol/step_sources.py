"""LOG_DIR/step_sources.json: where the job's training step can be read besides the trainer's own report,
given once at render time (``raysub render --step-regex``, ``--tensorboard-dir``, ``--metrics-file``) so that
raysub health, watch and report read it without being told again. The batch script writes it, one JSON
object::

    {"step_regex": <a regular expression with a group named "step", or null>,
     "tensorboard_dir": <an absolute path, or null>, "metrics_file": <an absolute path, or null>}

A command's own option wins over what is recorded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from raysub import protocol


def step_regex_problem(value: str) -> str | None:
    """Why ``value`` is no step pattern (not a regular expression, no group named 'step', more than one
    line), or None when it is one."""
    if "\n" in value or "\r" in value:
        return f"{value!r} is more than one line"
    try:
        groups = re.compile(value).groupindex
    except (re.error, OverflowError, RecursionError) as error:  # a{99999999999}: an OverflowError
        return f"'{value}' is not a regular expression: {error}"
    if "step" not in groups:
        return f"'{value}' has no group named 'step', such as 'iter (?P<step>\\d+)'"
    return None


@dataclass(frozen=True)
class Recorded:
    step_regex: str | None = None
    tensorboard_dir: Path | None = None
    metrics_file: Path | None = None

    def text(self) -> str | None:
        """The file's content; None when nothing is recorded (the job writes no file)."""
        if self == Recorded():
            return None
        record = {
            "step_regex": self.step_regex,
            "tensorboard_dir": None if self.tensorboard_dir is None else str(self.tensorboard_dir),
            "metrics_file": None if self.metrics_file is None else str(self.metrics_file),
        }
        return json.dumps(record)


def path(log_dir: Path) -> Path:
    return log_dir / protocol.STEP_SOURCES


def read(log_dir: Path) -> Recorded:
    """What the job was rendered with; a value that is none (a pattern without 'step', a relative path, a
    path with a NUL byte) is passed over, and a job rendered without any has none."""
    try:
        record = json.loads(path(log_dir).read_text(errors="replace"))
    except (OSError, ValueError):
        return Recorded()
    if not isinstance(record, dict):
        return Recorded()

    def absolute(key: str) -> Path | None:
        value = record.get(key)
        if not isinstance(value, str) or not value.startswith("/") or "\0" in value:  # NUL: no path
            return None
        return Path(value)

    regex = record.get("step_regex")
    usable = isinstance(regex, str) and step_regex_problem(regex) is None
    return Recorded(regex if usable else None, absolute("tensorboard_dir"), absolute("metrics_file"))
