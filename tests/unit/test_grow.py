"""raysub grow's batch script and the checks before it is submitted (the minicluster runs it for real:
tests/slurm/test_grow.py): every value quoted, every shellcheck at hand clean, and a clear refusal when the
job cannot be grown."""

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raysub import protocol
from raysub.errors import SpecError
from raysub.job.grow import Grow, render_grow
from raysub.protocol.logdir import LogDir
from tests.conftest import RunCli
from tests.unit.test_validate_shellcheck import SHELLCHECKS

# What a LOG_DIR path may hold (render refuses %, backslashes and control characters in it).
PATH_TEXT = st.text(
    st.characters(codec="utf-8", exclude_characters="\0%\\/\x7f", min_codepoint=32), min_size=1
)


@settings(max_examples=50, deadline=None)
@given(name=PATH_TEXT, partition=PATH_TEXT)
def test_the_grow_script_holds_any_log_dir_and_partition_exactly(name: str, partition: str) -> None:
    log_dir = Path("/lustre/runs") / f"{name}-logs"
    script = render_grow(Grow(LogDir(log_dir), 2, partition=partition, sbatch_args=("--qos=low",)))
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assignment = next(line for line in script.split("\n") if line.startswith("GROWN_LOG_DIR="))
    said = subprocess.run(
        ["bash", "-c", f'{assignment}\nprintf %s "$GROWN_LOG_DIR"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert said.stdout == str(log_dir)
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --qos=low\n" in script


@pytest.mark.parametrize("which", sorted(SHELLCHECKS))
def test_the_grow_script_is_shellcheck_clean(which: str, tmp_path: Path) -> None:
    script = tmp_path / "grow.sub"
    script.write_text(render_grow(Grow(LogDir(tmp_path / "7-logs"), 1, "scavenger", "1:00:00")))
    checked = subprocess.run([SHELLCHECKS[which](), str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize(
    ("grow", "option"),
    [
        (Grow(LogDir(Path("/x")), 0), "--nodes"),
        (Grow(LogDir(Path("/x")), 1, partition="a\nb"), "--partition"),
        (Grow(LogDir(Path("/x")), 1, sbatch_args=("--nodes=4",)), "--sbatch-arg"),
        (Grow(LogDir(Path("/x")), 1, sbatch_args=("qos=low",)), "--sbatch-arg"),
    ],
)
def test_a_value_the_grow_job_cannot_use_names_its_option(grow: Grow, option: str) -> None:
    with pytest.raises(SpecError) as caught:
        render_grow(grow)
    assert caught.value.option == option


def test_a_job_is_grown_only_while_its_ray_runs_and_by_a_raysub_that_records_its_steps(
    raysub_cli: RunCli, tmp_path: Path
) -> None:
    logs = LogDir.of(tmp_path, 4711)
    logs.path.mkdir()
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path))
    assert said.code == 1 and "Ray has not started yet" in said.stderr, said.stderr
    logs.file(protocol.STARTED_RAY_HEAD).write_text("10.0.0.1:6379\n")
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path))
    assert said.code == 1 and f"has no {protocol.STEP_ENV}" in said.stderr, said.stderr
    logs.ended.write_text("driver exited with status 0\n")
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path))
    assert said.code == 1 and "has ended: driver exited with status 0" in said.stderr, said.stderr
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path), "--sbatch-arg=--nodes=9")
    assert said.code == 2 and "raysub grow sets --nodes itself" in said.stderr, said.stderr
    assert (
        raysub_cli("shrink", "4711", "--log-dir", str(tmp_path)).stdout == "job 4711 has no grow job to end\n"
    )
    assert raysub_cli("shrink", "4711", "--log-dir", str(tmp_path), "--list", "--json").stdout == "[]\n"
