"""The Ray settings the batch script exports before any step starts, run in bash as the script runs them."""

import subprocess

import pytest

from raysub.job.render import render
from raysub.job.view import LARGE_SCALE
from raysub.spec import JobSpec

TIMEOUT = "RAY_raylet_client_connect_timeout_milliseconds"
ATTEMPTS = "RAY_raylet_client_num_connect_attempts"


def exported(names: tuple[str, ...], env: dict[str, str], spec: JobSpec) -> dict[str, str]:
    """Variables ``names`` ("unset" for one that is not) once the batch script's settings section has run
    with ``env``."""
    script = render(spec)
    start = script.index("# ---- settings")
    end = script.index("\nLOG_BASE=", start)
    shown = "printf '%s\\n'" + "".join(f' "${{{name}:-unset}}"' for name in names)
    out = subprocess.run(
        ["bash", "-c", script[start:end] + "\n" + shown], env=env, capture_output=True, text=True, check=True
    )
    return dict(zip(names, out.stdout.splitlines(), strict=True))


def settings_after(env: dict[str, str], spec: JobSpec | None = None) -> dict[str, str]:
    """The two connect settings once the batch script's settings section has run with ``env``."""
    return exported((TIMEOUT, ATTEMPTS), env, spec or JobSpec(nodes=2, command=("true",)))


def test_a_raylet_retries_its_socket_every_tenth_of_a_second_for_the_same_ten_seconds() -> None:
    assert settings_after({}) == {TIMEOUT: "100", ATTEMPTS: "100"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({TIMEOUT: "30000"}, {TIMEOUT: "30000", ATTEMPTS: "unset"}),
        ({ATTEMPTS: "20"}, {TIMEOUT: "unset", ATTEMPTS: "20"}),
        ({TIMEOUT: "2000", ATTEMPTS: "20"}, {TIMEOUT: "2000", ATTEMPTS: "20"}),
    ],
)
def test_a_user_setting_of_either_leaves_both_as_ray_has_them(
    env: dict[str, str], expected: dict[str, str]
) -> None:
    # Ours beside a user's other one could shrink Ray's budget (20 tries of 0.1 s: 2 s).
    assert settings_after(env) == expected


def test_env_option_counts_as_a_user_setting() -> None:
    spec = JobSpec(nodes=2, command=("true",), env=((TIMEOUT, "5000"),))
    assert settings_after({}, spec) == {TIMEOUT: "5000", ATTEMPTS: "unset"}


GCS_TIMEOUTS = tuple(f"RAY_{name}" for name in LARGE_SCALE.ray_timeouts)


def test_a_large_job_gives_rays_gcs_timeouts_two_minutes_unless_set() -> None:
    large = JobSpec(nodes=300, command=("true",))
    assert exported(GCS_TIMEOUTS, {}, large) == dict.fromkeys(GCS_TIMEOUTS, "120")
    mine = {"RAY_worker_register_timeout_seconds": "600"}
    assert exported(GCS_TIMEOUTS, mine, large)["RAY_worker_register_timeout_seconds"] == "600"
    by_env = JobSpec(nodes=300, command=("true",), env=(("RAY_gcs_rpc_server_connect_timeout_s", "30"),))
    assert exported(GCS_TIMEOUTS, {}, by_env)["RAY_gcs_rpc_server_connect_timeout_s"] == "30"
    for normal in (
        JobSpec(nodes=255, command=("true",)),
        JobSpec(nodes=300, command=("true",), scale="normal"),
    ):
        assert exported(GCS_TIMEOUTS, {}, normal) == dict.fromkeys(GCS_TIMEOUTS, "unset")
