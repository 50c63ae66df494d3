"""The per-user job index: the Python reader and writer, and the line the batch script appends (run here
with fake srun and scontrol) whatever the state of HOME."""

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.job_index import IndexEntry, append_job_index, job_index_path, read_job_index
from tests.support import batch

FAKES = batch.FAKES
JOB_ID = str(os.getpid())


def test_written_lines_read_back_in_order(tmp_path: Path) -> None:
    index = tmp_path / "state" / protocol.JOB_INDEX_DIR / protocol.JOB_INDEX
    entries = [
        IndexEntry("12", 0, Path("/scratch/u/exp/12-logs"), 1_700_000_000),
        IndexEntry("12", 1, Path("/scratch/u/exp/12-1-logs"), 1_700_000_100),
        IndexEntry("13", 0, Path("/scratch/u/a\ttab/13-logs"), 1_700_000_200),  # LOG_DIR may hold a tab
    ]
    for entry in entries:
        append_job_index(index, entry)
    assert index.read_bytes().startswith(b"12\t0\t/scratch/u/exp/12-logs\t1700000000\n12\t1\t")
    assert read_job_index(index) == entries
    assert (stat.S_IMODE(index.parent.stat().st_mode), stat.S_IMODE(index.stat().st_mode)) == (0o700, 0o600)
    assert read_job_index(tmp_path / "none") == []


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\n",
        b"12\n",
        b"12\t0\t/x\n",
        b"x12\t0\t/x/12-logs\t5\n",
        b"12\t-1\t/x/12-logs\t5\n",
        b"12\t0\trelative/12-logs\t5\n",
        b"12\t0\t/x/12-logs\t5.5\n",
        b"\xff\xfe\x00\t\t\t\n",
        b"12\t0\t/x/12-logs\t5",  # a line still being written: no newline yet
    ],
)
def test_garbled_lines_are_skipped(tmp_path: Path, garbage: bytes) -> None:
    index = tmp_path / protocol.JOB_INDEX
    good = IndexEntry("7", 0, Path("/x/7-logs"), 1)
    index.write_bytes(good.line() + garbage)
    assert read_job_index(index) == [good]
    index.write_bytes(garbage + b"\n" + good.line())  # the next line after garbage is read
    assert read_job_index(index)[-1] == good


def test_index_path_follows_xdg_state_home_then_home() -> None:
    tail = Path(protocol.JOB_INDEX_DIR, protocol.JOB_INDEX)
    assert job_index_path({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path("/s") / tail
    for relative_or_empty in ("", "state"):  # the XDG spec: ignore a relative path
        env = {"XDG_STATE_HOME": relative_or_empty, "HOME": "/h"}
        assert job_index_path(env) == Path("/h", protocol.STATE_HOME_DEFAULT) / tail
    import pwd

    home = pwd.getpwuid(os.getuid()).pw_dir
    assert job_index_path({}) == Path(home, protocol.STATE_HOME_DEFAULT) / tail


# ---- the batch script's writer (raysub/job/templates/ray.sub.j2), run here with fake srun and scontrol ----


def run_batch_script(
    tmp_path: Path, env: dict[str, str], restart: int = 0
) -> subprocess.CompletedProcess[str]:
    """A 2-node job with a relative --log-dir, its batch script run in ``tmp_path/submit``."""
    spec = batch.job_spec("rsi", nodes=2)
    try:
        return batch.run_batch_script(tmp_path, spec, env, JOB_ID, restart).done
    finally:
        shutil.rmtree(f"/tmp/rsi{JOB_ID}", ignore_errors=True)


def test_the_batch_script_appends_this_attempt(tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = int(time.time())
    run_batch_script(tmp_path, {"HOME": str(tmp_path), "XDG_STATE_HOME": str(state)}, restart=2)
    index = state / protocol.JOB_INDEX_DIR / protocol.JOB_INDEX
    (entry,) = read_job_index(index)
    log_dir = (tmp_path / "submit" / "runs" / protocol.log_dir_name(JOB_ID, 2)).resolve()
    assert (entry.job_id, entry.requeues, entry.log_dir) == (JOB_ID, 2, log_dir)
    assert before <= entry.started <= time.time()
    assert index.read_bytes() == entry.line()  # the script's printf and IndexEntry.line agree
    assert (stat.S_IMODE(index.parent.stat().st_mode), stat.S_IMODE(index.stat().st_mode)) == (0o700, 0o600)


def fake_getent(tmp_path: Path, home: Path | None) -> str:
    """A PATH whose getent knows this user's passwd entry, with ``home``, or (None) knows nobody."""
    fakes = tmp_path / "bin"
    fakes.mkdir()
    entry = f'printf "u:x:%s:%s::{home}:/bin/bash\\n" "$2" "$2"' if home else "exit 2"
    getent = fakes / "getent"
    getent.write_text(f'#!/usr/bin/env bash\n[[ $1 == passwd && $2 == "$(id -u)" ]] || exit 2\n{entry}\n')
    getent.chmod(0o700)
    return f"{fakes}:{FAKES}:/usr/bin:/bin"


def test_without_home_the_batch_script_takes_the_passwd_entry(tmp_path: Path) -> None:
    # sbatch --export=NONE: no HOME, no XDG_STATE_HOME.
    home = tmp_path / "home"
    home.mkdir()
    run_batch_script(tmp_path, {"PATH": fake_getent(tmp_path, home)})
    index = home / protocol.STATE_HOME_DEFAULT / protocol.JOB_INDEX_DIR / protocol.JOB_INDEX
    assert [e.job_id for e in read_job_index(index)] == [JOB_ID]


@pytest.mark.parametrize("home", ["a file", "unset, and no passwd entry"])
def test_an_unusable_home_does_not_fail_the_job(tmp_path: Path, home: str) -> None:
    if home == "a file":  # nothing can be made under it, not even by root
        (tmp_path / "home").write_text("")
        env = {"HOME": str(tmp_path / "home")}
    else:
        env = {"PATH": fake_getent(tmp_path, None)}
    done = run_batch_script(tmp_path, env)
    assert f"could not record job {JOB_ID} in the job index" in done.stderr
