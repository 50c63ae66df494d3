"""What ``raysub render`` does for security: token auth by default, dashboard binding, file modes,
and '#SBATCH' lines that sbatch reads back as the values given."""

import subprocess
from pathlib import Path

import pytest

from raysub.job.render import render, sbatch_quote
from raysub.spec import JobSpec
from raysub.validate import extract
from tests.conftest import RunCli


def script_of(raysub_cli: RunCli, *args: str) -> str:
    result = raysub_cli("render", "--nodes", "2", "--gpus-per-node", "0", *args, "--", "python", "train.py")
    assert result.code == 0, result.stderr
    return result.stdout


def embedded(script: str, name: str) -> str:
    return next(s.text for s in extract(script) if s.name == name)


def test_token_auth_is_the_default(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "--nodes", "2", "--", "true")
    assert result.stderr == ""
    assert "export RAY_AUTH_MODE=token\n" in result.stdout
    assert 'export RAY_AUTH_TOKEN_PATH="${LOG_DIR}/.ray-auth/token"\n' in result.stdout
    assert "--auth none" not in result.stdout.split("set -euo pipefail")[0]


def test_auth_none_warns_and_says_so_in_the_header(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "--nodes", "2", "--auth", "none", "--", "true")
    assert result.code == 0
    assert result.stderr.startswith("raysub: warning: --auth none")
    header = result.stdout.split("set -euo pipefail")[0]
    assert "# WARNING: rendered with --auth none" in header
    assert "export RAY_AUTH_MODE=disabled\n" in result.stdout
    assert "RAY_AUTH_TOKEN_PATH" not in result.stdout


def test_dashboard_binds_to_the_head_address_unless_told(raysub_cli: RunCli) -> None:
    head = embedded(script_of(raysub_cli), "head.sh")
    assert "DASHBOARD_PORT=8265\n" in head
    assert 'DASHBOARD_ARGS=(--dashboard-host="$ip" --dashboard-port="$DASHBOARD_PORT")' in head
    head = embedded(script_of(raysub_cli, "--dashboard-host", "127.0.0.1"), "head.sh")
    assert 'DASHBOARD_ARGS=(--dashboard-host=127.0.0.1 --dashboard-port="$DASHBOARD_PORT")' in head
    head = embedded(script_of(raysub_cli, "--no-dashboard"), "head.sh")
    assert "DASHBOARD_ARGS=(--include-dashboard=false)" in head
    assert "0.0.0.0" not in script_of(raysub_cli)  # noqa: S104 (checking that nothing binds there)


def test_log_dir_mode_and_private_scripts(raysub_cli: RunCli) -> None:
    script = script_of(raysub_cli)
    assert "mkdir -m 0750 --" in script
    assert "umask o-w\n" in script
    assert 'chmod 0700 -- "${STAGE}/${script}"' in script
    assert "mkdir -m 0700 --" in script_of(raysub_cli, "--log-mode", "700")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--log-mode", "0777"], "--log-mode"),
        (["--log-mode", "0752"], "--log-mode"),
        (["--log-mode", "0650"], "--log-mode"),
        (["--log-mode", "rwx"], "--log-mode"),
        (["--auth", "password"], "--auth"),
        (["--no-dashboard", "--dashboard-host", "10.0.0.1"], "--dashboard-host"),
        (["--dashboard-host", "$(id)"], "--dashboard-host"),
        (["--job-name", "two\nlines"], "--job-name"),
        (["--job-name", ""], "--job-name"),
        (["--sbatch-arg", "--comment=a\nb"], "--sbatch-arg"),
        (["--sbatch-arg", "--qos high"], "--sbatch-arg"),
        (["--log-dir", "/scratch/100%"], "--log-dir"),
        (["--log-dir", "/scratch/a\\b"], "--log-dir"),
    ],
)
def test_unsafe_values_are_refused(raysub_cli: RunCli, args: list[str], option: str) -> None:
    result = raysub_cli("render", "--nodes", "2", *args, "--", "true")
    assert result.code == 2, result.stdout[:200]
    assert f"'{option}'" in result.stderr


@pytest.mark.parametrize(
    ("args", "instead"),
    [
        (["--log-mode", "0770"], "0750"),
        (["--log-mode", "0775"], "0750"),
        (["--ray-start-arg=--temp-dir=/scratch/ray"], "--ray-temp-dir"),
        (["--ray-start-arg", "--temp-dir", "--ray-start-arg", "/scratch/ray"], "--ray-temp-dir"),
        (["--ray-start-arg=--port=7000"], "--gcs-port"),
        (["--ray-start-arg=--num-gpus=4"], "--gpus-per-node"),
        (["--ray-start-arg=--node-ip-address=10.0.0.1"], "--interface"),
        (["--ray-start-arg=--node-name=x"], "cannot be changed"),
        (["--ray-start-arg=--worker-port-list=9000,9001"], "--min-worker-port"),
        (["--cpus-per-task", "4", "--ray-start-arg=--num-cpus=2"], "--cpus-per-task"),
        (["--sbatch-arg=--nodes=3"], "--nodes"),
        (["--sbatch-arg=-N3"], "--nodes"),
        (["--sbatch-arg=--time=5"], "--time"),
        (["--sbatch-arg=-t5"], "--time"),
        (["--sbatch-arg=--gpus-per-node=2"], "--gpus-per-node"),
        (["--sbatch-arg=--gpus-per-n=2"], "--gpus-per-node"),  # sbatch takes unambiguous abbreviations
        (["--sbatch-arg=--job-name=x"], "--job-name"),
        (["--sbatch-arg=-Jx"], "--job-name"),
        (["--sbatch-arg=--signal=B:USR1@60"], "--signal-before"),
        (["--sbatch-arg=--requeue"], "--requeue/--no-requeue"),
        (["--sbatch-arg=--exclusive=user"], "--exclusive/--no-exclusive"),
        (["--sbatch-arg=--ntasks-per-node=2"], "cannot be changed"),
    ],
)
def test_values_raysub_sets_itself_are_refused_naming_the_option_to_use(
    raysub_cli: RunCli, args: list[str], instead: str
) -> None:
    result = raysub_cli("render", "--nodes", "2", *args, "--", "true")
    assert result.code == 2, result.stdout[:200]
    assert instead in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--sbatch-arg=--gpus=8"],  # an sbatch option of its own, not an abbreviation of --gpus-per-node
        ["--sbatch-arg=--ntasks=2"],
        ["--sbatch-arg=--qos=high"],
        ["--ray-start-arg=--num-cpus=2"],  # raysub sets --num-cpus only with --cpus-per-task
        ["--ray-start-arg=--object-store-memory=200000000"],
        ["--log-mode", "0750"],
        ["--log-mode", "0755"],
    ],
)
def test_values_raysub_leaves_alone_are_taken(raysub_cli: RunCli, args: list[str]) -> None:
    result = raysub_cli("render", "--nodes", "2", *args, "--", "true")
    assert result.code == 0, result.stderr


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("train", "--job-name=train"),
        ("my job", '--job-name="my job"'),
        ('say "hi" \\ $(id) #x', '--job-name="say \\"hi\\" \\\\ $(id) #x"'),
    ],
)
def test_sbatch_header_values_are_quoted_for_sbatch(raysub_cli: RunCli, value: str, line: str) -> None:
    assert f"#SBATCH {line}\n" in script_of(raysub_cli, "--job-name", value)


def test_sbatch_arg_values_are_quoted_and_flags_kept() -> None:
    script = render(JobSpec(nodes=1, sbatch_args=("--comment=a b", "--mail-type=END", "--overcommit")))
    assert '#SBATCH --comment="a b"\n' in script
    assert "#SBATCH --mail-type=END\n" in script
    assert "#SBATCH --overcommit\n" in script


def test_sbatch_quote_round_trips_through_a_bash_like_reading() -> None:
    # sbatch's reader takes \\ and \" inside double quotes as escapes, as bash does; so bash reading
    # the quoted word is a fair stand-in here (the real sbatch reads it in tests/slurm/test_security.py).
    for value in ["a b", 'x"y', "back\\slash", "$(id) `id` 'q'", "☃ naïve"]:
        word = sbatch_quote(value)
        out = subprocess.run(["bash", "-c", f"printf %s {word}".replace("$", "\\$").replace("`", "\\`")],
                             capture_output=True, text=True, check=True)  # fmt: skip
        assert out.stdout == value


def test_attach_helper_carries_the_token_path(tmp_path: Path) -> None:
    script = render(JobSpec(nodes=2))
    attach = next(s.text for s in extract(script) if s.name == "attach.sh")
    assert 'RAY_AUTH_TOKEN_PATH="${LOG_DIR}/.ray-auth/token"' in attach
