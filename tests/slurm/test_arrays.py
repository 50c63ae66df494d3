"""Arrays (issue 25, item 4): with --array, each task of the array job is a Ray cluster of its own, on its
own nodes, with its own LOG_DIR (<array job id>_<task id>-logs), and raysub status ID lists the tasks."""

import json
from pathlib import Path

import pytest

from raysub import protocol
from raysub.status import Phase
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, submit

pytestmark = pytest.mark.slurm

DRIVER = (
    "import json, os, ray\nray.init()\n"
    "nodes = sorted(n['NodeName'] for n in ray.nodes() if n['Alive'])\n"
    "print('cluster', json.dumps({'task': os.environ['SLURM_ARRAY_TASK_ID'], 'nodes': nodes,"
    " 'gcs': ray.get_runtime_context().gcs_address}), flush=True)\n"
)


def test_each_task_of_a_two_task_array_is_its_own_two_node_cluster(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    render = ["--array", "0-1", "--nodes", "2", "--gpus-per-node", "0", "--", "python", "-c", DRIVER]
    array_id, _ = submit(minicluster, slurm_tmp, render)
    seen = []
    for task in ("0", "1"):
        job_id = f"{array_id}_{task}"
        result = minicluster.wait(job_id)
        report = job_report(minicluster, slurm_tmp, job_id)
        assert (result.state, result.exit_code) == ("COMPLETED", 0), report
        logs = protocol.LogDir(slurm_tmp / f"{job_id}{protocol.LOG_DIR_SUFFIX}")
        [line] = [line for line in logs.driver_log.read_text().splitlines() if line.startswith("cluster ")]
        said = json.loads(line.removeprefix("cluster "))
        assert said["task"] == task and len(said["nodes"]) == 2, said
        assert said["gcs"] == logs.started_ray_head.read_text().strip()
        seen.append(said)
    # Two clusters at once, on four different nodes.
    assert len({*seen[0]["nodes"], *seen[1]["nodes"]}) == 4, seen
    elsewhere = slurm_tmp / "elsewhere"
    elsewhere.mkdir()
    shown = minicluster.run("raysub", "status", "--json", str(array_id), cwd=elsewhere)
    tasks = json.loads(shown.stdout)
    assert [Path(task["log_dir"]).name for task in tasks] == [f"{array_id}_{t}-logs" for t in (0, 1)]
    assert [(task["phase"], task["slurm_state"]) for task in tasks] == [
        (f"{Phase.FINISHED} 0", "COMPLETED")
    ] * 2
    assert_clean(minicluster, array_id)
