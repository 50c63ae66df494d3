"""Ray's own logs kept in LOG_DIR/ray-logs (raysub/protocol/ray_logs.py, the node program
raysub/job/programs/ray_logs.py), shown by ``raysub logs --ray`` and read by ``raysub health``
(raysub/health/ray_fatal.py) on real Ray log blocks (tests/fixtures/corpus/ray/)."""

import gzip
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.health import ray_fatal
from raysub.health.checkup import ray_log_findings
from raysub.protocol import ray_logs
from raysub.protocol.logdir import LogDir
from tests.conftest import RunCli
from tests.support.corpus import blocks
from tests.support.prereq import REPO

SESSION = "session_2026-11-28_10-53-58_256025_28970"


def ray_temp_dir(root: Path) -> Path:
    """A node's Ray temp dir as Ray leaves it: one session's logs, session_latest linking to it, a link
    that leads out of it, files of different ages."""
    temp = root / "rs-4711" / "node3"
    logs = temp / SESSION / "logs"
    (logs / "old").mkdir(parents=True)
    (temp / "session_latest").symlink_to(temp / SESSION)
    files = {
        "gcs_server.out": "gcs line\n" * 10,  # 90 bytes, oldest
        "old/worker-1-01000000-77.err": "old worker\n",
        "raylet.out": "".join(f"raylet line {n}\n" for n in range(100)),  # ~1.5 kB
        "ray_process_exit.log": "newest\n",
    }
    for age, (name, text) in enumerate(reversed(files.items())):
        path = logs / name
        path.write_text(text)
        os.utime(path, (time.time() - 100 * age, time.time() - 100 * age))
    (root / "secret").write_text("not Ray's\n")
    (logs / "outside.log").symlink_to(root / "secret")
    return temp


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "4711-logs"
    directory.mkdir(mode=0o750)
    directory.chmod(0o750)
    return directory


def test_every_log_is_kept_gzipped_with_its_path_and_the_log_dirs_modes(
    tmp_path: Path, log_dir: Path
) -> None:
    temp = ray_temp_dir(tmp_path)
    target = log_dir / protocol.RAY_LOGS_DIR / "node3"
    assert ray_logs.keep(temp, target, 2**20, 60) == (4, 0)
    kept = ray_logs.kept_logs(log_dir)
    assert [log.tag for log in kept] == [
        "node3/gcs_server.out",
        "node3/old/worker-1-01000000-77.err",
        "node3/ray_process_exit.log",
        "node3/raylet.out",
    ]
    assert ray_logs.read_text(kept[3].path) == (temp / SESSION / "logs" / "raylet.out").read_text()
    assert gzip.decompress(kept[0].path.read_bytes()) == b"gcs line\n" * 10
    assert stat.S_IMODE(kept[0].path.stat().st_mode) == 0o640  # LOG_DIR 0750: 0600 and the read bits
    assert stat.S_IMODE((log_dir / protocol.RAY_LOGS_DIR).stat().st_mode) == 0o750
    assert not (target / ray_logs.LEFT_OUT).exists()
    assert ray_logs.kept_logs(log_dir, "node4") == []


def test_the_newest_first_within_the_cap_a_cut_file_keeps_its_end(tmp_path: Path, log_dir: Path) -> None:
    temp = ray_temp_dir(tmp_path)
    target = log_dir / protocol.RAY_LOGS_DIR / "node3"
    assert ray_logs.keep(temp, target, 500, 60) == (2, 2)  # ray_process_exit.log whole, raylet.out's end
    names = [log.name for log in ray_logs.kept_logs(log_dir)]
    assert names == ["ray_process_exit.log", "raylet.out"]
    raylet = ray_logs.read_text(target / "raylet.out.gz")
    first, *rest = raylet.splitlines()
    assert first.startswith("[raysub: the first ") and first.endswith(
        "left out to stay within --keep-ray-logs]"
    )
    assert rest[-1] == "raylet line 99" and rest[0].startswith("raylet line ")  # whole lines only
    assert len("".join(f"{line}\n" for line in rest)) <= 500
    left = (target / ray_logs.LEFT_OUT).read_text().splitlines()
    assert left == ["11\tout of room\told/worker-1-01000000-77.err", "90\tout of room\tgcs_server.out"]


def test_out_of_time_leaves_the_rest_listed(tmp_path: Path, log_dir: Path) -> None:
    target = log_dir / protocol.RAY_LOGS_DIR / "node3"
    assert ray_logs.keep(ray_temp_dir(tmp_path), target, 2**20, 0) == (0, 4)
    assert all("\tout of time\t" in line for line in (target / ray_logs.LEFT_OUT).read_text().splitlines())


def test_a_copy_cut_short_by_a_kill_reads_as_far_as_it_got(tmp_path: Path) -> None:
    whole = gzip.compress(os.urandom(64).hex().encode() * 1000 + b"\nlast line\n")
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    text = ray_logs.read_text(tmp_path / "cut.gz")
    assert len(text) > 0 and "last line" not in text
    (tmp_path / "garbage.gz").write_bytes(b"not gzip at all")
    assert ray_logs.read_text(tmp_path / "garbage.gz") == ""


def test_the_node_program_says_what_it_kept(tmp_path: Path, log_dir: Path) -> None:
    temp = ray_temp_dir(tmp_path)
    argv = [sys.executable, "-m", "raysub.job.programs.ray_logs", f"--temp-dir={temp}",
            f"--log-dir={log_dir}", "--node=node3", "--max-mib=64", "--seconds=10"]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == f"raysub: kept 4 of Ray's log files in {log_dir / 'ray-logs' / 'node3'}\n"
    nowhere = [*argv[:4], f"--log-dir={tmp_path / 'gone'}", *argv[5:]]
    failed = subprocess.run(nowhere, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert failed.returncode == 0 and "could not keep Ray's logs" in failed.stderr


# ---- raysub logs --ray ----


def job_with_kept_logs(tmp_path: Path, log_dir: Path) -> None:
    (log_dir / protocol.NODE_MAP).write_text("head\t0\tnode1\nworker\t0\tnode3\n")
    ray_logs.keep(ray_temp_dir(tmp_path), log_dir / protocol.RAY_LOGS_DIR / "node3", 2**20, 60)
    head = log_dir / protocol.RAY_LOGS_DIR / "node1"
    head.mkdir(mode=0o750)
    (head / "gcs_server.out.gz").write_bytes(gzip.compress(b"head gcs\n"))


def test_logs_ray_shows_kept_logs_by_node_and_by_file(
    tmp_path: Path, log_dir: Path, raysub_cli: RunCli
) -> None:
    job_with_kept_logs(tmp_path, log_dir)
    every = raysub_cli("logs", str(log_dir), "--ray", "--file", "gcs_server.out")
    assert every.code == 0, every.stderr
    assert every.stdout.splitlines() == [
        "node1/gcs_server.out | head gcs",
        *["node3/gcs_server.out | gcs line"] * 10,
    ]
    worker = raysub_cli("logs", str(log_dir), "--ray", "--worker", "0", "--file", "raylet.*", "-n", "1")
    assert worker.stdout == "node3/raylet.out | raylet line 99\n"
    nested = raysub_cli("logs", str(log_dir), "--ray", "--node", "node3", "--file", "worker-*.err")
    assert nested.stdout == "node3/old/worker-1-01000000-77.err | old worker\n"


def test_logs_ray_says_why_there_is_nothing(tmp_path: Path, log_dir: Path, raysub_cli: RunCli) -> None:
    running = raysub_cli("logs", str(log_dir), "--ray")
    assert running.code == 1
    assert "no Ray logs in" in running.stderr and "not while the job runs" in running.stderr
    job_with_kept_logs(tmp_path, log_dir)
    none = raysub_cli("logs", str(log_dir), "--ray", "--file", "nothing*")
    assert "no kept Ray log matches --file nothing*" in none.stderr
    for wrong, says in ((["--file", "x"], "give --ray"), (["--ray", "--follow"], "--follow does not apply")):
        refused = raysub_cli("logs", str(log_dir), *wrong)
        assert refused.code == 2 and says in refused.stderr


# ---- what health reads in them: real blocks ----

RAY_BLOCKS = blocks("ray")


@pytest.mark.parametrize("block", RAY_BLOCKS, ids=[block.name for block in RAY_BLOCKS])
def test_each_real_block_gives_the_line_a_reader_quotes(block) -> None:  # type: ignore[no-untyped-def]
    found = {f.kind: f.line for f in ray_fatal.fatal_lines(block.header["file"], block.text)}
    expected = {}
    if block.header["fatal"] != "none":
        kind, _, line = block.header["fatal"].partition(": ")
        expected[kind] = line
    if block.header["crash"] != "none":
        expected[ray_fatal.RAY_CRASH] = block.header["crash"]
    assert found == expected
    assert ray_fatal.read_by_name(block.header["file"])


def test_only_the_files_that_hold_such_lines_are_read() -> None:
    assert ray_fatal.read_by_name("python-core-worker-0123abcd_77.log")
    assert ray_fatal.read_by_name("old/raylet.out")
    assert not ray_fatal.read_by_name("worker-0123abcd-01000000-77.err")  # the driver's log has these
    assert not ray_fatal.read_by_name("events/event_RAYLET.log")


def test_health_names_the_node_and_the_file(tmp_path: Path, log_dir: Path) -> None:
    died = next(block for block in RAY_BLOCKS if block.header["file"] == "ray_process_exit.log")
    node3 = log_dir / protocol.RAY_LOGS_DIR / "node3"
    node3.mkdir(parents=True)
    (node3 / "ray_process_exit.log.gz").write_bytes(gzip.compress(died.text.encode()))
    (node3 / "worker-1-01000000-77.err.gz").write_bytes(
        gzip.compress(b"Traceback (most recent call last):\n")
    )
    (finding,) = ray_log_findings(LogDir(log_dir))
    assert (finding.kind, finding.node, finding.reason) == (
        "fatal",
        "node3",
        "ray_process_died in Ray's ray_process_exit.log",
    )
    assert finding.line is not None and finding.line.endswith("raylet [exit code=-9 (signal 9)]")
