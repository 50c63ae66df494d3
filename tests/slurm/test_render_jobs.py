"""raysub render + sbatch on the real minicluster: the cluster comes up whole, the driver runs on it,
the job ends with the driver's status, with a constant number of job steps and nothing left behind."""

import json
import shlex
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol import ray_logs
from raysub.protocol.logdir import LogDir
from raysub.spec import SANDBOX_FIXED_PORT
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, batch_output, job_report, run_job, submit

pytestmark = pytest.mark.slurm

# No waiting here: raysub starts the driver only once every node has joined.
DRIVER = textwrap.dedent(
    """
    import socket, ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray.init()
    alive = [n for n in ray.nodes() if n["Alive"]]
    print("alive", len(alive))
    where = ray.remote(num_cpus=1)(lambda: socket.gethostname())
    on = [NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in alive]
    print("hosts", *sorted(ray.get([where.options(scheduling_strategy=s).remote() for s in on])))
    """
)


@pytest.mark.parametrize("nodes", [4, 2, 1])
def test_driver_sees_every_node_and_runs_a_task_on_each(
    minicluster: MiniCluster, slurm_tmp: Path, nodes: int
) -> None:
    result, logs = run_job(
        minicluster, slurm_tmp, ["--nodes", str(nodes), "--gpus-per-node", "0", "--", "python", "-c", DRIVER]
    )
    output = batch_output(slurm_tmp, result.job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output + logs.head_log.read_text()
    driver = logs.driver_log.read_text()
    assert f"alive {nodes}\n" in driver
    assert "hosts " + " ".join(f"node{k}" for k in range(1, nodes + 1)) + "\n" in driver
    assert logs.head_log.exists()
    node_logs = logs.path / protocol.NODE_LOG_DIR
    workers = sorted(
        f"{protocol.NODE_LOG_DIR}/{p.name}" for p in node_logs.glob(f"{protocol.WORKER_LOG_PREFIX}*")
    )
    assert workers == [protocol.worker_log_name(k, nodes - 1) for k in range(nodes - 1)]
    assert logs.worker_units.read_text() == f"{nodes}\n"
    assert logs.ended.read_text() == "driver exited with status 0\n"
    assert minicluster.steps(result.job_id) == (1 if nodes == 1 else 2)
    assert_clean(minicluster, result.job_id)
    # Ray's own logs outlive the nodes' temp dirs: the head's GCS log, every node's raylet's; a good end
    # (Ray killed by raysub) leaves no line that says a Ray process died.
    kept = {log.tag for log in ray_logs.kept_logs(logs.path)}
    assert "node1/gcs_server.out" in kept, kept
    assert {f"node{k}/raylet.out" for k in range(1, nodes + 1)} <= kept
    gcs = ray_logs.read_text(logs.path / protocol.RAY_LOGS_DIR / "node1" / "gcs_server.out.gz")
    assert "(gcs_server)" in gcs
    health = minicluster.run("raysub", "health", "--json", str(logs.path))
    assert not [f for f in json.loads(health.stdout)["findings"] if f["kind"] == "fatal"], health.stdout


def test_a_job_at_scale_large_comes_up_whole_on_real_ray_with_the_gcs_timeouts_raised(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    # --scale large on 4 nodes: one join wave, the raised timeouts, the slower node-table reads and the
    # unit counter's check of the Ray version, on real Ray.
    shown = "import os, ray; ray.init(); print('alive', len([n for n in ray.nodes() if n['Alive']])); " + (
        "print('timeout', os.environ['RAY_worker_register_timeout_seconds'])"
    )
    render = ["--nodes", "4", "--gpus-per-node", "0", "--scale", "large", "--", "python", "-c", shown]
    result, logs = run_job(minicluster, slurm_tmp, render)
    output = batch_output(slurm_tmp, result.job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output + logs.head_log.read_text()
    assert "alive 4\ntimeout 120\n" in logs.driver_log.read_text()
    assert "--brisk=1 " in (logs.path / protocol.HEAD_SCRIPT).read_text()
    assert "joining in wave" not in logs.worker_log(2, 3).read_text()  # all three in the first wave
    assert minicluster.steps(result.job_id) == 2
    assert_clean(minicluster, result.job_id)


def test_job_exits_with_the_drivers_status(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    result, logs = run_job(
        minicluster,
        slurm_tmp,
        ["--nodes", "2", "--gpus-per-node", "0", "--", "bash", "-c", "echo bye; exit 3"],
    )
    assert (result.state, result.exit_code) == ("FAILED", 3)
    assert logs.driver_log.read_text() == "bye\n"
    assert logs.file(protocol.DRIVER_EXIT_CODE).read_text() == "3\n"
    assert_clean(minicluster, result.job_id)


HOSTILE = ["a b", "it's", 'say "hi"', "$HOME", "$(id)", "`id`", "a;b", "line1\nline2", "naïve ☃ 日本", ""]


def test_argv_and_log_dir_survive_hostile_characters(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    base = slurm_tmp / "logs with 'quotes' $HOME `x` ;"
    base.mkdir()
    echo = "import json, sys; print(json.dumps(sys.argv[1:]))"
    result, logs = run_job(
        minicluster,
        slurm_tmp,
        [
            "--nodes",
            "2",
            "--gpus-per-node",
            "0",
            "--log-dir",
            str(base),
            "--",
            "python",
            "-c",
            echo,
            *HOSTILE,
        ],
    )
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp, result.job_id
    )
    logs = LogDir.of(base, result.job_id)
    assert json.loads(logs.driver_log.read_text()) == HOSTILE
    assert_clean(minicluster, result.job_id)


def test_rendered_scripts_are_what_validate_extracts(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    from raysub.validate import extract

    result, logs = run_job(minicluster, slurm_tmp, ["--nodes", "1", "--gpus-per-node", "0", "--", "true"])
    assert result.exit_code == 0
    for script in extract((slurm_tmp / "job.sub").read_text()):
        assert logs.file(script.name).read_text() == script.text, script.name
    subprocess.run(["bash", "-n", str(logs.file(protocol.HEAD_SCRIPT))], check=True)
    assert shlex.split(logs.file(protocol.DRIVER_SCRIPT).read_text().splitlines()[-1]) == ["exec", "true"]


def test_sandbox_on_every_node_is_ready_before_the_driver(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    # Whole nodes, no --sandbox-port: the sandbox's port is SANDBOX_FIXED_PORT, in the variable.
    serve = f'exec python3 -m http.server "${protocol.SANDBOX_PORT_ENV}" --bind 0.0.0.0'
    check = (
        "import os, urllib.request; port = os.environ['RAYSUB_NODE_SANDBOX_PORT']; "
        "print(port, urllib.request.urlopen(f'http://127.0.0.1:{port}/').status)"
    )
    result, logs = run_job(
        minicluster,
        slurm_tmp,
        ["--nodes", "2", "--gpus-per-node", "0", "--sandbox-command", serve, "--", "python", "-c", check],
    )
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp, result.job_id
    )
    assert logs.driver_log.read_text().strip().endswith(f"{SANDBOX_FIXED_PORT} 200")
    ready = sorted(p.name for p in logs.path.glob(f"{protocol.SANDBOX_READY_PREFIX}*"))
    assert ready == [f"{protocol.SANDBOX_READY_PREFIX}node1", f"{protocol.SANDBOX_READY_PREFIX}node2"]
    assert minicluster.steps(result.job_id) == 3
    assert_clean(minicluster, result.job_id)


def test_interactive_job_stays_up_and_attach_sh_reaches_the_head(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    job_id, logs = submit(minicluster, slurm_tmp, ["--nodes", "2", "--gpus-per-node", "0"])
    try:
        deadline = time.monotonic() + 90
        while "cluster ready" not in (logs.head_log.read_text() if logs.head_log.exists() else ""):
            assert time.monotonic() < deadline, "the interactive cluster did not come up"
            time.sleep(0.2)
        attached = minicluster.run("bash", str(logs.file(protocol.ATTACH_SCRIPT)), "hostname")
        assert attached.stdout.strip() == "node1"
        assert minicluster.is_queued(job_id)
    finally:
        minicluster.run("scancel", str(job_id))
    minicluster.wait(job_id)
    assert logs.ended.read_text().startswith("cancelled by Slurm (scancel"), logs.ended.read_text()
    assert_clean(minicluster, job_id)
    # A cancel's TERM leaves each node time to keep its Ray logs.
    kept = {log.tag for log in ray_logs.kept_logs(logs.path)}
    assert {"node1/gcs_server.out", "node2/raylet.out"} <= kept, kept
