"""raysub status, logs and attach over LOG_DIRs written in the protocol's format (Slurm answers faked)."""

import json
from pathlib import Path

import pytest

from raysub import protocol
from raysub.slurm import SlurmState
from tests.conftest import RunCli

WORKERS = ["node2", "node3", "node4"]


def write_attempt(base: Path, name: str, *, driver_done: bool, joined: list[str]) -> Path:
    logs = base / name
    logs.mkdir(parents=True)
    rows = ["head\t0\tnode1", *(f"worker\t{k}\t{n}" for k, n in enumerate(WORKERS))]
    (logs / protocol.NODE_MAP).write_text("\n".join(rows) + "\n")
    (logs / protocol.ATTACH_ENV).write_text(f"{name.partition('-')[0].partition('_')[0]} node1\n")
    (logs / protocol.HEAD_LOG).write_text("head line 1\nhead line 2\n")
    (logs / protocol.NODE_LOG_DIR).mkdir()
    for k in range(len(WORKERS)):
        (logs / protocol.worker_log_name(k, len(WORKERS))).write_text(f"worker {k} says hi\n")
    (logs / protocol.STARTED_RAY_HEAD).write_text("198.18.0.11:6379\n")
    (logs / protocol.JOINED_NODES).write_text("\n".join(["node1", *joined]) + "\n")
    events = [(100.0, protocol.PHASE_JOB_START), (104.0, protocol.PHASE_HEAD_READY)]
    if driver_done:
        (logs / protocol.DRIVER_STARTED).write_text("x\n")
        (logs / protocol.DRIVER_LOG).write_text("driver out\nTraceback: boom\n")
        (logs / protocol.DRIVER_EXIT_CODE).write_text("3\n")
        (logs / protocol.ENDED).write_text("driver exited with status 3\n")
        events += [
            (109.0, protocol.PHASE_DRIVER_START),
            (120.0, protocol.PHASE_DRIVER_END),
            (120.5, protocol.PHASE_ENDED),
        ]
    lines = [json.dumps({"t": t, "phase": p, "node": "node1", "detail": ""}) for t, p in events]
    (logs / protocol.TIMELINE).write_text("\n".join(lines) + "\n")
    return logs


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_attempt(tmp_path, "4711-logs", driver_done=True, joined=WORKERS)
    write_attempt(tmp_path, "4711-1-logs", driver_done=False, joined=["node2", "node4"])
    write_attempt(tmp_path, "4700-logs", driver_done=True, joined=WORKERS)
    (tmp_path / protocol.LATEST).symlink_to("4711-1-logs")
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: SlurmState("RUNNING", None, "test"))
    return tmp_path


def status_json(raysub_cli: RunCli, *args: str) -> dict[str, object]:
    result = raysub_cli("status", "--json", *args)
    assert result.code == 0, result.stderr
    parsed: dict[str, object] = json.loads(result.stdout)
    return parsed


def test_status_of_the_most_recent_job_follows_latest(raysub_cli: RunCli, base: Path) -> None:
    status = status_json(raysub_cli, "--log-dir", str(base))
    assert (status["job_id"], status["attempt"], status["phase"]) == ("4711", 1, "workers joining")
    assert (status["workers_joined"], status["workers_expected"]) == (2, 3)
    assert status["missing_nodes"] == ["node3"]


def test_status_by_job_id_picks_the_newest_attempt_or_the_one_asked_for(
    raysub_cli: RunCli, base: Path
) -> None:
    assert status_json(raysub_cli, "4711", "--log-dir", str(base))["attempt"] == 1
    first = status_json(raysub_cli, "4711", "--log-dir", str(base), "--attempt", "0")
    assert first["phase"] == "finished with exit code 3"
    assert first["ended"] == "driver exited with status 3"
    assert first["durations"] == {"head_start": 4.0, "workers_join": 5.0, "driver": 11.0, "total": 20.5}


def test_status_by_directory(raysub_cli: RunCli, base: Path) -> None:
    assert status_json(raysub_cli, str(base / "4700-logs"))["job_id"] == "4700"


def test_most_recent_without_latest_is_the_newest_directory(raysub_cli: RunCli, base: Path) -> None:
    (base / protocol.LATEST).unlink()
    newest = base / "4700-logs"
    newest.touch()
    assert status_json(raysub_cli, "--log-dir", str(base))["job_id"] == "4700"


@pytest.mark.parametrize(
    "args",
    [["9999"], ["4711", "--attempt", "7"], ["/nonexistent/12-logs"], ["--log-dir", "/nonexistent"]],
)
def test_unknown_jobs_are_one_line_and_exit_2(raysub_cli: RunCli, base: Path, args: list[str]) -> None:
    if args[0] in ("9999", "4711"):
        args = [*args, "--log-dir", str(base)]
    for command in ("status", "logs", "attach"):
        result = raysub_cli(command, *args)
        assert (result.code, result.stdout) == (2, ""), (command, result)
        assert result.stderr.count("\n") == 1


def test_status_text_names_what_is_missing(raysub_cli: RunCli, base: Path) -> None:
    result = raysub_cli("status", "--log-dir", str(base))
    assert result.code == 0
    assert "job 4711 (attempt 1): workers joining; Slurm: RUNNING" in result.stdout
    assert "workers joined: 2/3" in result.stdout
    assert "missing: node3" in result.stdout


def test_status_shows_the_monitors_gpu_idle_warning(raysub_cli: RunCli, base: Path) -> None:
    idle = {
        "t": 130.0,
        "phase": protocol.PHASE_GPU_IDLE,
        "node": "node1",
        "detail": "all 8 GPUs below 5% for 600 s",
    }
    with (base / "4711-1-logs" / protocol.TIMELINE).open("a") as timeline:
        timeline.write(json.dumps(idle) + "\n")
    assert status_json(raysub_cli, "--log-dir", str(base))["warnings"] == [
        "GPUs idle: all 8 GPUs below 5% for 600 s"
    ]
    assert (
        "warning: GPUs idle: all 8 GPUs below 5% for 600 s"
        in raysub_cli("status", "--log-dir", str(base)).stdout
    )


def test_logs_merge_every_log_with_tags_in_order(raysub_cli: RunCli, base: Path) -> None:
    result = raysub_cli("logs", "4711", "--attempt", "0", "--log-dir", str(base))
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "head   | head line 1",
        "head   | head line 2",
        "w00    | worker 0 says hi",
        "w01    | worker 1 says hi",
        "w02    | worker 2 says hi",
        "driver | driver out",
        "driver | Traceback: boom",
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--head"], ["head | head line 1", "head | head line 2"]),
        (["--driver", "-n", "1"], ["driver | Traceback: boom"]),
        (["--worker", "1"], ["w01 | worker 1 says hi"]),
        (["--node", "node4"], ["w02 | worker 2 says hi"]),
        (["--grep", "boom|line 2"], ["head   | head line 2", "driver | Traceback: boom"]),
        (["--sandbox"], []),
    ],
)
def test_logs_selection(raysub_cli: RunCli, base: Path, args: list[str], expected: list[str]) -> None:
    result = raysub_cli("logs", "4711", "--attempt", "0", "--log-dir", str(base), *args)
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == expected


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--worker", "99"], "--worker 99: job 4711 has workers 0 to 2"),
        (
            ["--node", "node9", "--follow"],
            "--node node9: no node of job 4711 (raysub status 4711 shows them)",
        ),
    ],
)
def test_logs_of_a_worker_or_node_the_job_lacks_is_an_error(
    raysub_cli: RunCli, base: Path, args: list[str], said: str
) -> None:
    result = raysub_cli("logs", "4711", "--attempt", "0", "--log-dir", str(base), *args)
    assert (result.code, result.stdout, result.stderr) == (2, "", f"raysub: error: {said}\n")


def test_logs_follow_stops_when_the_job_has_ended(raysub_cli: RunCli, base: Path) -> None:
    result = raysub_cli("logs", "4711", "--attempt", "0", "--log-dir", str(base), "--follow", "--head")
    assert result.stdout.splitlines() == ["head | head line 1", "head | head line 2"]


def test_logs_bad_regex_is_a_usage_error(raysub_cli: RunCli, base: Path) -> None:
    result = raysub_cli("logs", "--log-dir", str(base), "--grep", "(")
    assert result.code == 2
    assert "'--grep'" in result.stderr


def test_attach_builds_srun_onto_the_chosen_node(base: Path) -> None:
    from raysub.attach import command
    from raysub.jobs import resolve

    job = resolve("4711", base)
    srun = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--pty", "--jobid=4711"]
    assert command(job, None, None, []) == [*srun, "--nodelist=node1", "bash", "-l"]
    assert command(job, None, 1, ["hostname"]) == [*srun, "--nodelist=node3", "hostname"]
    assert command(job, "node4", None, ["id"])[6] == "--nodelist=node4"
    (job.logs.path / protocol.CONTAINER_ARGS).write_text("--container-image=img\n--container-name=raysub-1\n")
    # The head's own container on its node; elsewhere a new one from the image (workers' are unnamed).
    assert command(job, None, None, ["x"])[7:] == ["--container-image=img", "--container-name=raysub-1", "x"]
    assert command(job, "node1", None, ["x"])[7:] == [
        "--container-image=img",
        "--container-name=raysub-1",
        "x",
    ]
    assert command(job, None, 1, ["x"])[7:] == ["--container-image=img", "x"]


def test_attach_goes_to_an_array_tasks_own_job_id_and_a_heterogeneous_jobs_component(base: Path) -> None:
    from raysub.attach import command
    from raysub.jobs import resolve

    task = resolve(str(write_attempt(base, "900_3-logs", driver_done=False, joined=[])), None)
    # srun --jobid takes no <array job id>_<task id>: the task's own Slurm job id, from attach.env.
    (task.logs.path / protocol.ATTACH_ENV).write_text("905 node1\n")
    assert command(task, None, None, ["x"])[5:] == ["--jobid=905", "--nodelist=node1", "x"]
    (task.logs.path / protocol.ATTACH_ENV).write_text(f"905 node1 {protocol.ATTACH_HET}\n")
    assert command(task, None, None, ["x"])[5:] == ["--jobid=905", "--nodelist=node1", "--het-group=0", "x"]
    assert command(task, None, 0, ["x"])[5:] == ["--jobid=905", "--nodelist=node2", "--het-group=1", "x"]
    (task.logs.path / protocol.ATTACH_ENV).write_text("905 node1 --prolog=/tmp/evil\n")
    with pytest.raises(LookupError, match=r"attach\.env"):
        command(task, None, None, ["x"])


def test_attach_hands_on_the_address_and_the_token_path(
    raysub_cli: RunCli, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raysub.jobs import resolve

    calls: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr("os.execvpe", lambda file, argv, env: calls.append((file, argv, env)))
    monkeypatch.setenv("RAY_AUTH_MODE", "whatever the shell had")
    logs = resolve("4711", base).logs
    logs.started_ray_head.write_text("10.0.0.1:6379\n")
    assert raysub_cli("attach", "4711", "--log-dir", str(base), "--", "ray", "status").code == 0
    env = calls[-1][2]
    assert (env["RAY_ADDRESS"], env["RAY_AUTH_MODE"]) == ("10.0.0.1:6379", "disabled")
    assert "RAY_AUTH_TOKEN_PATH" not in env
    logs.auth_token.parent.mkdir()
    logs.auth_token.write_text("secret")
    assert raysub_cli("attach", "4711", "--log-dir", str(base)).code == 0
    file, argv, env = calls[-1]
    assert (file, argv[-2:]) == ("srun", ["bash", "-l"])
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN_PATH"]) == ("token", str(logs.auth_token))
    assert "secret" not in env.values()


def test_attach_to_a_worker_the_job_does_not_have(raysub_cli: RunCli, base: Path) -> None:
    result = raysub_cli("attach", "4711", "--log-dir", str(base), "--worker", "9", "--", "hostname")
    assert result.code == 2
    assert "has no worker 9" in result.stderr


def test_status_follow_redraws_until_the_driver_starts(
    raysub_cli: RunCli, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        (base / "4711-1-logs" / protocol.DRIVER_STARTED).write_text("x\n")

    monkeypatch.setattr("time.sleep", sleep)
    result = raysub_cli("status", "--log-dir", str(base), "--follow", "--interval", "3")
    assert (result.code, result.stderr) == (0, "")
    assert sleeps == [3.0]
    assert "[" + "#" * 20 + "." * 10 + "] 2/3" in result.stdout
    assert "driver running" in result.stdout


def test_status_watch_is_still_status_follow_but_says_so(
    raysub_cli: RunCli, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "time.sleep", lambda seconds: (base / "4711-1-logs" / protocol.DRIVER_STARTED).touch()
    )
    result = raysub_cli("status", "--log-dir", str(base), "--watch")
    assert result.code == 0, result.stderr
    assert result.stderr == "raysub: warning: status --watch is now status --follow\n"
    assert "driver running" in result.stdout
    assert "--watch" not in raysub_cli("status", "--help").stdout


def test_status_interval_below_two_seconds_is_refused(raysub_cli: RunCli, base: Path) -> None:
    result = raysub_cli("status", "--log-dir", str(base), "--follow", "--interval", "0.5")
    assert result.code == 2


def test_status_and_report_show_the_gpu_preflight(raysub_cli: RunCli, base: Path, tmp_path: Path) -> None:
    from raysub.protocol.preflight_log import Check, Finding, Gpu, append_check

    logs = base / "4711-1-logs"
    gpu = Gpu(0, "GPU-0", "NVIDIA H100 80GB HBM3", 0.0, 1.0, 81559.0, 30.0, 70.0, 700.0)
    held = Finding("error", 1, "GPU 1 is held by pid 4242 (python3, 30000 MiB)")
    append_check(logs / protocol.PREFLIGHT, Check(1.0, "node3", 1, True, (gpu,), (held,), "warn"))
    unknown = Finding("info", None, "nvidia-smi not found")
    append_check(logs / protocol.PREFLIGHT, Check(1.0, "node2", 1, True, (), (unknown,), "ok"))
    status = status_json(raysub_cli, "--log-dir", str(base))
    assert status["warnings"] == ["GPU preflight on node3: GPU 1 is held by pid 4242 (python3, 30000 MiB)"]
    from raysub.jobs import resolve
    from raysub.monitor import power_caps

    assert power_caps(resolve("4711", base)) == {("node3", "0"): 700.0}


@pytest.mark.parametrize(
    ("name", "content", "mode"),
    [
        (protocol.CONTAINER_ARGS, "--container-image=img\n--prolog=/tmp/evil.sh\n", 0o600),  # a line added
        (protocol.CONTAINER_ARGS, "--container-image=img\n", 0o660),  # the group may write it
        (protocol.NODE_MAP, "head\t0\tnode1\n", 0o620),
        (protocol.STARTED_RAY_HEAD, "10.6.6.6:6379\n", 0o666),
    ],
)
def test_attach_refuses_a_file_someone_else_could_have_written(
    raysub_cli: RunCli, base: Path, monkeypatch: pytest.MonkeyPatch, name: str, content: str, mode: int
) -> None:
    from raysub.jobs import resolve

    calls: list[list[str]] = []
    monkeypatch.setattr("os.execvpe", lambda file, argv, env: calls.append(argv))
    path = resolve("4711", base).logs.file(name)
    path.write_text(content)
    path.chmod(mode)
    result = raysub_cli("attach", "4711", "--log-dir", str(base), "--", "hostname")
    assert result.code == 1
    assert f"refusing {path}" in result.stderr and "tampered" in result.stderr
    assert "Traceback" not in result.stderr
    assert calls == []


def test_attach_refuses_a_file_of_another_user(raysub_cli: RunCli, base: Path) -> None:
    import os

    from raysub.jobs import resolve

    if os.getuid() != 0:
        pytest.skip("needs root to give a file to another user")
    path = resolve("4711", base).logs.file(protocol.NODE_MAP)
    os.chown(path, 65534, 65534)
    result = raysub_cli("attach", "4711", "--log-dir", str(base), "--", "hostname")
    assert result.code == 1
    assert f"refusing {path}: it is owned by uid 65534" in result.stderr


def test_health_refuses_a_checkpoint_dir_that_does_not_exist(raysub_cli: RunCli, base: Path) -> None:
    result = raysub_cli("health", "4711", "--log-dir", str(base), "--checkpoint-dir", str(base / "nowhere"))
    assert (result.code, result.stdout) == (2, "")
    assert f"Directory '{base / 'nowhere'}' does not exist" in result.stderr
