"""``raysub render`` on the command line: options, defaults from env and profiles, one-line errors."""

import subprocess
from pathlib import Path

import click
import pytest

from raysub.cli import cli
from raysub.validate import extract
from tests.conftest import RunCli


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--nodes", "0"], "--nodes"),
        (["--nodes", "-1"], "--nodes"),
        (["--nodes", "x"], "--nodes"),
        ([], "--nodes"),
        (["--nodes", "2", "--env", "NOEQUALS"], "--env"),
        (["--nodes", "2", "--env", "1BAD=x"], "--env"),
        (["--nodes", "2", "--ray-temp-dir", "/scratch/" + "d" * 40 + "/%n"], "--ray-temp-dir"),
        (["--nodes", "2", "--ray-temp-dir", "relative/%n"], "--ray-temp-dir"),
        (["--nodes", "2", "--gpus-per-node", "-1"], "--gpus-per-node"),
        (["--nodes", "2", "--gcs-port", "8500"], "--gcs-port"),
        (["--nodes", "2", "--no-exclusive", "--gcs-port", "7000"], "--gcs-port"),
        (["--nodes", "2", "--ports", "block", "--dashboard-port", "9265"], "--dashboard-port"),
        (["--nodes", "2", "--port-range", "20000"], "--port-range"),
        (["--nodes", "2", "--port-range", "20000-20400"], "--port-range"),
        (["--nodes", "2", "--port-range", "900-20000"], "--port-range"),
        (["--nodes", "2", "--port-range", "30000-20000"], "--port-range"),
        (["--nodes", "2", "--port-range", "20000-32767"], "--port-range"),
        (["--nodes", "2", "--port-range", "23999-25000"], "--port-range"),
        (["--nodes", "2", "--ports", "any"], "--ports"),
        (["--nodes", "2", "--scale", "huge"], "--scale"),
        (["--nodes", "2", "--array", "0-3x"], "--array"),
        (["--nodes", "2", "--head-cpus", "4"], "--head-cpus"),
        (["--nodes", "2", "--head-mem", "4G"], "--head-mem"),
        (["--nodes", "2", "--head-partition", "cpu", "--head-mem", "4 G"], "--head-mem"),
        (["--nodes", "2", "--head-partition", "cpu", "--head-cpus", "0"], "--head-cpus"),
        (["--nodes", "2", "--head-partition", "a b"], "--head-partition"),
        (["--nodes", "1", "--head-partition", "cpu"], "--head-partition"),
        (["--nodes", "2", "--head-partition", "cpu", "--array", "0-1"], "--array"),
        (["--nodes", "2", "--head-partition", "cpu", "--head-mem", "4G", "--no-exclusive"], "--head-mem"),
        (["--nodes", "2", "--array", "0-3%"], "--array"),
        (["--nodes", "2", "--sbatch-arg", "--array=0-1"], "--sbatch-arg"),
        (["--nodes", "2", "--partition", "a b"], "--partition"),
        (["--nodes", "2", "--time", "soon"], "--time"),
        (["--nodes", "2", "--sandbox-command", "serve", "--sandbox-port", "8500"], "--sandbox-port"),
        (["--nodes", "2", "--sandbox-port", "80"], "--sandbox-port"),
        (["--nodes", "2", "--sbatch-arg", "qos=high"], "--sbatch-arg"),
        (["--nodes", "2", "--srun-arg", "cpu-bind=none"], "--srun-arg"),
        (["--nodes", "2", "--srun-arg", "--cpu-bind none"], "--srun-arg"),
        (["--nodes", "2", "--srun-arg", "--mpi=pmix"], "--srun-arg"),
        (["--nodes", "2", "--srun-arg", "--nodelist=n1"], "--srun-arg"),
        (["--nodes", "2", "--srun-arg", "-w", "--", "true"], "--srun-arg"),
        (["--nodes", "2", "--srun-arg", "--nodel=n1"], "--srun-arg"),
        (["--nodes", "2", "--srun-arg", "--export=NONE"], "--srun-arg"),
        (["--nodes", "2", "--srun-arg", "--container-image=x"], "--srun-arg"),
        (["--nodes", "2", "--mpi", "pmix v4"], "--mpi"),
        (["--nodes", "2", "--container-workdir", "/w"], "--container-workdir"),
        (["--nodes", "2", "--container-mounts", "/a:/a"], "--container-mounts"),
        (["--nodes", "2", "--no-container-mount-home"], "--no-container-mount-home"),
    ],
)
def test_bad_values_exit_2_with_one_line_naming_the_option(
    raysub_cli: RunCli, args: list[str], option: str
) -> None:
    result = raysub_cli("render", *args, "--", "python", "train.py")
    assert result.code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("raysub: error: ")
    assert f"'{option}'" in result.stderr


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        (["--nodes", "256"], True),
        (["--nodes", "255"], False),
        (["--nodes", "8", "--scale", "large"], True),
        (["--nodes", "300", "--scale", "normal"], False),
        (["--nodes", "300", "--dedicated-head"], False),
        (["--nodes", "300", "--head-partition", "cpu"], False),
    ],
)
def test_a_large_job_whose_head_also_runs_work_is_warned_of(
    raysub_cli: RunCli, args: list[str], warned: bool
) -> None:
    result = raysub_cli("render", *args, "--", "true")
    assert result.code == 0, result.stderr
    warning = "the head's node also runs work"
    assert (warning in result.stderr) == warned, result.stderr
    if warned:
        assert "--dedicated-head" in result.stderr and "--head-partition" in result.stderr


@pytest.mark.parametrize(
    ("arg", "said"),
    [
        ("--mpi=pmix", "'--mpi=pmix' sets --mpi, which raysub controls in every step: use raysub's --mpi"),
        (
            "--nodel=n1",
            "'--nodel=n1' sets --nodelist, which raysub controls in every step; it cannot be changed",
        ),
        ("-c4", "'-c4' sets -c, which raysub controls in every step: use raysub's --cpus-per-task"),
    ],
)
def test_an_srun_arg_raysub_sets_names_what_to_use_instead(raysub_cli: RunCli, arg: str, said: str) -> None:
    result = raysub_cli("render", "--nodes", "2", f"--srun-arg={arg}", "--", "true")
    assert result.code == 2
    assert said in result.stderr


def test_srun_args_that_raysub_does_not_set_pass_and_the_sandbox_image_takes_mount_home(
    raysub_cli: RunCli,
) -> None:
    for args in (
        ["--srun-arg=--cpu-bind=none", "--srun-arg=--gres-flags=enforce-binding", "--mpi=pmi2"],
        ["--sandbox-command", "serve", "--sandbox-port", "9000", "--sandbox-container", "img"],
        [
            "--sandbox-command",
            "serve",
            "--sandbox-port",
            "9000",
            "--sandbox-container",
            "img",
            "--no-container-mount-home",
        ],
    ):
        result = raysub_cli("render", "--nodes", "2", *args, "--", "true")
        assert result.code == 0, (args, result.stderr)


def test_render_prints_the_script_and_nothing_else(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "--nodes", "4", "--gpus-per-node", "0", "--", "python", "train.py")
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("#!/bin/bash\n#SBATCH --job-name=raysub\n#SBATCH --nodes=4\n")
    assert "#SBATCH --gpus-per-node" not in result.stdout


def test_output_option_writes_the_file(raysub_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "job.sub"
    result = raysub_cli("render", "--nodes", "2", "-o", str(out), "--", "true")
    assert (result.code, result.stdout) == (0, "")
    assert out.read_text().startswith("#!/bin/bash\n")


def sbatch_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


def test_allocation_options_become_sbatch_lines(raysub_cli: RunCli) -> None:
    result = raysub_cli(
        "render", "-N", "3", "--gpus-per-node", "4", "--cpus-per-task", "16", "-p", "batch", "-A", "ml",
        "-t", "4:00:00", "-J", "sft", "--no-exclusive", "--sbatch-arg", "--qos=high", "--", "true",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert sbatch_lines(result.stdout) == [
        "#SBATCH --job-name=sft",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --partition=batch",
        "#SBATCH --account=ml",
        "#SBATCH --time=4:00:00",
        "#SBATCH --no-requeue",
        "#SBATCH --qos=high",
    ]


def test_no_gpu_request_keeps_gpus_for_ray_but_not_for_slurm(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "-N", "2", "--gpus-per-node", "8", "--no-gpu-request", "--", "true")
    assert "--gpus-per-node" not in "\n".join(sbatch_lines(result.stdout))
    head = next(s for s in extract(result.stdout) if s.name == "head.sh")
    assert "EXPECTED_UNITS=16\n" in head.text


def test_dedicated_head_advertises_no_gpus(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "-N", "3", "--gpus-per-node", "8", "--dedicated-head", "--", "true")
    head = next(s for s in extract(result.stdout) if s.name == "head.sh")
    assert "EXPECTED_UNITS=16\n" in head.text
    assert 'ray_node_args "$ip" "$temp" 0 ""\n' in head.text


def test_environment_variables_give_defaults(raysub_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYSUB_NODES", "5")
    monkeypatch.setenv("RAYSUB_PARTITION", "fromenv")
    result = raysub_cli("render", "--", "true")
    assert result.code == 0, result.stderr
    assert "#SBATCH --nodes=5" in result.stdout
    assert "#SBATCH --partition=fromenv" in result.stdout
    assert "#SBATCH --partition=cli" in raysub_cli("render", "-p", "cli", "--", "true").stdout


def test_a_repeatable_option_from_the_environment_takes_one_value_per_line(
    raysub_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYSUB_ENV", "NCCL_IB_HCA=mlx5_0 mlx5_1\nA=1")
    result = raysub_cli("render", "-N", "2", "--", "true")
    assert result.code == 0, result.stderr
    assert "export NCCL_IB_HCA='mlx5_0 mlx5_1'\nexport A=1\n" in result.stdout


PROFILE = """
[profiles.lab]
partition = "gpu"
account = "ml-infra"
gpus-per-node = 4
env = ["HF_HOME=/data/hf", "A=1"]
"""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gcs-port", "8265"], "Invalid value for '--gcs-port': 8265 is --dashboard-port too"),
        (
            ["--tp", "2", "--tensor-parallel-size", "4"],
            "Invalid value for '--tp': given as 2 and 4; give it once",
        ),
        (["python", "train.py", "--lr", "3"], "No such option '--lr'"),
    ],
)
def test_clashes_and_misplaced_options_say_what_and_where(
    raysub_cli: RunCli, args: list[str], said: str
) -> None:
    result = raysub_cli("render", "-N", "2", *args)
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"raysub: error: {said}"), result.stderr
    assert result.stderr.count("\n") == 1


def test_an_option_after_command_without_the_dashes_is_shown_how_to_pass_it(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "-N", "2", "python", "train.py", "--lr", "3")
    assert result.stderr.endswith(
        "If --lr is COMMAND's, put -- before COMMAND: raysub render [OPTIONS] -- COMMAND...\n"
    )
    assert "put -- before COMMAND" not in raysub_cli("status", "--lr").stderr  # status runs no COMMAND


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        (
            ["-N", "100000", "--dedicated-head", "--", "true"],
            "--nodes 100000: more than raysub has brought up",
        ),
        (
            ["-N", "2", "--", "python", "t.py", "{checkpoint}"],
            "COMMAND has {checkpoint}, which only --checkpoint-dir",
        ),
    ],
)
def test_what_render_cannot_know_is_wrong_is_a_warning(
    raysub_cli: RunCli, args: list[str], warning: str
) -> None:
    result = raysub_cli("render", *args)
    assert result.code == 0, result.stderr
    assert f"raysub: warning: {warning}" in result.stderr


def test_profile_fills_defaults_and_loses_to_the_command_line(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raysub.toml").write_text(PROFILE)
    result = raysub_cli("render", "-N", "2", "--profile", "lab", "-A", "mine", "--", "true")
    assert result.code == 0, result.stderr
    lines = sbatch_lines(result.stdout)
    assert "#SBATCH --partition=gpu" in lines
    assert "#SBATCH --account=mine" in lines
    assert "#SBATCH --gpus-per-node=4" in lines
    assert "export HF_HOME=/data/hf\n" in result.stdout


def test_profile_keys_are_the_options_as_typed_and_a_tilde_is_home(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "raysub.toml").write_text(
        '[profiles.lab]\nsbatch-arg = "--qos=high"\nlog-dir = "~/logs"\ngpus_per_node = 2\n'
    )
    result = raysub_cli("render", "-N", "2", "--profile", "lab", "--", "true")
    assert result.code == 0, result.stderr
    assert "#SBATCH --qos=high" in sbatch_lines(result.stdout)
    assert "#SBATCH --gpus-per-node=2" in sbatch_lines(result.stdout)
    assert f"LOG_BASE={tmp_path}/home/logs\n" in result.stdout
    # The parameter's own name still works, as the library spells it.
    (tmp_path / "raysub.toml").write_text('[profiles.lab]\nsbatch_args = ["--qos=low"]\n')
    result = raysub_cli("render", "-N", "2", "--profile", "lab", "--", "true")
    assert "#SBATCH --qos=low" in sbatch_lines(result.stdout)


def test_profile_from_the_user_config_dir(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "config" / "raysub").mkdir(parents=True)
    (tmp_path / "config" / "raysub" / "raysub.toml").write_text(PROFILE)
    assert (
        "#SBATCH --partition=gpu" in raysub_cli("render", "-N", "2", "--profile", "lab", "--", "true").stdout
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (PROFILE, "no profile 'other'"),
        ("[profiles.other]\nnot-an-option = 1\n", "unknown option 'not_an_option'"),
        ("[profiles.other\n", "raysub.toml"),
        ("profiles = 3\n", "raysub.toml: profiles must be a table of profiles ([profiles.NAME])"),
        ("[profiles.other]\ngpus-per-node = [1]\n", "profiles.other.gpus-per-node = [1]: not integer"),
        ("[profiles.other]\ntp = 'x'\n", "raysub.toml: profiles.other.tp = 'x': 'x' is not a valid integer"),
        ("[profiles.other]\nenv = 'A=1'\nexclusive = 'maybe'\n", "profiles.other.exclusive = 'maybe'"),
        ("[profiles.other]\npartition = 'caf\xe9'\n".encode("latin-1"), "raysub.toml: not UTF-8 text"),
    ],
)
def test_profile_errors_are_one_line(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | bytes, message: str
) -> None:
    """Each names the file and, for a bad value, the profile's key; never RAYSUB_* nor a traceback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    (tmp_path / "raysub.toml").write_bytes(content if isinstance(content, bytes) else content.encode())
    result = raysub_cli("render", "-N", "2", "--profile", "other", "--", "true")
    assert (result.code, result.stdout) == (2, "")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1


def test_help_teaches_with_an_example_for_every_command(raysub_cli: RunCli) -> None:
    assert isinstance(cli, click.Group)
    assert sorted(cli.commands) == [
        "attach",
        "completion",
        "dashboard",
        "grow",
        "health",
        "logs",
        "monitor",
        "plan",
        "render",
        "report",
        "shrink",
        "smoke",
        "status",
        "submit",
        "validate",
        "watch",
    ]
    for command in cli.commands:
        result = raysub_cli(command, "--help")
        assert result.code == 0
        assert "Example:" in result.stdout
    assert "RAYSUB_GPUS_PER_NODE" in raysub_cli("render", "--help").stdout


def test_requeue_and_signal_before_become_sbatch_lines(raysub_cli: RunCli) -> None:
    result = raysub_cli(
        "render", "-N", "2", "--requeue", "--signal-before", "120", "--forward-signal", "sigusr2", "--", "x"
    )
    assert result.code == 0, result.stderr
    assert "#SBATCH --requeue" in sbatch_lines(result.stdout)
    assert "#SBATCH --signal=B:USR2@120" in sbatch_lines(result.stdout)
    assert "trap 'forward_signal USR2' USR2\n" in result.stdout


def test_a_job_is_not_requeued_by_slurm_unless_asked_and_the_docs_say_so(raysub_cli: RunCli) -> None:
    plain = sbatch_lines(raysub_cli("render", "-N", "2", "--", "x").stdout)
    assert "#SBATCH --no-requeue" in plain and "#SBATCH --requeue" not in plain
    asked = sbatch_lines(raysub_cli("render", "-N", "2", "--requeue", "--", "x").stdout)
    assert "#SBATCH --requeue" in asked and "#SBATCH --no-requeue" not in asked
    docs = " ".join((Path(__file__).parents[2] / "docs" / "watch.md").read_text().split())
    assert "raysub renders `#SBATCH --no-requeue` unless `raysub render --requeue`" in docs


@pytest.mark.parametrize(
    ("option", "made"),
    [("--checkpoint-dir", False), ("--create-checkpoint-dir", True)],
)
def test_a_checkpoint_dir_that_does_not_exist_is_refused_unless_the_job_makes_it(
    raysub_cli: RunCli, tmp_path: Path, option: str, made: bool
) -> None:
    missing = tmp_path / "ckpt"
    args = ["--checkpoint-dir", str(missing), *(["--create-checkpoint-dir"] if made else [])]
    result = raysub_cli("render", "-N", "2", *args, "--", "python", "t.py")
    if made:
        assert result.code == 0 and "CREATE_CHECKPOINT_DIR=1" in result.stdout
    else:
        assert result.code == 2
        assert f"{missing} does not exist on" in result.stderr and "--create-checkpoint-dir" in result.stderr
    (tmp_path / "file").write_text("")
    result = raysub_cli("render", "-N", "2", "--checkpoint-dir", str(tmp_path / "file"), "--", "x")
    assert result.code == 2 and "is not a directory" in result.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [(["--signal-before", "0"], "--signal-before"), (["--forward-signal", "KILL"], "--forward-signal")],
)
def test_bad_signal_options(raysub_cli: RunCli, args: list[str], option: str) -> None:
    result = raysub_cli("render", "-N", "2", *args, "--", "x")
    assert (result.code, result.stdout) == (2, "")
    assert f"'{option}'" in result.stderr


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("5:30", 330),
        ("4:00:00", 14400),
        ("1-12", 129600),
        ("1-2:03", 93780),
        ("1-0:0:5", 86405),
    ],
)
def test_slurm_time_limits_in_seconds(text: str, seconds: int) -> None:
    from raysub.spec import time_limit_seconds

    assert time_limit_seconds(text) == seconds
    assert time_limit_seconds("UNLIMITED") is None


def test_signal_before_must_come_before_the_time_limit(raysub_cli: RunCli) -> None:
    refused = raysub_cli("render", "--nodes", "2", "--time", "10", "--signal-before", "600", "--", "true")
    assert refused.code == 2
    assert "--signal-before" in refused.stderr and "600 s" in refused.stderr
    assert (
        raysub_cli("render", "--nodes", "2", "--time", "10", "--signal-before", "599", "--", "true").code == 0
    )


def _nccl_settings(script: str) -> str:
    """The lines of ``script`` that set NCCL's debug variables."""
    start = script.index("if [[ -z ${NCCL_DEBUG+set}")
    return script[start : script.index("\nfi\n", start) + 4]


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, "INFO NET"),
        ({"NCCL_DEBUG": "WARN"}, "WARN -"),
        ({"NCCL_DEBUG_SUBSYS": "INIT,GRAPH"}, "- INIT,GRAPH"),
        ({"NCCL_DEBUG": ""}, " -"),  # set, even empty: the user's
    ],
)
def test_nccl_debug_is_set_only_when_the_user_set_neither(
    raysub_cli: RunCli, environment: dict[str, str], expected: str
) -> None:
    result = raysub_cli("render", "--nodes", "2", "--", "python", "train.py")
    assert result.code == 0, result.stderr
    program = _nccl_settings(result.stdout) + 'echo "${NCCL_DEBUG-"-"} ${NCCL_DEBUG_SUBSYS-"-"}"'
    run = subprocess.run(
        ["bash", "-euc", program],
        env={"PATH": "/usr/bin:/bin", **environment},
        capture_output=True,
        text=True,
    )
    assert run.stdout.rstrip("\n") == expected, run.stderr
    result = raysub_cli("render", "--nodes", "2", "--no-nccl-debug", "--", "python", "train.py")
    assert "NCCL_DEBUG" not in result.stdout
