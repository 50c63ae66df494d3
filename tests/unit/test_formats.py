"""Each LOG_DIR format: its Python writer and reader agree, the reader survives what a reader may meet (a
partial line, garbage), and what the bash writers wrote in a real run of the batch script reads back."""

import fcntl
import os
import shutil
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol import preflight_log
from raysub.protocol.logdir import LogDir, NodeEntry
from raysub.protocol.preflight_log import Check
from tests.support.batch import NODES, job_spec, run_batch_script


def test_node_map(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    assert logs.node_map() == []
    entries = [NodeEntry(protocol.ROLE_HEAD, 0, "n1"), NodeEntry(protocol.ROLE_WORKER, 0, "n2")]
    logs.write_node_map(entries)
    assert logs.node_map() == entries
    with logs.file(protocol.NODE_MAP).open("a") as out:
        out.write("worker\tx\tn3\nworker\t1\tn")  # garbage, and half a line, are left out
    assert logs.node_map() == entries


def test_units_joined_nodes_and_driver_exit_code(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    assert (logs.units(), logs.joined_nodes(), logs.driver_exit_code()) == (None, [], None)
    protocol.write_units(logs.path, 12)  # the head's unit counter writes them
    protocol.write_joined_nodes(logs.path, ["n2", "n1"])
    logs.write_driver_exit_code(-15)
    assert (logs.units(), logs.joined_nodes(), logs.driver_exit_code()) == (12, ["n1", "n2"], -15)
    logs.worker_units.write_text("")  # never a count that was not written whole
    assert logs.units() is None
    assert not list(tmp_path.glob("*.tmp.*")), "a temporary file was left"


def test_container_options(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    options = [
        "--container-image=img",
        "--container-mounts=/a:/a",
        f"{protocol.CONTAINER_NAME_OPTION}raysub-1",
    ]
    logs.write_container_args(options)
    assert logs.container_args() == options
    assert logs.container_args(head=False) == options[:2]


def test_ended_first_writer_wins_and_goes_on_the_timeline(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    assert logs.ended_reason() is None
    assert logs.end("head on n1: it broke", "n1")
    assert not logs.end("worker 0 on n2: me too", "n2")
    assert logs.ended_reason() == "head on n1: it broke"
    assert [(e.phase, e.node, e.detail) for e in logs.timeline()] == [
        (protocol.PHASE_ENDED, "n1", "head on n1: it broke")
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        protocol.ENDED,
        protocol.TIMELINE,
        protocol.TIMELINE_LOCK,
    ]


def test_timeline_skips_what_is_not_a_whole_event(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    logs.append_timeline(protocol.PHASE_DRIVER_START, "n1", "")
    with logs.file(protocol.TIMELINE).open("a") as out:
        out.write('[1, 2]\n{"t": 1}\n{"t": "x", "phase": "p", "node": "n", "detail": ""}\n{"t": 2, "pha')
    [event] = logs.timeline()
    assert (event.phase, event.node, event.detail) == (protocol.PHASE_DRIVER_START, "n1", "")


def test_what_the_batch_script_writes_reads_back(tmp_path: Path) -> None:
    job_id = str(os.getpid())
    spec = job_spec("rsf", container_image="img")
    try:
        job = run_batch_script(tmp_path, spec, {"HOME": str(tmp_path)}, job_id)
    finally:
        shutil.rmtree(f"/tmp/rsf{job_id}", ignore_errors=True)
    logs = job.log_dir
    assert logs.node_map() == [
        NodeEntry(protocol.ROLE_HEAD, 0, NODES[0]),
        NodeEntry(protocol.ROLE_WORKER, 0, NODES[1]),
        NodeEntry(protocol.ROLE_WORKER, 1, NODES[2]),
    ]
    assert logs.container_args() == job.steps[protocol.HEAD_SCRIPT].options("--container-")
    reason = logs.ended_reason()
    assert reason is not None and reason.endswith("step exited with status 0 before the driver finished")
    events = [(e.phase, e.node, e.detail) for e in logs.timeline()]
    assert events == [
        (protocol.PHASE_JOB_START, NODES[0], "attempt 0"),
        (protocol.PHASE_ENDED, NODES[0], reason),
    ]


@pytest.mark.parametrize("writer", ["timeline", "preflight"])
def test_a_lock_held_for_ever_delays_a_python_writer_only_so_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], writer: str
) -> None:
    """As the bash writers' flock -w 10: a lock nobody releases (a stuck NFS client holds it) costs
    LOCK_WAIT_S, then the line is written without it and stderr names the file."""
    monkeypatch.setattr(protocol, "LOCK_WAIT_S", 0.3)
    logs = LogDir(tmp_path)
    locked = logs.file(protocol.TIMELINE_LOCK if writer == "timeline" else protocol.PREFLIGHT)
    with locked.open("a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another open file: flock makes it wait as another process
        started = time.monotonic()
        if writer == "timeline":
            logs.append_timeline(protocol.PHASE_DRIVER_START, "n1", "")
        else:
            preflight_log.append_check(logs.preflight, Check(1.0, "n1", 1, True, (), (), "ok"))
        waited = time.monotonic() - started
    assert 0.3 <= waited < 5
    assert f"raysub: {locked} stayed locked 0.3 s; written without the lock" in capsys.readouterr().err
    if writer == "timeline":
        assert [e.phase for e in logs.timeline()] == [protocol.PHASE_DRIVER_START]
    else:
        assert [c.node for c in preflight_log.read_checks(logs.preflight)] == ["n1"]
