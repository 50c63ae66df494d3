"""The files of a raysub watch run, and the copy of the job script it submits.

A run keeps its state, lock and decision log beside the jobs' LOG_DIRs (<base>/<script name>.watch.json,
.lock, .log), often a project directory where others may create and replace entries. So each is opened
without following a link and used only when it is a file of this user's that nobody else may write
(checked on the open file, not by a path looked at before), and the state is replaced by a rename from a
file made new in the same directory. The job script is read once, when the run starts, and kept in the
user's own state home: every submission of the run submits that copy, whatever the path holds later
(docs/watch.md, "What watch trusts").
"""

import errno
import fcntl
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from raysub.log_base import user_name
from raysub.protocol.job_index import job_index_path

# Under the job index's directory (the state home's raysub/): one directory per run, holding its copy.
KEPT_DIR = "watch"
PRIVATE_FILE = 0o600


class WatchError(Exception):
    """A run that cannot start or go on; the message says what to do."""


def _problem(st: os.stat_result, written: bool) -> str | None:
    """What makes a file unfit to trust: not a plain file, another user's, or writable by others; and, for
    one ``written`` in place, a second name (a hard link planted to another file of the user's)."""
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != os.getuid():
        return f"it belongs to {user_name(st.st_uid)}, not to you"
    if st.st_mode & 0o022:
        return f"its mode {stat.S_IMODE(st.st_mode):04o} lets others write it"
    if written and st.st_nlink > 1:
        return f"it has {st.st_nlink} hard links, so writing it would write a file known by another name"
    return None


def open_own(path: Path, flags: int, follow: bool = False) -> int:
    """``path`` opened with ``flags`` (a file it creates is 0600), only if it is a regular file of this
    user's that nobody else may write; never through a link unless ``follow``. Its descriptor; WatchError
    naming the path otherwise (FileNotFoundError when it does not exist and ``flags`` do not create it)."""
    # O_NONBLOCK: a FIFO planted in a file's place must not hang the open; plain files ignore it.
    extra = os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags | extra, PRIVATE_FILE)
    except OSError as error:
        if error.errno != errno.ELOOP or follow:
            if isinstance(error, FileNotFoundError):
                raise
            raise WatchError(f"cannot open {path}: {error.strerror}") from error
        raise WatchError(
            f"refusing {path}: it is a symbolic link, which someone else could have put there; remove it"
        ) from None
    problem = _problem(os.fstat(fd), written=bool(flags & (os.O_WRONLY | os.O_RDWR)))
    if problem is not None:
        os.close(fd)
        raise WatchError(f"refusing {path}: {problem}; remove it, or make it yours alone")
    return fd


def read_own(path: Path, follow: bool = False) -> bytes:
    """The bytes of ``path``, opened as :func:`open_own` opens it."""
    with os.fdopen(open_own(path, os.O_RDONLY, follow), "rb") as file:
        return file.read()


def write_own(path: Path, text: str) -> None:
    """``text`` in place of ``path``: a new file beside it (O_EXCL, so never another's or a link's
    target), 0600, renamed over whatever the path held."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as error:
        raise WatchError(f"cannot write {path}: {error.strerror}") from error
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        Path(temporary).replace(path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise WatchError(f"cannot write {path}: {error.strerror}") from error


@dataclass(frozen=True)
class WatchFiles:
    """The files of one run, side by side: <base>/<script name>.watch.{json,lock,log}."""

    state: Path
    lock: Path
    log: Path

    @classmethod
    def beside(cls, base: Path, script: Path) -> "WatchFiles":
        stem = base / f"{script.name}.watch"
        return cls(Path(f"{stem}.json"), Path(f"{stem}.lock"), Path(f"{stem}.log"))

    def load_text(self) -> str | None:
        """The state file's text; None when there is none."""
        try:
            return read_own(self.state).decode(errors="replace")
        except FileNotFoundError:
            return None

    def save(self, text: str) -> None:
        write_own(self.state, text)

    def append(self, line: str) -> None:
        """One line onto the decision log."""
        with os.fdopen(open_own(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as log:
            log.write(line + "\n")


def _to_stderr(line: str) -> None:
    print(f"raysub: warning: {line}", file=sys.stderr)


@contextmanager
def locked(
    files: WatchFiles, warn: Callable[[str], None] = _to_stderr, holder: Callable[[], str] = lambda: ""
) -> Iterator[None]:
    """Hold the run's lock: one watcher per run. WatchError at once when another watcher holds it, naming
    it as ``holder()`` does (" (pid@host)", or nothing). On a filesystem whose flock fails, the run goes
    on unlocked, and ``warn`` says so."""
    fd = open_own(files.lock, os.O_RDONLY | os.O_CREAT)  # flock needs no write access
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WatchError(
                f"another raysub watch{holder()} is watching this run: {files.lock} is locked; "
                "stop that watcher first, or leave it be"
            ) from None
        except OSError as error:
            warn(
                f"cannot lock {files.lock} ({error.strerror}): make sure no other raysub watch runs this "
                "script from here"
            )
        yield
    finally:
        os.close(fd)


def kept_dir() -> Path:
    """Where runs keep their copies of the job script: the user's, 0700."""
    return job_index_path().parent / KEPT_DIR


def _private_dir(path: Path, make: bool = True) -> None:
    """``path`` made (0700) if missing and ``make``, then checked: a directory of this user's that only
    they may enter. FileNotFoundError when it is missing and not ``make``."""
    try:
        if make:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except FileNotFoundError:
        raise
    except OSError as error:
        raise WatchError(f"cannot make {path}: {error.strerror}") from error
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WatchError(f"refusing {path}: it must be a directory of yours that only you may enter (0700)")


@dataclass(frozen=True)
class KeptScript:
    """The job script as the run read it at its start (``original``), and the copy of it that every
    submission submits (``copy``, in the user's own state home)."""

    original: Path
    copy: Path

    @classmethod
    def make(cls, original: Path) -> "KeptScript":
        """Reads ``original`` once, through links (a file of this user's that nobody else may write, else
        WatchError), and keeps its bytes in a new directory of :func:`kept_dir`, under the same name (the
        job's name when the script gives none)."""
        try:
            content = read_own(original, follow=True)
        except FileNotFoundError:
            raise WatchError(f"{original}: no such job script") from None
        except WatchError as error:
            raise WatchError(f"{error}, since every job watch submits is this script's") from None
        _private_dir(kept_dir())
        try:
            copy = Path(tempfile.mkdtemp(prefix="run-", dir=kept_dir())) / original.name
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
            with os.fdopen(fd, "wb") as out:
                out.write(content)
        except OSError as error:
            raise WatchError(f"cannot keep a copy of {original} in {kept_dir()}: {error.strerror}") from error
        return cls(original, copy)

    @classmethod
    def reopen(cls, original: Path, copy: Path) -> "KeptScript":
        """The copy a run made at its start, checked again: in a run directory of :func:`kept_dir`, and
        the user's alone. WatchError when it is not, or is gone."""
        if copy.parent.parent != kept_dir():
            raise WatchError(
                f"the state names {copy} as its copy of {original}, which is not in {kept_dir()}"
            )
        try:
            _private_dir(copy.parent, make=False)
            read_own(copy)
        except FileNotFoundError:
            raise WatchError(
                f"the copy of {original} this run made at its start, {copy}, is gone: move the state file "
                "away to start a new run"
            ) from None
        return cls(original, copy)

    def changed(self) -> str | None:
        """How ``original`` differs from the copy now ("has changed", "has been removed", ...: the log adds
        "since the run started"), or None when it holds the same bytes. Only looks: a FIFO or a device put
        in its place is neither waited on nor read, nor a link another user planted followed."""
        try:
            link = os.lstat(self.original)
            if stat.S_ISLNK(link.st_mode) and link.st_uid != os.getuid():
                return f"has been replaced by a symbolic link of {user_name(link.st_uid)}'s"
            fd = os.open(self.original, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return "has been removed"
        except OSError as error:
            return f"has become unreadable ({error.strerror})"
        with os.fdopen(fd, "rb") as now:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "has been replaced by something that is not a regular file"
            kept = self.copy.read_bytes()
            return None if now.read(len(kept) + 1) == kept else "has changed"
