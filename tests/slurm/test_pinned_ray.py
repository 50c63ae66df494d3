"""The node programs run on the job's own Python and Ray, not raysub's (issue 26, item 1): on the minicluster,
a job whose --setup activates a venv with NeMo-RL's pinned Ray 2.49.2 comes up on that Ray with --auth none,
and with the default --auth token ends at once, saying which option to pass and what it costs."""

from pathlib import Path

import pytest

from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, run_job

pytestmark = pytest.mark.slurm

# Also the nodes' switches, which Ray 2.49 takes as labels (--labels-file) as later Rays do (issue 42).
DRIVER = (
    "import ray\nray.init()\nprint('ray', ray.__version__, 'alive', sum(n['Alive'] for n in ray.nodes()))\n"
    "print('switches', sorted((n['NodeName'], n['Labels'].get('raysub/switch'))\n"
    "                         for n in ray.nodes() if n['Alive']))"
)


def render_args(venv: Path, *options: str) -> list[str]:
    return ["--nodes", "2", "--gpus-per-node", "0", "--setup", f"source {venv}/bin/activate", *options,
            "--", "python", "-c", DRIVER]  # fmt: skip


def test_a_job_runs_on_the_frameworks_older_ray(
    minicluster: MiniCluster, slurm_tmp: Path, pinned_ray_venv: Path
) -> None:
    result, logs = run_job(minicluster, slurm_tmp, render_args(pinned_ray_venv, "--auth", "none"))
    report = job_report(minicluster, slurm_tmp, result.job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), report
    assert "ray 2.49.2 alive 2" in logs.driver_log.read_text()
    # The minicluster's switches: node1-2 under s1, node3-4 under s2.
    switches = [(entry.node, f"s{(int(entry.node[4:]) + 1) // 2}") for entry in logs.node_map()]
    assert f"switches {sorted(switches)!r}" in logs.driver_log.read_text()
    assert_clean(minicluster, result.job_id)


def test_token_auth_on_an_older_ray_ends_the_job_naming_the_option_and_its_cost(
    minicluster: MiniCluster, slurm_tmp: Path, pinned_ray_venv: Path
) -> None:
    result, logs = run_job(minicluster, slurm_tmp, render_args(pinned_ray_venv))
    assert result.state == "FAILED", job_report(minicluster, slurm_tmp, result.job_id)
    ended = logs.ended.read_text()
    assert "Ray 2.49.2 does not enforce token authentication (Ray >= 2.52 does)" in ended, ended
    assert "render with --auth none: then anyone who can reach the head's ports can run code as you" in ended
    assert not logs.driver_log.exists() or "alive" not in logs.driver_log.read_text()
    assert_clean(minicluster, result.job_id)
