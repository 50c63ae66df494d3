"""raysub/node/join.py: a worker's `ray start`, loaded before the head is up and started with its address."""

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from raysub.node import join


def test_it_runs_ray_start_with_the_address_that_arrives_and_the_arguments_it_was_given(
    tmp_path: Path,
) -> None:
    address_file = tmp_path / "raysub_head_address"
    seen: list[list[str]] = []
    timer = threading.Timer(0.2, address_file.write_text, args=("10.0.0.1:6379\n",))
    timer.start()
    argv = ["--address-file", str(address_file), "--", "--block", "--num-gpus=0"]
    saved = sys.argv
    try:
        status = join.join(argv, lambda: seen.append(list(sys.argv)), os.getppid())
    finally:
        sys.argv = saved
        timer.join()
    assert status == 0
    assert seen == [["ray", "start", "--address=10.0.0.1:6379", "--block", "--num-gpus=0"]]


def test_it_never_starts_ray_once_the_worker_script_is_gone(tmp_path: Path) -> None:
    called: list[bool] = []
    not_my_parent = os.getppid() + 1
    argv = ["--address-file", str(tmp_path / "never"), "--", "--block"]
    assert join.join(argv, lambda: called.append(True), not_my_parent) == 0
    assert called == []


@pytest.mark.parametrize("content", ["", "\n"])
def test_an_empty_address_starts_nothing(tmp_path: Path, content: str) -> None:
    address_file = tmp_path / "raysub_head_address"
    address_file.write_text(content)
    assert join.wait_address(address_file, os.getppid()) is None


def test_the_worker_scripts_sigcont_wakes_it_at_once(tmp_path: Path) -> None:
    address_file = tmp_path / "raysub_head_address"
    waiting = threading.get_ident()

    def arrive() -> None:
        address_file.write_text("10.0.0.1:6379\n")
        signal.pthread_kill(waiting, join.WAKE)

    timer = threading.Timer(0.2, arrive)
    timer.start()
    started = time.monotonic()
    try:
        assert join.wait_address(address_file, os.getppid(), look=30) == "10.0.0.1:6379"
    finally:
        timer.join()
    assert time.monotonic() - started < 20  # woken by the signal, not by the next look 30 s on
    # Afterwards the signal is no longer blocked: Ray's processes would inherit the mask.
    assert join.WAKE not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
