"""trainer_progress.json: the training step as the trainer itself says it (raysub.trainer, and the adapters in
raysub.trainer_hooks), which raysub health, watch and report prefer to any reading of the driver's text.
One JSON object, rewritten atomically (a reader sees one whole report or the one before), and its history,
trainer_progress.jsonl, the same objects one a line, each appended in one write:

    {"t": <epoch s of this report>, "step": <int>, "since": <epoch s the step was first reported>,
     "total": <int or null>, "seconds_per_step": <float or null>,
     "throughput": {"value": <float>, "unit": "tokens/s" | ...} or null, "source": "<who reported it>"}

``step`` is the global training step (optimizer steps over the whole run), never an epoch's counter.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from raysub import protocol

# What raysub.trainer accepts as a throughput's unit (raysub health names them so too).
UNITS = ("tokens/s", "tokens/s/device", "samples/s", "TFLOP/s", "TFLOP/s/device")


@dataclass(frozen=True)
class Report:
    t: float
    step: int
    since: float
    total: int | None = None
    seconds_per_step: float | None = None
    throughput: tuple[float, str] | None = None  # (value, unit)
    source: str = "api"

    def record(self) -> dict[str, Any]:
        record = asdict(self)
        record["throughput"] = (
            None if self.throughput is None else dict(zip(("value", "unit"), self.throughput))
        )
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Report:
        def number(key: str) -> float | None:
            value = record.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        def whole(key: str) -> int | None:
            value = record.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        step, t = whole("step"), number("t")
        if step is None or t is None:
            raise ValueError("a report without step or t")
        rate = record.get("throughput")
        throughput = None
        if (
            isinstance(rate, dict)
            and isinstance(rate.get("value"), (int, float))
            and rate.get("unit") in UNITS
        ):
            throughput = (float(rate["value"]), str(rate["unit"]))
        since = number("since")
        return cls(t, step, t if since is None else since, whole("total"), number("seconds_per_step"),
                   throughput, str(record.get("source") or "api"))  # fmt: skip


def path(log_dir: Path) -> Path:
    return log_dir / protocol.TRAINER_PROGRESS


def write(log_dir: Path, report: Report) -> None:
    """``report`` into LOG_DIR, atomically, with the logs' mode."""
    protocol.write_atomic(path(log_dir), json.dumps(report.record()) + "\n", protocol.log_file_mode(log_dir))


def history_path(log_dir: Path) -> Path:
    return log_dir / protocol.TRAINER_HISTORY


def append(log_dir: Path, report: Report) -> None:
    """``report`` at the end of the history, in one write (a reader never sees half a line of it)."""
    with protocol.create(history_path(log_dir), protocol.log_file_mode(log_dir)) as out:
        out.write(json.dumps(report.record()) + "\n")


def history(log_dir: Path) -> list[Report]:
    """The trainer's reports kept for the report's chart, oldest first (a line that is none is passed over);
    none when it kept none."""
    try:
        text = history_path(log_dir).read_text(errors="replace")
    except OSError:
        return []
    reports = []
    for line in text.splitlines():
        try:
            reports.append(Report.from_record(json.loads(line)))
        except (ValueError, TypeError, AttributeError):
            continue
    return reports


def read(log_dir: Path) -> Report | None:
    """The trainer's latest report; None when it made none (or the file is not one)."""
    try:
        return Report.from_record(json.loads(path(log_dir).read_text(errors="replace")))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def log_dir_of_job(environ: dict[str, str] | None = None) -> Path | None:
    """This job's LOG_DIR, as the batch script gives every step (and so the driver and Ray's workers)."""
    value = (os.environ if environ is None else environ).get(protocol.ENV_LOG_DIR, "")
    return Path(value) if value else None
