"""The training step from what a trainer writes for machines, read before any text: TensorBoard's event files
and JSON-lines metrics. Each answers only with a step the file states; a file it cannot read says nothing.

TensorBoard event files (``events.out.tfevents.*``, written by torch.utils.tensorboard, tensorboardX,
TensorFlow and the trainers on them) are TFRecord files: each record is an 8-byte little-endian length, a
4-byte checksum of it, the data, and a 4-byte checksum of the data; the data is an ``Event`` protocol
buffer whose field 1 is ``wall_time`` (a double), field 2 ``step`` (a varint) and field 5 the ``summary``
(tensorflow/core/util/event.proto). The step is that of the newest event with a summary in the newest
event file: the first event of a file (its ``file_version``) has step 0 and no summary. A record cut short
(the writer is still at it) ends the reading. The standard library only: reading one varint field does not
call for tensorboard's own reader and its dependencies.

JSON-lines metrics: the last line that is a JSON object with one of STEP_KEYS holding a whole number.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

EVENT_FILE_PREFIX = "events.out.tfevents."
# Where an event file may lie below the directory given: run directories nest (logdir/run/version_0/).
EVENTS_DEPTH = 4
STEP_KEYS = ("global_step", "num_updates", "step", "iteration", "training_iteration", "train/global_step")
_WALL_TIME, _STEP, _SUMMARY = 1, 2, 5


def event_files(directory: Path) -> list[Path]:
    """The event files below ``directory`` (at most EVENTS_DEPTH down), oldest first by modification time."""
    found = []
    base = len(directory.parts)
    for root, dirs, files in os.walk(directory):
        if len(Path(root).parts) - base >= EVENTS_DEPTH:
            dirs.clear()
        found += [Path(root, name) for name in files if name.startswith(EVENT_FILE_PREFIX)]
    return sorted(found, key=lambda path: (path.stat().st_mtime, str(path)))


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("a varint cut short")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def event_step(data: bytes) -> tuple[int, float, bool] | None:
    """(step, wall time, has a summary) of one serialized Event; None when it is no Event."""
    step, wall, summary, at = 0, 0.0, False, 0
    try:
        while at < len(data):
            key, at = _varint(data, at)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, at = _varint(data, at)
                step = value if field == _STEP else step
            elif wire == 1:
                if field == _WALL_TIME:
                    wall = struct.unpack_from("<d", data, at)[0]
                at += 8
            elif wire == 2:
                length, at = _varint(data, at)
                summary = summary or field == _SUMMARY
                at += length
            elif wire == 5:
                at += 4
            else:
                return None
    except (ValueError, struct.error):
        return None
    return (step, wall, summary) if at == len(data) else None


class EventsTail:
    """The newest event file below a directory, read on from where the previous read stopped (watch asks
    every minute, for days): the step and wall time of its newest event with a summary."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.file: tuple[Path, int, int] | None = None  # (path, device, inode)
        self.offset = 0
        self.latest: tuple[int, float] | None = None

    def read(self) -> tuple[int, float] | None:
        files = event_files(self.directory) if self.directory.is_dir() else []
        if not files:
            return None
        with files[-1].open("rb") as events:
            status = os.fstat(events.fileno())
            identity = (files[-1], status.st_dev, status.st_ino)
            if identity != self.file or status.st_size < self.offset:
                self.file, self.offset, self.latest = identity, 0, None
            events.seek(self.offset)
            while len(header := events.read(12)) == 12:
                (length,) = struct.unpack("<Q", header[:8])
                data = events.read(length)
                if len(data) < length or len(events.read(4)) < 4:
                    break  # the writer is still writing this record: read it whole next time
                self.offset += 12 + length + 4
                read = event_step(data)
                if read and read[2]:
                    self.latest = (read[0], read[1])
        return self.latest


def jsonl_step(path: Path, tail_bytes: int = 2**20) -> int | None:
    """The step of the last line of JSON-lines metrics file ``path`` that states one (of its last
    ``tail_bytes``); None when none does."""
    try:
        with path.open("rb") as metrics:
            metrics.seek(max(metrics.seek(0, os.SEEK_END) - tail_bytes, 0))
            lines = metrics.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        for key in STEP_KEYS:
            value = record.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return None
