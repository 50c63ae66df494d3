"""Hostile input cannot inject: rendered jobs run here (fake srun, scontrol and driver) and deliver
every user value byte-exact, and the file any injected command would create never appears.

Each example renders a job from random hostile values (quotes, newlines, $(), backticks, globs, leading
dashes, non-ASCII, 100 KB values), checks every script with bash -n, runs the batch script itself, then
runs the driver script and the head script (up to --setup) with the environment the steps would get.
A test of the test breaks the quoting filter and sees the property fail.
"""

import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from raysub import protocol
from raysub.job.render import environment, render
from raysub.protocol.logdir import LogDir
from raysub.spec import JobSpec
from tests.support.batch import FAKES, read_env

# What an injected command would create: if it ever exists, some value ran as code.
CANARY = Path(tempfile.gettempdir()) / f"raysub-injected-{os.getpid()}"
INJECT = f"touch {CANARY}"
JOB_ID = str(os.getpid())
NODES = ("nodeA", "nodeB")
# CI always runs 2000 examples; RAYSUB_HOSTILE_EXAMPLES=100 makes a quick local run. They take about
# 0.22 s each (a render and five bash runs), so they run as SHARDS tests that xdist's workers share;
# each shard draws its own random examples (docs/performance.md, "Test suite").
EXAMPLES = 2000 if os.environ.get("CI") == "true" else int(os.environ.get("RAYSUB_HOSTILE_EXAMPLES", "2000"))
SHARDS = 4

FRAGMENTS = [
    "'", '"', "\\", "$", "`", f"$({INJECT})", f"`{INJECT}`", f";{INJECT};", f"\n{INJECT}\n",
    f"' ; {INJECT} '", f'" ; {INJECT} "', f"${{IFS}}{INJECT}", "$HOME", "${PATH}", "*", "?", "[a-z]",
    "~", "!", "#", "&", "|", ">", "<", "(", ")", "{", "}", "-", "--", "-rf", "--help", " ", "\t", "\r",
    "\n", "%", "%j", "=", "ü", "日本", "☃", "\u200b", "RAYSUB_HEAD_SH", "RAYSUB_DRIVER_COMMAND_SH", "EOF",
    "PY",
]  # fmt: skip
ANY_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=6)
HOSTILE = st.lists(st.one_of(st.sampled_from(FRAGMENTS), ANY_TEXT), max_size=8).map("".join)
# 100 KB, under the kernel's 128 KiB limit for one argument or environment string.
HUGE = HOSTILE.map(lambda s: (s or "x") * (100_000 // len((s or "x").encode())))
VALUE = st.one_of(HOSTILE, HUGE)
ENV = st.dictionaries(st.from_regex(r"U_[A-Z0-9_]{0,6}", fullmatch=True), VALUE, max_size=3)
# On '#SBATCH' lines: anything but control characters (render refuses those).
NAME = HOSTILE.map(lambda s: "".join(c for c in s if c >= " " and c != "\x7f") or "job")
# One directory name under the test's directory: no '/', and none of what render refuses (%, \, controls).
DIRNAME = HOSTILE.map(lambda s: "".join(c for c in s if c not in "/%\\\x7f" and c >= " ") or "logs").filter(
    lambda s: s not in (".", "..") and len(s.encode()) < 200
)


@contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hostile-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(f"/tmp/rsh{JOB_ID}", ignore_errors=True)


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=60, check=False)


def check_job(args: list[str], env: dict[str, str], setup: str, name: str, image: str, logs: str) -> None:
    """The property: one hostile job, rendered and run here, delivers every value byte-exact."""
    CANARY.unlink(missing_ok=True)
    spec = JobSpec(
        nodes=len(NODES),
        gpus_per_node=0,
        command=(str(FAKES / "record-argv"), *args),
        env=tuple(env.items()),
        setup=setup,
        job_name=name,
        container_image=image,
        interface="lo",
        ray_temp_dir="/tmp/rsh%j/%n",
    )
    with workdir() as tmp:
        base = tmp / logs
        spec = JobSpec(**{**vars(spec), "log_dir": str(base)})
        job = tmp / "job.sub"
        job.write_text(render(spec))
        srun_dir = tmp / "srun"
        srun_dir.mkdir()
        batch_env = {
            "PATH": f"{FAKES}:/usr/bin:/bin",
            "HOME": str(tmp),
            "SLURM_JOB_ID": JOB_ID,
            "SLURM_JOB_NODELIST": ",".join(NODES),
            "SLURMD_NODENAME": NODES[0],
            "SLURM_SUBMIT_DIR": str(tmp),
            "FAKE_SRUN_DIR": str(srun_dir),
        }
        assert run(["bash", "-n", str(job)], tmp, batch_env).returncode == 0
        batch = run(["bash", str(job)], tmp, batch_env)
        log_dir = LogDir.of(base, JOB_ID)
        if image and re.search("[,:]", logs):  # pyxis could not mount LOG_DIR: refused before any step
            assert b"which pyxis --container-mounts cannot take" in batch.stderr
            assert (batch.returncode, list(srun_dir.iterdir())) == (1, [])
            return
        # Every step was "started" and returned at once, so the supervisor ended the job: as designed.
        assert batch.returncode == 1, batch.stderr.decode(errors="replace")[-2000:]
        assert log_dir.ended.exists(), batch.stderr.decode(errors="replace")[-2000:]
        assert re.match(r"(head|workers) job step exited with status 0 before", log_dir.ended.read_text())
        assert stat.S_IMODE(log_dir.path.stat().st_mode) == 0o750
        assert stat.S_IMODE(log_dir.auth_token.stat().st_mode) == 0o600
        assert stat.S_IMODE(log_dir.auth_token.parent.stat().st_mode) == 0o700
        scripts = sorted(log_dir.path.glob("*.sh"))
        assert {stat.S_IMODE(s.stat().st_mode) for s in scripts} == {0o700}
        syntax = run(
            ["bash", "-c", 'for f; do bash -n "$f" || exit 1; done', "-", *map(str, scripts)], tmp, batch_env
        )
        assert syntax.returncode == 0, syntax.stderr.decode(errors="replace")

        steps = {}
        for record_file in srun_dir.glob("*.argv"):
            argv = record_file.read_bytes().decode().split("\0")[:-1]
            steps[Path(argv[-1]).name] = (argv, read_env(record_file.with_suffix(".env")))
        assert sorted(steps) == [protocol.HEAD_SCRIPT, protocol.WORKER_SCRIPT]
        head_argv, step_env = steps[protocol.HEAD_SCRIPT]
        assert f"--container-image={image}" in head_argv or not image
        assert f"--output={log_dir.head_log}" in head_argv
        for key, value in env.items():
            assert step_env[key] == value, key

        # The driver, with the environment the head step (and so the driver) gets.
        record = tmp / "driver"
        driver = run(
            ["bash", str(log_dir.file(protocol.DRIVER_SCRIPT))], tmp, {**step_env, "RECORD_TO": str(record)}
        )
        assert driver.returncode == 0, driver.stderr.decode(errors="replace")[-2000:]
        assert (record.with_suffix(".argv")).read_bytes() == b"".join(a.encode() + b"\0" for a in args)
        driver_env = read_env(record.with_suffix(".env"))
        assert {k: driver_env[k] for k in env} == env

        # The head up to --setup: 'eval' is replaced by a recorder, so the setup string itself never runs.
        hook = tmp / "eval-hook.sh"
        hook.write_text('eval() { printf %s "$1" >"$SETUP_RECORD"; exit 0; }\n')
        setup_record = tmp / "setup"
        head_env = {**step_env, "BASH_ENV": str(hook), "SETUP_RECORD": str(setup_record)}
        head = run(["bash", str(log_dir.file(protocol.HEAD_SCRIPT))], tmp, head_env)
        assert head.returncode == 0, head.stderr.decode(errors="replace")[-2000:]
        assert setup_record.read_bytes() == setup.encode()
    assert not CANARY.exists(), "a value ran as code"


hostile_job = given(
    args=st.lists(VALUE, max_size=4),
    env=ENV,
    setup=VALUE.filter(bool),
    name=NAME,
    image=HOSTILE,
    logs=DIRNAME,
)


@pytest.mark.parametrize("shard", range(SHARDS))
@settings(
    max_examples=-(-EXAMPLES // SHARDS),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@hostile_job
@example(args=FRAGMENTS, env={"U_ALL": "".join(FRAGMENTS)}, setup=INJECT, name="a b", image="'", logs="$(x)")
def test_hostile_values_arrive_exactly_and_never_run(
    shard: int, args: list[str], env: dict[str, str], setup: str, name: str, image: str, logs: str
) -> None:
    check_job(args, env, setup, name, image, logs)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
def test_the_property_catches_a_broken_quoting_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    # Naive single quotes: right for most values, an injection for any value holding a quote.
    monkeypatch.setitem(environment().filters, "shq", lambda value: f"'{value}'")

    @settings(max_examples=300, deadline=None, phases=[Phase.generate], database=None, derandomize=True)
    @hostile_job
    def property_with_broken_filter(
        args: list[str], env: dict[str, str], setup: str, name: str, image: str, logs: str
    ) -> None:
        check_job(args, env, setup, name, image, logs)

    with pytest.raises(AssertionError):
        property_with_broken_filter()
