"""JobSpec on its own: the values the templates read instead of computing them, the table of lower
limits and the per-part checks, with their messages as the command line prints them, and the choices
of --auth and --sandbox-nodes defined once."""

import dataclasses
import math
import shlex
import subprocess
from pathlib import Path
from typing import get_args

import click
import pytest

from raysub import protocol
from raysub.cli.authoring import render as render_command
from raysub.job.manifest import program_args
from raysub.job.render import render
from raysub.job.view import JobView
from raysub.protocol import AuthMode, step_sources
from raysub.spec import (
    BOUNDS,
    DEFAULT_PORT_RANGE,
    LARGE_SCALE_NODES,
    PORT_BLOCK_SIZE,
    SANDBOX_FIXED_PORT,
    SANDBOX_PORT_AT,
    WORKER_PORTS_AT,
    Bound,
    JobSpec,
    PortBlocks,
    Ports,
    PortsMode,
    Sandbox,
    SandboxNodes,
    SpecError,
    sandbox_from_options,
)
from tests.conftest import RunCli

SPEC = JobSpec(nodes=3, command=("python", "train.py"))


def spec(**changes: object) -> JobSpec:
    return dataclasses.replace(SPEC, **changes)  # type: ignore[arg-type]


def error_of(job: JobSpec) -> SpecError:
    with pytest.raises(SpecError) as caught:
        job.check()
    return caught.value


# ---- values computed from options ----


@pytest.mark.parametrize(("retries", "attempts"), [(0, 1), (2, 3), (9, 10)])
def test_attempts_are_the_first_try_and_every_retry(retries: int, attempts: int) -> None:
    assert JobView(spec(head_retries=retries)).head_attempts == attempts
    assert JobView(spec(worker_retries=retries)).worker_attempts == attempts


@pytest.mark.parametrize(("timeout", "retries", "wait"), [(300, 2, 960), (1, 0, 61), (45, 1, 150)])
def test_a_worker_waits_a_minute_longer_than_every_head_attempt(
    timeout: int, retries: int, wait: int
) -> None:
    assert JobView(spec(head_timeout=timeout, head_retries=retries)).worker_head_wait == wait


def test_the_worker_script_waits_worker_head_wait_seconds_for_the_head() -> None:
    script = render(spec(head_timeout=45, head_retries=1, worker_retries=4))
    wait = f'wait_for_file "${{LOG_DIR}}/{protocol.STARTED_RAY_HEAD}" $((SECONDS + 150)) || status=$?\n'
    assert wait in script
    assert 'worker_failed "Ray did not stay up after 5 attempts"\n' in script
    assert 'die "Ray did not start after 2 attempts; see ' in script


@pytest.mark.parametrize(
    ("nodes", "first_minute_cs", "most_cs"),
    [(1, 5, 100), (8, 5, 100), (64, 6, 100), (256, 25, 100), (1024, 102, 103), (4096, 409, 410)],
)
def test_looks_slow_down_as_jobs_grow(nodes: int, first_minute_cs: int, most_cs: int) -> None:
    """A small job notices a signal file within 0.05 s and ENDED within 1 s; a large one's nodes together
    look about a thousand times a second at most, whatever its size (at 4096 nodes, 16,000 looks a
    second at the shared filesystem's metadata server otherwise)."""
    job = spec(nodes=nodes)
    assert (JobView(job).signal_look_cs, JobView(job).look_max_cs) == (first_minute_cs, most_cs)
    script = render(job)
    assert f"    pause {first_minute_cs}\n" in script
    assert f"  local cs=$((WAITED_CS / 10)) most={most_cs}\n" in script
    assert nodes * 100 / most_cs <= 1000 or most_cs == 100


@pytest.mark.parametrize(
    ("temp_dir", "per_job"),
    [
        ("/tmp/rs-%j/%n", True),
        ("/s/%j/r/%n", True),
        ("/tmp/%n", False),
        ("/tmp/ray/%j", False),  # %j in the last part only: the parent is shared
        ("/tmp/%n-%j", False),
    ],
)
def test_temp_parent_per_job_when_j_is_above_the_last_part(temp_dir: str, per_job: bool) -> None:
    job = spec(ray_temp_dir=temp_dir)
    assert JobView(job).temp_parent_per_job is per_job
    assert ("TEMP_PARENT=$own" in render(job)) is per_job


@pytest.mark.parametrize(("auth", "token"), [("token", True), ("none", False)])
def test_token_auth(auth: AuthMode, token: bool) -> None:
    assert spec(auth=auth).token_auth is token


@pytest.mark.parametrize(
    ("gpus", "gpu_request", "requested"),
    [(8, True, True), (8, False, False), (0, True, False), (0, False, False)],
)
def test_requests_gpus_only_with_gpus_and_gpu_request(gpus: int, gpu_request: bool, requested: bool) -> None:
    job = spec(gpus_per_node=gpus, gpu_request=gpu_request)
    assert JobView(job).requests_gpus is requested
    assert ("#SBATCH --gpus-per-node=" in render(job)) is requested


@pytest.mark.parametrize(
    ("gpus", "dedicated", "counts_gpus", "name", "expected"),
    [
        (8, False, True, "GPUs", 24),
        (8, True, True, "GPUs", 16),
        (0, False, False, "nodes", 3),
    ],
)
def test_units_are_gpus_or_nodes_without_gpus(
    gpus: int, dedicated: bool, counts_gpus: bool, name: str, expected: int
) -> None:
    job = spec(gpus_per_node=gpus, dedicated_head=dedicated)
    assert (job.counts_gpus, JobView(job).units_name, JobView(job).expected_units) == (
        counts_gpus,
        name,
        expected,
    )
    assert f"{name} joined after {job.workers_timeout} s" in render(job)


@pytest.mark.parametrize(("nodes", "every_node", "sandbox_nodes"), [("all", True, 3), ("1", False, 1)])
def test_sandbox_every_node(nodes: SandboxNodes, every_node: bool, sandbox_nodes: int) -> None:
    job = spec(sandbox=Sandbox(command="serve", port=6000, nodes=nodes))
    assert job.sandbox is not None
    assert job.sandbox.every_node is every_node
    assert JobView(job).sandbox_nodes == sandbox_nodes


def test_no_sandbox_runs_on_no_node() -> None:
    assert JobView(SPEC).sandbox_nodes == 0


# ---- the table of lower limits ----

# What each row says about a value one below its minimum: the messages users have always seen.
BELOW_MINIMUM = {
    "--nodes": (0, "must be at least 1, not 0"),
    "--gpus-per-node": (-1, "must be 0 or more, not -1"),
    "--cpus-per-task": (0, "must be at least 1, not 0"),
    "--head-retries": (-1, "must be 0 or more, not -1"),
    "--worker-retries": (-1, "must be 0 or more, not -1"),
    "--head-timeout": (0, "must be at least 1 second, not 0"),
    "--workers-timeout": (0, "must be at least 1 second, not 0"),
    "--signal-before": (0, "must be at least 1 second, not 0"),
    "--monitor-interval": (-0.5, "must be at least 0.5 seconds, not -0.5"),
    "--gpu-idle-after": (0, "must be at least 1 second, not 0"),
    "--driver-restarts": (-1, "must be 0 or more, not -1"),
    "--restart-backoff": (0, "must be at least 1 second, not 0"),
    "--min-free-gpu-mem": (-1, "must be 0 or more, not -1"),
    "--wait-gpus": (-1, "must be 0 or more, not -1"),
    "--keep-ray-logs": (-1, "must be 0 or more, not -1"),
}


def test_every_bound_names_a_spec_field_and_its_option() -> None:
    fields = {f.name for f in dataclasses.fields(JobSpec)}
    for bound in BOUNDS:
        assert bound.attribute in fields
        assert bound.option == "--" + bound.attribute.replace("_", "-")
    assert [b.option for b in BOUNDS] == list(BELOW_MINIMUM)


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: b.option)
def test_each_bound_rejects_one_below_its_minimum(bound: Bound) -> None:
    value, message = BELOW_MINIMUM[bound.option]
    assert value == bound.minimum - 1
    error = error_of(spec(**{bound.attribute: value}))
    assert (error.option, error.message) == (bound.option, message)


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: b.option)
def test_each_bound_accepts_its_minimum(bound: Bound) -> None:
    assert spec(**{bound.attribute: bound.minimum}).check()


def test_a_fraction_below_the_minimum_is_refused_too() -> None:
    error = error_of(spec(monitor_interval=0.4))
    assert str(error) == "--monitor-interval: must be at least 0.5 seconds, not 0.4"


@pytest.mark.parametrize("attribute", ["cpus_per_task", "signal_before"])
def test_an_optional_option_left_out_is_not_checked(attribute: str) -> None:
    assert getattr(spec(**{attribute: None}).check(), attribute) is None


# ---- the per-part checks ----


@pytest.mark.parametrize("port", [0, 65536])
def test_sandbox_check_refuses_a_port_out_of_range(port: int) -> None:
    error = error_of(spec(sandbox=Sandbox(command="serve", port=port)))
    assert str(error) == f"--sandbox-port: {port} is not a port"


def test_sandbox_check_refuses_a_zero_timeout() -> None:
    error = error_of(spec(sandbox=Sandbox(command="serve", port=6000, timeout=0)))
    assert str(error) == "--sandbox-timeout: must be at least 1 second"


@pytest.mark.parametrize("threshold", [0.0, -1.0, 100.5])
def test_the_idle_threshold_is_a_percentage_above_0(threshold: float) -> None:
    error = error_of(spec(gpu_idle_threshold=threshold))
    assert str(error) == f"--gpu-idle-threshold: must be a percentage above 0, not {threshold}"


@pytest.mark.parametrize("threshold", [0.01, 100.0])
def test_the_idle_threshold_may_be_any_percentage_above_0(threshold: float) -> None:
    assert spec(gpu_idle_threshold=threshold).check()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"job_name": "a\nb"}, "--job-name: 'a\\nb' is empty or has a newline or control character"),
        ({"account": "a b"}, "--account: 'a b' is not a Slurm name (no spaces, quotes or '#')"),
        ({"time": "soon"}, "--time: 'soon' is not a Slurm time such as 30, 4:00:00 or 1-12"),
        ({"env": (("1X", "v"),)}, "--env: '1X' is not a variable name"),
        ({"setup": "a\0b"}, "--setup: contains a NUL byte"),
        ({"command": ("a\0b",)}, "COMMAND: contains a NUL byte, which no argv can carry"),
        ({"interface": "eth 0"}, "--interface: 'eth 0' is not a network interface name"),
        ({"forward_signal": "KILL"}, "--forward-signal: 'KILL' is not one of USR1, USR2, INT, HUP, QUIT"),
        (
            {"time": "1", "signal_before": 60},
            "--signal-before: 60 s is not before the end of --time 1 (60 s): "
            "the warning would come at the start of the job, or never",
        ),
        ({"auth": "open"}, "--auth: must be one of token, none, not 'open'"),
    ],
)
def test_each_part_keeps_its_message(changes: dict[str, object], message: str) -> None:
    assert str(error_of(spec(**changes))) == message


# ---- choices defined once ----


def choices_of(name: str) -> tuple[str, ...]:
    param = next(p for p in render_command.params if p.name == name)
    assert isinstance(param.type, click.Choice)
    return tuple(param.type.choices)


def test_the_command_line_offers_the_spec_choices() -> None:
    assert choices_of("auth") == get_args(AuthMode) == ("token", "none")
    assert choices_of("sandbox_nodes") == get_args(SandboxNodes) == ("all", "1")


def test_a_sandbox_port_is_pinned_taken_from_each_nodes_block_or_the_fixed_default() -> None:
    assert spec(sandbox=Sandbox(command="serve", port=6000)).sandbox_port == 6000
    assert spec(sandbox=Sandbox(command="serve"), exclusive=False).sandbox_port is None  # each node's block
    assert spec(sandbox=Sandbox(command="serve")).sandbox_port == SANDBOX_FIXED_PORT  # whole nodes
    assert spec().sandbox_port is None
    # The block's place is the one Ray leaves free: after its single ports, before its workers'.
    assert len(Ports.__dataclass_fields__) - 2 <= SANDBOX_PORT_AT < WORKER_PORTS_AT


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"exclusive": False}, "--sandbox-port: 24600 lies in --port-range 24000-32767, where each node"),
        (
            {"ports": Ports(gcs=24600)},
            "--sandbox-port: 24600 is one of Ray's ports (the --*-port options); pin another",
        ),
    ],
)
def test_a_pinned_sandbox_port_that_ray_may_take_is_refused(overrides: dict[str, object], said: str) -> None:
    assert str(error_of(spec(sandbox=Sandbox(command="serve", port=24600), **overrides))).startswith(said)


def test_a_pinned_sandbox_port_on_shared_nodes_is_warned_of() -> None:
    shared = spec(sandbox=Sandbox(command="serve", port=6000), exclusive=False)
    assert any(w.startswith("--sandbox-port 6000 on shared nodes") for w in shared.warnings)
    assert not any(
        "--sandbox-port" in w for w in spec(sandbox=Sandbox(command="serve"), exclusive=False).warnings
    )
    assert not any("--sandbox-port" in w for w in spec(sandbox=Sandbox(command="serve", port=6000)).warnings)


def test_sandbox_from_options_refuses_other_node_choices() -> None:
    with pytest.raises(SpecError) as caught:
        sandbox_from_options("serve", 6000, None, "2", 300)
    assert str(caught.value) == "--sandbox-nodes: must be 'all' or '1', not '2'"


@pytest.mark.parametrize(
    ("exclusive", "mode", "blocks"),
    [(True, None, False), (False, None, True), (True, "block", True), (False, "fixed", False)],
)
def test_jobs_on_shared_nodes_take_blocks_of_ports_and_whole_nodes_keep_fixed_ones(
    exclusive: bool, mode: PortsMode | None, blocks: bool
) -> None:
    spec = JobSpec(nodes=2, exclusive=exclusive, ports_mode=mode).check()
    assert (spec.port_blocks is not None) == blocks
    if blocks:
        # Every port at its own place in the block, the worker ports after the single ones, to its end.
        places = [JobView(spec).port_sh(name) for name in Ports.__dataclass_fields__]
        assert len(set(places)) == len(places)
        assert JobView(spec).port_sh("gcs") == "$((PORT_BASE + 0))"
        assert JobView(spec).port_sh("max_worker") == f"$((PORT_BASE + {PORT_BLOCK_SIZE - 1}))"
    else:
        assert JobView(spec).port_sh("gcs") == "6379"


def test_scale_auto_is_large_from_256_nodes_and_either_mode_can_be_asked_for() -> None:
    assert not dataclasses.replace(SPEC, nodes=LARGE_SCALE_NODES - 1).large_scale
    assert dataclasses.replace(SPEC, nodes=LARGE_SCALE_NODES).large_scale
    assert dataclasses.replace(SPEC, scale="large").large_scale
    assert not dataclasses.replace(SPEC, nodes=4096, scale="normal").large_scale


@pytest.mark.parametrize(
    ("nodes", "workers_timeout", "waves", "wait"),
    [(3, 600, 1, 300), (256, 600, 2, 150), (300, 600, 3, 100), (4096, 600, 32, 9), (4096, 20, 32, 1)],
)
def test_join_waves_all_start_by_half_of_the_workers_timeout(
    nodes: int, workers_timeout: int, waves: int, wait: int
) -> None:
    spec = dataclasses.replace(SPEC, nodes=nodes, scale="large", workers_timeout=workers_timeout)
    assert (JobView(spec).join_waves, JobView(spec).join_wave_wait_s) == (waves, wait)
    assert (JobView(spec).join_waves - 1) * JobView(spec).join_wave_wait_s <= max(
        workers_timeout // 2, JobView(spec).join_waves
    )
    assert JobView(dataclasses.replace(spec, scale="normal")).join_waves == 1


def test_a_large_job_reads_rays_node_table_once_a_second_and_names_known_bad_rays() -> None:
    assert "--brisk=0.05" in program_args(JobView(SPEC), "monitor")
    assert "--large-scale" not in program_args(JobView(SPEC), "monitor")
    large = dataclasses.replace(SPEC, scale="large")
    assert "--brisk=1" in program_args(JobView(large), "monitor")
    assert "--large-scale" in program_args(JobView(large), "monitor")


def test_a_port_range_holds_whole_blocks_only() -> None:
    blocks = PortBlocks.parse("20000-21499")
    assert (blocks.first, blocks.count) == (20000, 3)
    assert PortBlocks.parse(" 20000-20499 ").count == 1
    assert PortBlocks.parse(DEFAULT_PORT_RANGE).count == 17
    # Either side of the Ray client server's own ports is fine; across them is refused.
    assert PortBlocks.parse("20000-22999").count == PortBlocks.parse("24000-26999").count == 6
    with pytest.raises(SpecError, match="23000-23999"):
        PortBlocks.parse("22500-23000")
    single = [PortBlocks.offset(name) for name in Ports.__dataclass_fields__ if "worker" not in name]
    assert max(single) < PortBlocks.offset("min_worker") < PortBlocks.offset("max_worker") < PORT_BLOCK_SIZE


def test_the_batch_script_waits_for_the_nodes_to_keep_their_ray_logs_before_slurm_ends_them() -> None:
    timing = SPEC.timing
    keeping = JobView(SPEC)
    assert keeping.leave_wait_s == timing.leave_s + math.ceil(timing.keep_ray_logs_s)
    assert JobView(dataclasses.replace(SPEC, keep_ray_logs=0)).leave_wait_s == timing.leave_s
    assert f"tenths = {keeping.leave_wait_s * 10};" in render(SPEC)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("it (\\d+)", "no group named 'step'"),
        ("(", "not a regular expression"),
        ("a\n(?P<step>1)", "one line"),
    ],
)
def test_a_step_regex_must_read_a_step_on_one_line(value: str, says: str) -> None:
    error = error_of(spec(step_regex=value))
    assert error.option == "--step-regex" and says in error.message
    spec(step_regex=r"iter (?P<step>\d+)/(?P<total>\d+)").check()


def test_the_step_sources_are_recorded_in_log_dir_quoted(tmp_path: Path) -> None:
    regex = r"it's step (?P<step>\d+) $HOME `x`"
    script = render(spec(step_regex=regex, tensorboard_dir="/runs/7/tb"))
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    recorded = 'publish "${LOG_DIR}/step_sources.json"'
    [line] = [line for line in script.splitlines() if line.lstrip().startswith(recorded)]
    publish = 'publish() { printf \'%s\\n\' "$2" >"$1"; }'  # lib.sh's, without its temporary file
    subprocess.run(["bash", "-c", f"{publish}\n{line.strip()}"], env={"LOG_DIR": str(log_dir)}, check=True)
    assert step_sources.read(log_dir) == step_sources.Recorded(regex, Path("/runs/7/tb"), None)
    assert recorded not in render(spec())
    assert error_of(spec(metrics_file="runs/m.jsonl")).option == "--metrics-file"  # the library's: absolute


def test_render_records_the_step_sources_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raysub_cli: RunCli
) -> None:
    monkeypatch.chdir(tmp_path)
    result = raysub_cli("render", "--nodes", "1", "--tensorboard-dir", "tb", "--", "python", "t.py")
    assert result.code == 0, result.stderr
    recorded = step_sources.Recorded(None, tmp_path / "tb", None).text()
    assert f'publish "${{LOG_DIR}}/step_sources.json" {shlex.quote(str(recorded))}' in result.stdout
