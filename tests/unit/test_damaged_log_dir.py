"""No command that reads a job's LOG_DIR answers with a traceback, whatever its files hold (issue 26, item 5).

A real LOG_DIR gets bytes that are not UTF-8 (a driver printing Latin-1, a node name from a mangled
hostname, a file cut off by a full disk) and lines that are JSON of another shape (another writer, an
older raysub). Each example fills some of the files with random bytes or random JSON lines, then runs
every command that reads them; each must end with its own exit status and no traceback.
"""

import contextlib
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raysub import protocol
from raysub.validate import NOT_A_SCRIPT
from tests.conftest import RunCli

JOB_ID = "77"
FILES = [
    protocol.TIMELINE,
    protocol.ENDED,
    protocol.NODE_MAP,
    protocol.METRICS,
    protocol.PREFLIGHT,
    protocol.SMOKE,
    protocol.DRIVER_LOG,
    protocol.HEAD_LOG,
    protocol.HEALTH_PROGRESS,
    protocol.DRIVER_STARTED,
    protocol.STARTED_RAY_HEAD,
    protocol.WORKER_UNITS,
    protocol.JOINED_NODES,
    protocol.ATTACH_ENV,
    protocol.TRAINER_PROGRESS,
    protocol.TRAINER_HISTORY,
    protocol.STEP_SOURCES,
    protocol.worker_log_name(0, 1),
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
# A line of the shape raysub's JSON files have, with any value in each field.
KEYS = ["t", "phase", "node", "detail", "nodes", "failed", "check", "ok", "url", "step", "since", "total"]
KEYS += [
    "throughput",
    "source",
    "step_regex",
    "tensorboard_dir",
    "metrics_file",
]  # the trainer's, step_sources
RECORD = st.fixed_dictionaries(
    {},
    optional=dict.fromkeys(KEYS, JSON),
)
LINES = st.lists(RECORD.map(json.dumps).map(str.encode), max_size=4).map(b"\n".join)
CONTENT = st.one_of(st.binary(max_size=200), LINES, st.binary(max_size=40).map(lambda b: b"step 1 " + b))
COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["health"],
    ["health", "--json"],
    ["monitor"],
    ["logs"],
    ["report", "-o", "{dir}/report.html"],
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(st.sampled_from(FILES), CONTENT, min_size=1))
@example(  # a snapshot line with a Latin-1 node name, and a driver printing Latin-1
    files={
        protocol.METRICS: b'{"t": 1.0, "nodes": {"n\xe9": {"gpus": []}}}\n\xff\n',
        protocol.TIMELINE: b'{"t": 1.0, "phase": "head_started", "node": "n\xe9", "detail": ""}\n',
        protocol.DRIVER_LOG: b"step 1 caf\xe9\n",
        protocol.ENDED: b"driver exited with status 1 \xe9\n",
    }
)
@example(files={protocol.METRICS: b'{"t": false, "failed": [null]}'})  # found by a full run: not a node name
@example(files={protocol.METRICS: b'{"detail": null, "failed": [null, []], "t": false}'})
def test_every_reading_command_survives_any_bytes_in_the_log_dir(
    raysub_cli: RunCli, files: dict[str, bytes]
) -> None:
    with tempfile.TemporaryDirectory(prefix="damaged-") as base:
        logs = Path(base) / f"{JOB_ID}{protocol.LOG_DIR_SUFFIX}"
        (logs / protocol.NODE_LOG_DIR).mkdir(parents=True)
        for name, content in files.items():
            (logs / name).write_bytes(content)
        for command in COMMANDS:
            args = [arg.format(dir=base) for arg in command]
            result = raysub_cli(*args, JOB_ID, "--log-dir", base)  # an exception fails the test here
            assert result.code in (0, 1, 2), (args, result)
            assert "Traceback" not in result.stderr, (args, result.stderr)


SCRIPT = st.one_of(st.binary(max_size=200), st.binary(max_size=200).map(lambda b: b"#!/bin/bash\n" + b))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=SCRIPT)
def test_validate_and_a_profile_survive_any_bytes(raysub_cli: RunCli, content: bytes) -> None:
    """A script or a raysub.toml of any bytes: a verdict, or one line that says what is wrong."""
    with tempfile.TemporaryDirectory(prefix="damaged-") as base:
        script = Path(base) / "job.sub"
        script.write_bytes(content)
        result = raysub_cli("validate", str(script))
        assert result.code in (0, 1), result
        (Path(base) / "raysub.toml").write_bytes(b"[profiles.p]\nnodes = 2\n" + content)
        with contextlib.chdir(base):
            result = raysub_cli("render", "--profile", "p", "--", "true")
        assert result.code == 0 or (result.code == 2 and result.stderr.count("\n") == 1), result


def test_a_latin_1_script_is_checked_byte_for_byte_and_a_binary_one_is_no_script(
    raysub_cli: RunCli, tmp_path: Path
) -> None:
    latin = tmp_path / "latin.sub"
    latin.write_bytes(b"#!/bin/bash\necho caf\xe9\n")
    assert raysub_cli("validate", str(latin)).code == 0
    latin.write_bytes(b"#!/bin/bash\necho caf\xe9\nif then\n")
    result = raysub_cli("validate", str(latin))
    assert result.code == 1
    assert "latin.sub line 3: syntax error near unexpected token `then'" in result.stderr
    for content in (b"\x7fELF\x02\x01\x00\xff", b""):
        binary = tmp_path / "binary.sub"
        binary.write_bytes(content)
        result = raysub_cli("validate", str(binary))
        assert result.code == 1
        assert result.stderr == f"{binary}: binary.sub line 1: {NOT_A_SCRIPT}\n"


@pytest.mark.parametrize("command", [["render", "-N", "2"], ["report", JOB_ID]])
@pytest.mark.parametrize(
    ("target", "why"),
    [("missing/out", "No such file or directory"), ("/dev/full", "No space left on device")],
)
def test_output_that_cannot_be_written_is_one_line_naming_it(
    raysub_cli: RunCli, tmp_path: Path, command: list[str], target: str, why: str
) -> None:
    logs = tmp_path / f"{JOB_ID}{protocol.LOG_DIR_SUFFIX}"
    logs.mkdir()
    (logs / protocol.METRICS).write_text('{"t": 1.0, "nodes": {"n1": {"gpus": []}}}\n')
    output = tmp_path / target
    rest = ["--", "true"] if command[0] == "render" else ["--log-dir", str(tmp_path)]
    result = raysub_cli(*command, "-o", str(output), *rest)
    assert (result.code, result.stdout) == (2, "")
    assert (
        result.stderr == f"raysub: error: Invalid value for '--output' / '-o': cannot write {output}: {why}\n"
    )
