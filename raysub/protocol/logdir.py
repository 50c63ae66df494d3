"""LogDir: one attempt's directory and every file in it, as the submit host reads it (status, logs, attach,
health, watch): the node map, attach.env, the container options, the signal files and health_progress.json,
each with its writer beside its reader. The names are raysub.protocol's; the node programs, which write
only a few of these files, use that package's own functions, so this module stays on the submit host.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from raysub.protocol import (
    ATTACH_ENV,
    ATTACH_HET,
    AUTH_TOKEN,
    CONTAINER_ARGS,
    CONTAINER_FLAGS,
    CONTAINER_NAME_OPTION,
    CONTAINER_OPTIONS,
    DASHBOARD,
    DRIVER_EXIT_CODE,
    DRIVER_LOG,
    ENDED,
    HEAD_LOG,
    HEALTH_PROGRESS,
    METRICS,
    NODE_MAP,
    PHASE_ENDED,
    PREFLIGHT,
    PRIVATE_FILE_MODE,
    PROGRESS_HISTORY,
    ROLE_HEAD,
    STARTED_RAY_HEAD,
    WORKER_UNITS,
    TimelineEvent,
    UntrustedFile,
    append_timeline,
    create,
    driver_log_name,
    log_dir_name,
    read_joined_nodes,
    read_or_none,
    read_timeline,
    read_trusted,
    read_units,
    worker_log_name,
    write_atomic,
)


@dataclass(frozen=True)
class AttachEnv:
    """attach.env: the job's own Slurm id (an array task's too: srun --jobid takes no <array>_<task>), its
    head node, and whether it is a heterogeneous job."""

    slurm_job_id: str
    head: str
    het: bool

    def het_group(self, on_head: bool) -> tuple[str, ...]:
        """The srun option that picks the component of a step on the head's node or a worker's."""
        return (f"--het-group={0 if on_head else 1}",) if self.het else ()


@dataclass(frozen=True)
class NodeEntry:
    """One line of nodes.tsv: the head (index 0) or worker ``index``, and the Slurm node it runs on."""

    role: str
    index: int
    node: str

    def line(self) -> str:
        return f"{self.role}\t{self.index}\t{self.node}"


@dataclass(frozen=True)
class ProgressSeen:
    """health_progress.json: the driver's step as raysub health and watch last saw it (None: no step yet),
    since when it has been that step, and when each of the last PROGRESS_HISTORY step changes was first
    seen, oldest first. A run's own step lines rarely say when they were printed, so how long a step takes
    is measured from these sightings."""

    step: int | None
    since: float  # epoch seconds
    steps: tuple[tuple[int, float], ...] = ()  # (step, first seen)


def _whole_number(value: object) -> int | None:
    """``value`` when JSON gave an integer (true and false are no steps)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _step_sightings(value: object) -> tuple[tuple[int, float], ...]:
    """The well-formed [step, seconds] pairs of ``value``, the last PROGRESS_HISTORY of them."""
    pairs = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, list) and len(item) == 2:
            step, seen = _whole_number(item[0]), item[1]
            if step is not None and isinstance(seen, (int, float)) and not isinstance(seen, bool):
                pairs.append((step, float(seen)))
    return tuple(pairs[-PROGRESS_HISTORY:])


@dataclass(frozen=True)
class LogDir:
    """One attempt's LOG_DIR and every file in it."""

    path: Path

    @classmethod
    def of(cls, base: Path, job_id: str | int, requeues: int = 0) -> LogDir:
        return cls(base / log_dir_name(job_id, requeues))

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def head_log(self) -> Path:
        return self.file(HEAD_LOG)

    @property
    def driver_log(self) -> Path:
        return self.file(DRIVER_LOG)

    def worker_log(self, index: int, workers: int) -> Path:
        return self.file(worker_log_name(index, workers))

    def driver_logs(self) -> list[Path]:
        """The driver's logs in run order: its first run, then each restart that wrote one."""
        runs = [self.driver_log]
        while self.file(driver_log_name(len(runs))).exists():
            runs.append(self.file(driver_log_name(len(runs))))
        return runs

    @property
    def ended(self) -> Path:
        return self.file(ENDED)

    @property
    def metrics(self) -> Path:
        return self.file(METRICS)

    @property
    def preflight(self) -> Path:
        return self.file(PREFLIGHT)

    @property
    def auth_token(self) -> Path:
        return self.file(AUTH_TOKEN)

    @property
    def started_ray_head(self) -> Path:
        return self.file(STARTED_RAY_HEAD)

    @property
    def worker_units(self) -> Path:
        return self.file(WORKER_UNITS)

    def node_map(self) -> list[NodeEntry]:
        """Which node is the head and which is worker k (empty until the batch script has written it;
        a malformed line, or one not ended by a newline yet, is left out)."""
        entries = []
        for line in (read_trusted(self.file(NODE_MAP)) or "").split("\n")[:-1]:
            fields = line.split("\t")
            if len(fields) == 3 and fields[1].isdigit():
                entries.append(NodeEntry(fields[0], int(fields[1]), fields[2]))
        return entries

    def write_node_map(self, entries: Iterable[NodeEntry]) -> None:
        write_atomic(self.file(NODE_MAP), "".join(entry.line() + "\n" for entry in entries))

    def units(self) -> int | None:
        """How many units (GPUs, or nodes) have joined Ray; None before the head's counter has said."""
        return read_units(self.path)

    def joined_nodes(self) -> list[str]:
        """The nodes alive in Ray, as the head's counter last saw them."""
        return read_joined_nodes(self.path)

    def driver_exit_code(self) -> int | None:
        text = (read_trusted(self.file(DRIVER_EXIT_CODE)) or "").strip()
        return int(text) if text.lstrip("-").isdigit() else None

    def write_driver_exit_code(self, code: int) -> None:
        write_atomic(self.file(DRIVER_EXIT_CODE), f"{code}\n")

    def ended_reason(self) -> str | None:
        """Why the job ended (ENDED's line), or None while it runs."""
        text = read_or_none(self.ended)
        return None if text is None else text.strip()

    def end(self, reason: str, node: str) -> bool:
        """End the job with ``reason`` as the bash ``end_job`` does: the first writer wins (a hard link
        fails when ENDED exists, atomically, on NFS too), and the winner adds the timeline's ``ended``.
        Returns whether this call was the first."""
        temporary = self.ended.with_name(f"{ENDED}.tmp.{socket.gethostname()}.{os.getpid()}")
        with create(temporary, PRIVATE_FILE_MODE, os.O_TRUNC) as out:
            out.write(reason + "\n")
        try:
            os.link(temporary, self.ended)
        except FileExistsError:
            return False
        finally:
            temporary.unlink()
        self.append_timeline(PHASE_ENDED, node, reason)
        return True

    def progress_seen(self) -> ProgressSeen | None:
        """What raysub health and watch last saw of the driver's step (None before they saw anything, or
        when the file is unreadable: the next checkup starts afresh)."""
        try:
            record = json.loads(read_or_none(self.file(HEALTH_PROGRESS)) or "")
            step, since = record["step"], float(record["since"])
            steps = record.get("steps")
        except (ValueError, KeyError, TypeError):
            return None
        return ProgressSeen(_whole_number(step), since, _step_sightings(steps))

    def write_progress_seen(self, seen: ProgressSeen) -> None:
        """Only the last PROGRESS_HISTORY step changes are kept, so the file stays small however long the
        run."""
        steps = [[step, t] for step, t in seen.steps[-PROGRESS_HISTORY:]]
        record = {"step": seen.step, "since": seen.since, "steps": steps}
        write_atomic(self.file(HEALTH_PROGRESS), json.dumps(record) + "\n")

    def timeline(self) -> list[TimelineEvent]:
        """Every whole line of timeline.jsonl, in file order (a line still being written is left out)."""
        return read_timeline(self.path)

    def append_timeline(self, phase: str, node: str, detail: str) -> None:
        append_timeline(self.path, phase, node, detail)

    def log_of(self, entry: NodeEntry, workers: int) -> Path:
        """The Ray log of a node of the node map."""
        return self.head_log if entry.role == ROLE_HEAD else self.worker_log(entry.index, workers)

    def container_args(self, head: bool = True) -> list[str]:
        """The pyxis options to attach with: the head's container itself, or (``head=False``) a new
        container from the same image with the same mounts, as the unnamed worker containers are."""
        options = (read_trusted(self.file(CONTAINER_ARGS)) or "").splitlines()
        for option in options:
            if option not in CONTAINER_FLAGS and not option.startswith(CONTAINER_OPTIONS):
                raise UntrustedFile(
                    f"refusing {self.file(CONTAINER_ARGS)}: {option!r} is not a container option the job "
                    "writes there; it may have been tampered with"
                )
        return [o for o in options if head or not o.startswith(CONTAINER_NAME_OPTION)]

    def attach_env(self) -> AttachEnv | None:
        """What attach.env says (None before the batch script has written it, or for a line it never
        writes)."""
        fields = (read_trusted(self.file(ATTACH_ENV)) or "").split()
        if len(fields) not in (2, 3) or not fields[0].isdigit() or fields[2:] not in ([], [ATTACH_HET]):
            return None
        return AttachEnv(fields[0], fields[1], len(fields) == 3)

    def head_address(self) -> str | None:
        """The head's ``<ip>:<port>`` (STARTED_RAY_HEAD), None before the head is up."""
        text = read_trusted(self.started_ray_head)
        return None if text is None else text.strip()

    def dashboard_address(self) -> str | None:
        """Where Ray's dashboard listens, ``<host>:<port>`` (DASHBOARD); None before the head is up, and in
        a job without a dashboard."""
        text = read_trusted(self.file(DASHBOARD))
        return None if text is None else text.strip() or None

    def write_container_args(self, options: Iterable[str]) -> None:
        write_atomic(self.file(CONTAINER_ARGS), "".join(f"{option}\n" for option in options))
