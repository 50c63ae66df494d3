"""raysub/job/programs/join.py: a worker's `ray start`, loaded before the head is up and started with its
address."""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from raysub.job.lib import waits
from raysub.job.manifest import timing_args
from raysub.job.programs import join
from raysub.protocol import write_atomic
from raysub.spec import JobSpec

LOOK = JobSpec(nodes=2).timing.join_look_s


def joiner_argv(address_file: Path, *ray_args: str) -> list[str]:
    return [
        "--address-file",
        str(address_file),
        *timing_args(JobSpec(nodes=2).timing, "join"),
        "--",
        *ray_args,
    ]


def test_it_runs_ray_start_with_the_address_that_arrives_and_the_arguments_it_was_given(
    tmp_path: Path,
) -> None:
    address_file = tmp_path / "raysub_head_address"
    seen: list[list[str]] = []
    timer = threading.Timer(0.2, write_atomic, args=(address_file, "10.0.0.1:6379\n"))
    timer.start()
    saved = sys.argv
    try:
        argv = joiner_argv(address_file, "--block", "--num-gpus=0")
        status = join.join(argv, lambda: lambda: seen.append(list(sys.argv)), os.getppid())
    finally:
        sys.argv = saved
        timer.join()
    assert status == 0
    assert seen == [["ray", "start", "--address=10.0.0.1:6379", "--block", "--num-gpus=0"]]


def test_it_loads_ray_in_another_thread_and_starts_it_from_the_main_thread(tmp_path: Path) -> None:
    address_file = tmp_path / "raysub_head_address"
    threads: dict[str, bool] = {}

    def load() -> Callable[[], object]:
        threads["load"] = threading.current_thread() is threading.main_thread()
        write_atomic(address_file, "10.0.0.1:6379\n")  # as the worker script publishes it
        time.sleep(0.5)  # the address came before the load was done: the main thread waits for it
        return lambda: threads.setdefault("run", threading.current_thread() is threading.main_thread())

    saved = sys.argv
    try:
        assert join.join(joiner_argv(address_file, "--block"), load, os.getppid()) == 0
    finally:
        sys.argv = saved
    assert threads == {"load": False, "run": True}


def test_a_ray_that_fails_to_load_is_said_and_started_by_nobody(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address_file = tmp_path / "raysub_head_address"
    write_atomic(address_file, "10.0.0.1:6379\n")

    def load() -> Callable[[], object]:
        raise ImportError("no module named ray")

    assert join.join(joiner_argv(address_file, "--block"), load, os.getppid()) == 1
    assert "Ray's command line did not load" in capsys.readouterr().err


def test_it_never_starts_ray_once_the_worker_script_is_gone(tmp_path: Path) -> None:
    called: list[bool] = []
    not_my_parent = os.getppid() + 1
    argv = joiner_argv(tmp_path / "never", "--block")
    assert join.join(argv, lambda: lambda: called.append(True), not_my_parent) == 0
    assert called == []


def test_a_session_linux_will_not_give_back_its_share_starts_no_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address_file = tmp_path / "raysub_head_address"
    write_atomic(address_file, "10.0.0.1:6379\n")
    background = waits.Background(tmp_path / "autogroup")
    background.niced = True  # as if lowered; the file is not there to set it back
    monkeypatch.setattr(background, "lower", lambda: None)  # this test's process keeps its session
    called: list[bool] = []
    argv = joiner_argv(address_file, "--block")
    assert join.join(argv, lambda: lambda: called.append(True), os.getppid(), background) == 1
    assert called == []
    assert "back to nice 0" in capsys.readouterr().err


def test_setting_a_sessions_nice_waits_out_linuxs_rate_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("")
    refusals = iter([BlockingIOError(), BlockingIOError()])
    write = os.write

    def rate_limited(fd: int, data: bytes) -> int:
        refusal = next(refusals, None)
        if refusal is not None:
            raise refusal
        return write(fd, data)

    monkeypatch.setattr(os, "write", rate_limited)
    assert waits.set_session_nice(0, autogroup)
    assert autogroup.read_text() == "0"
    assert not waits.set_session_nice(0, tmp_path / "none")  # no autogroups here


def autogroup_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="needs Linux's autogroups")
def test_ray_loads_with_the_least_cpu_and_starts_with_the_usual_share(tmp_path: Path) -> None:
    """The real joiner, as the worker script runs it, with a stand-in Ray whose import takes a second
    and a `ray` command that writes down its autogroup."""
    address_file, seen = tmp_path / "raysub_head_address", tmp_path / "ray-saw"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f'#!/bin/sh\ncat /proc/self/autogroup >{seen}\necho "$@" >>{seen}\n')
    (bin_dir / "ray").chmod(0o755)
    fakes = Path(__file__).resolve().parents[1] / "fakes" / "pyray"
    env = {
        **os.environ,
        "PYTHONPATH": str(fakes),
        "FAKE_RAY_LOAD_SECONDS": "1",
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    argv = [sys.executable, join.__file__, *joiner_argv(address_file, "--block")]
    # Not a process group leader, as a background job of the worker script is not.
    with subprocess.Popen(argv, env=env) as joiner:
        try:
            time.sleep(0.5)
            # Loading: a session of its own, its autogroup niced.
            assert os.getsid(joiner.pid) == joiner.pid
            assert autogroup_nice(joiner.pid) == 19
            write_atomic(address_file, "10.0.0.1:6379\n")
            os.kill(joiner.pid, waits.WAKE)
            assert joiner.wait(timeout=20) == 0
        finally:
            joiner.kill()
    nice, args = seen.read_text().splitlines()
    assert nice.endswith("nice 0")  # Ray's processes start with the usual share
    assert args == "start --address=10.0.0.1:6379 --block"


@pytest.mark.parametrize("content", ["", "\n"])
def test_an_empty_address_starts_nothing(tmp_path: Path, content: str) -> None:
    address_file = tmp_path / "raysub_head_address"
    address_file.write_text(content)
    assert waits.wait_address(address_file, os.getppid(), LOOK) is None


def test_the_worker_scripts_sigcont_wakes_it_at_once(tmp_path: Path) -> None:
    address_file = tmp_path / "raysub_head_address"
    waiting = threading.get_ident()

    def arrive() -> None:
        write_atomic(address_file, "10.0.0.1:6379\n")
        signal.pthread_kill(waiting, waits.WAKE)

    timer = threading.Timer(0.2, arrive)
    timer.start()
    started = time.monotonic()
    try:
        assert waits.wait_address(address_file, os.getppid(), look=30) == "10.0.0.1:6379"
    finally:
        timer.join()
    assert time.monotonic() - started < 20  # woken by the signal, not by the next look 30 s on
    # Afterwards the signal is no longer blocked: Ray's processes would inherit the mask.
    assert waits.WAKE not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


@pytest.mark.parametrize("mode", [0o620, 0o602])
def test_an_address_file_others_could_have_written_is_refused(tmp_path: Path, mode: int) -> None:
    address = tmp_path / "raysub_head_address"
    address.write_text("10.6.6.6:6379\n")
    address.chmod(mode)
    with pytest.raises(PermissionError, match=f"refusing {address}"):
        waits.wait_address(address, os.getppid(), LOOK)
    address.chmod(0o600)
    assert waits.wait_address(address, os.getppid(), LOOK) == "10.6.6.6:6379"
