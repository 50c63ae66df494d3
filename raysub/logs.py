"""Every log of a job as one stream, each line tagged with where it came from; optionally followed live."""

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from raysub import protocol
from raysub.jobs import Job
from raysub.protocol import ray_logs
from raysub.protocol.logdir import NodeEntry


@dataclass(frozen=True)
class Source:
    tag: str
    path: Path
    kept: bool = False  # one of Ray's logs kept in LOG_DIR/ray-logs (gzipped)

    def text(self) -> str:
        return ray_logs.read_text(self.path) if self.kept else self.path.read_text(errors="replace")


@dataclass(frozen=True)
class Selection:
    """Which logs to show; all of them when nothing is chosen."""

    head: bool = False
    driver: bool = False
    worker: int | None = None
    node: str | None = None
    sandbox: bool = False

    def everything(self) -> bool:
        return not (self.head or self.driver or self.sandbox or self.worker is not None or self.node)


def not_in_job(job: Job, selection: Selection) -> str | None:
    """Why the --worker or --node asked for is none of the job's, or None (also before the batch script
    has written the node map: then nothing is known yet)."""
    entries = job.logs.node_map()
    if not entries:
        return None
    if selection.worker is not None:
        workers = sorted(entry.index for entry in entries if entry.role == protocol.ROLE_WORKER)
        if selection.worker not in workers:
            have = f"workers {workers[0]} to {workers[-1]}" if workers else "no workers"
            return f"--worker {selection.worker}: job {job.job_id} has {have}"
    if selection.node is not None and selection.node not in {entry.node for entry in entries}:
        return f"--node {selection.node}: no node of job {job.job_id} (raysub status {job.job_id} shows them)"
    return None


def sources(job: Job, selection: Selection) -> list[Source]:
    """The job's logs that exist now, head first, then workers and sandboxes in natural order, driver last."""
    logs = job.logs
    entries = logs.node_map()
    workers = sum(1 for e in entries if e.role == protocol.ROLE_WORKER)
    if not workers:  # the node map is not written yet: count the worker logs
        node_logs = logs.path / protocol.NODE_LOG_DIR
        workers = len(list(node_logs.glob(f"{protocol.WORKER_LOG_PREFIX}*{protocol.LOG_SUFFIX}")))
    found: list[Source] = []
    show_all = selection.everything()
    for entry in entries or [NodeEntry(protocol.ROLE_HEAD, 0, "")]:
        is_head = entry.role == protocol.ROLE_HEAD
        wanted = (
            show_all
            or (is_head and selection.head)
            or (not is_head and selection.worker == entry.index)
            or (selection.node is not None and selection.node == entry.node)
        )
        if wanted:
            tag = "head" if is_head else protocol.worker_tag(entry.index, workers)
            found.append(Source(tag, logs.log_of(entry, workers)))
    if not entries and (show_all or selection.worker is not None):
        for index in range(workers):
            if show_all or selection.worker == index:
                found.append(Source(protocol.worker_tag(index, workers), logs.worker_log(index, workers)))
    if show_all or selection.sandbox:
        pattern = f"{protocol.SANDBOX_LOG_PREFIX}*{protocol.LOG_SUFFIX}"
        for path in sorted(
            (logs.path / protocol.NODE_LOG_DIR).glob(pattern),
            key=lambda path: protocol.natural_key(path.name),
        ):
            found.append(Source("sb" + path.stem.removeprefix(protocol.SANDBOX_LOG_PREFIX), path))
    if show_all or selection.driver:
        for run, path in enumerate(logs.driver_logs()):
            found.append(Source(f"driver{run or ''}", path))
    return [s for s in found if s.path.exists()]


def ray_sources(job: Job, selection: Selection, name_glob: str | None) -> list[Source]:
    """Ray's own logs kept in LOG_DIR/ray-logs: of every node, or of those --head, --worker and --node
    pick; only the files whose name (or path in Ray's logs directory) matches ``name_glob`` when given."""
    entries = job.logs.node_map()
    picked = {
        entry.node
        for entry in entries
        if (selection.head and entry.role == protocol.ROLE_HEAD)
        or (selection.worker == entry.index and entry.role == protocol.ROLE_WORKER)
    }
    picked |= {selection.node} if selection.node else set()
    return [
        Source(kept.tag, kept.path, kept=True)
        for kept in ray_logs.kept_logs(job.logs.path)
        if (not picked or kept.node in picked)
        and (
            name_glob is None
            or fnmatch(kept.name, name_glob)
            or fnmatch(kept.name.rsplit("/")[-1], name_glob)
        )
    ]


def no_ray_logs(log_dir: Path, name_glob: str | None) -> str:
    """Why ``raysub logs --ray`` has nothing to show."""
    if name_glob is not None and ray_logs.kept_logs(log_dir):
        return f"no kept Ray log matches --file {name_glob} (raysub logs --ray lists them all)"
    where = log_dir / protocol.RAY_LOGS_DIR
    return (
        f"no Ray logs in {where}: nodes keep them as they leave, so not while the job runs, and not "
        "with --keep-ray-logs 0"
    )


def tagged(source: Source, lines: list[str], width: int) -> Iterator[str]:
    for line in lines:
        yield f"{source.tag:<{width}} | {line}"


def show(found: list[Source], last: int | None, pattern: re.Pattern[str] | None) -> Iterator[str]:
    """Each log in turn: its last ``last`` lines (all with None) that match ``pattern``."""
    width = max((len(s.tag) for s in found), default=4)
    for source in found:
        lines = source.text().splitlines()
        if pattern is not None:
            lines = [line for line in lines if pattern.search(line)]
        yield from tagged(source, lines[-last:] if last else lines, width)


def follow_logs(
    job: Job,
    selection: Selection,
    pattern: re.Pattern[str] | None,
    finished: Callable[[], bool],
    poll: float = 0.5,
) -> Iterator[str]:
    """New lines of every selected log as they are written, files created later included, until
    ``finished()`` says the job is over (then what is left is read once more)."""
    offsets: dict[Path, int] = {}
    partial: dict[Path, str] = {}
    done = False
    while True:
        found = sources(job, selection)
        width = max((len(s.tag) for s in found), default=6)
        for source in found:
            with source.path.open("rb") as f:
                f.seek(offsets.get(source.path, 0))
                data = f.read()
            offsets[source.path] = offsets.get(source.path, 0) + len(data)
            text = partial.pop(source.path, "") + data.decode(errors="replace")
            lines = text.split("\n")
            if lines[-1]:
                partial[source.path] = lines[-1]
            complete = [line for line in lines[:-1] if pattern is None or pattern.search(line)]
            yield from tagged(source, complete, width)
        if done:
            return
        done = finished()
        if not done:
            time.sleep(poll)
