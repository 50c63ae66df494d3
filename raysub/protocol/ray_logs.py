"""LOG_DIR/ray-logs/, Ray's own logs kept after the node's Ray temp dir is gone.

Each node, as it leaves (raysub/job/programs/ray_logs.py, from the node script's clean-up), gzips its Ray
session's ``logs`` directory (raylet.out, gcs_server.out, the workers' .out/.err, the dashboard's, ...)
into ``ray-logs/<node>/``, one ``<name>.gz`` per file, the newest first, until ``--keep-ray-logs`` MiB
of them (counted before compression) or its time is used up. A file that does not fit whole keeps its
end, where a process's last words are, under a first line that says so. What is left out is listed in
``ray-logs/<node>/left-out.tsv``: ``<bytes>\\t<why>\\t<name>`` per line. A ``.gz`` cut short by a kill
reads as far as it got.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from raysub import protocol

SUFFIX = ".gz"
LEFT_OUT = "left-out.tsv"
SESSION = re.compile(r"session_\d.*")  # Ray's session directories; session_latest is a link to the newest
CHUNK = 2**20
# gzip's fastest level: this runs while the job ends, with Slurm's kill on its way; logs shrink ~5x anyway.
LEVEL = 1
CUT_FRONT = "[raysub: the first {} bytes of this file were left out to stay within --keep-ray-logs]\n"
CUT_SHORT = "\n[raysub: copying stopped here, out of time as the job ended]\n"


@dataclass(frozen=True)
class KeptLog:
    """One of Ray's log files kept in LOG_DIR."""

    node: str
    name: str  # its path in Ray's logs directory, e.g. "raylet.out" or "old/worker-...err"
    path: Path  # the .gz in LOG_DIR

    @property
    def tag(self) -> str:
        return f"{self.node}/{self.name}"


# ---- the writer (a node, as it leaves) ----


def session_logs(temp_dir: Path) -> list[tuple[str, Path]]:
    """Every file of Ray's sessions under ``temp_dir`` (links left alone), with the name it is kept under:
    its path in the session's logs directory, after the session's name when there are several."""
    sessions = sorted(
        entry
        for entry in temp_dir.glob("session_*")
        if SESSION.fullmatch(entry.name) and not entry.is_symlink()
    )
    found = []
    for session in sessions:
        logs = session / "logs"
        for root, dirs, files in os.walk(logs):
            dirs[:] = [name for name in dirs if not Path(root, name).is_symlink()]
            for name in files:
                path = Path(root, name)
                if path.is_file() and not path.is_symlink():
                    relative = path.relative_to(logs).as_posix()
                    found.append((f"{session.name}/{relative}" if len(sessions) > 1 else relative, path))
    return found


def _newest_first(files: list[tuple[str, Path]]) -> Iterator[tuple[str, Path, int]]:
    stats = []
    for name, path in files:
        try:
            st = path.stat()
        except OSError:
            continue  # gone since it was listed
        stats.append((st.st_mtime, name, path, st.st_size))
    for _, name, path, size in sorted(stats, key=lambda entry: -entry[0]):
        yield name, path, size


def _mkdirs(directory: Path, mode: int) -> None:
    """``directory`` and its missing parents, each given ``mode`` (the umask may have taken bits)."""
    if directory.is_dir():
        return
    _mkdirs(directory.parent, mode)
    directory.mkdir(mode, exist_ok=True)
    directory.chmod(mode)


def _copy(source: Path, target: Path, skip: int, deadline: float, modes: tuple[int, int]) -> bool:
    """gzips ``source`` from byte ``skip`` on (from the next line's start) into ``target``; False when the
    deadline came first (the copy then says so at its end). ``modes``: of directories, of files."""
    _mkdirs(target.parent, modes[0])
    with source.open("rb") as src:
        raw = protocol.create_binary(target, modes[1], os.O_TRUNC | os.O_NOFOLLOW)
        with raw, gzip.GzipFile(target.stem, "wb", LEVEL, raw) as out:
            if skip:
                src.seek(skip)
                src.readline()
                out.write(CUT_FRONT.format(src.tell()).encode())
            while chunk := src.read(CHUNK):
                out.write(chunk)
                if time.monotonic() > deadline:
                    out.write(CUT_SHORT.encode())
                    return False
    return True


def keep(temp_dir: Path, target: Path, max_bytes: int, seconds: float) -> tuple[int, int]:
    """Copies Ray's logs under ``temp_dir`` into ``target`` (ray-logs/<node>), newest first, at most
    ``max_bytes`` of them and for ``seconds`` at most. Returns how many files were kept and how many
    left out."""
    deadline = time.monotonic() + seconds
    log_dir = target.parent.parent
    modes = (stat.S_IMODE(log_dir.stat().st_mode), protocol.log_file_mode(log_dir))
    left: list[str] = []
    kept = 0
    room = max_bytes
    for name, path, size in _newest_first(session_logs(temp_dir)):
        if room <= 0 or time.monotonic() > deadline:
            left.append(f"{size}\t{'out of room' if room <= 0 else 'out of time'}\t{name}")
            continue
        try:
            whole = _copy(path, target / f"{name}{SUFFIX}", max(size - room, 0), deadline, modes)
        except OSError as error:
            left.append(f"{size}\tunreadable: {error.strerror or error}\t{name}")
            continue
        kept += 1
        room -= size
        if not whole:
            room = 0
    if left:
        _mkdirs(target, modes[0])
        with protocol.create(target / LEFT_OUT, modes[1], os.O_TRUNC) as out:
            out.write("".join(f"{line}\n" for line in left))
    return kept, len(left)


# ---- the reader ----


def kept_logs(log_dir: Path, node: str | None = None) -> list[KeptLog]:
    """The Ray logs kept in ``log_dir`` (of ``node`` only, when given), by node then name."""
    base = log_dir / protocol.RAY_LOGS_DIR
    nodes = (
        [base / node]
        if node is not None
        else sorted(base.glob("*"), key=lambda p: protocol.natural_key(p.name))
    )
    found = []
    for directory in nodes:
        if directory.is_dir() and not directory.is_symlink():
            for path in directory.rglob(f"*{SUFFIX}"):
                name = path.relative_to(directory).as_posix().removesuffix(SUFFIX)
                found.append(KeptLog(directory.name, name, path))
    return sorted(found, key=lambda log: (protocol.natural_key(log.node), log.name))


def read_text(path: Path) -> str:
    """A kept log's text (bytes that are not UTF-8 replaced), as far as it decompresses: a copy cut short
    by a kill reads up to where it stopped."""
    out = bytearray()
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        with path.open("rb") as compressed:
            while chunk := compressed.read(CHUNK):
                out += inflate.decompress(chunk)
    except (OSError, zlib.error):
        pass
    return out.decode(errors="replace")
