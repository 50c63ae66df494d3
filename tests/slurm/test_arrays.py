"""Arrays (issue 25, item 4): with --array, each task of the array job is a Ray cluster of its own, on its
own nodes, with its own LOG_DIR (<array job id>_<task id>-logs); raysub status ID lists the tasks, and the
other commands take ID_TASK."""

import json
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.logdir import LogDir
from raysub.status import Phase
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, submit, wait_for_output

pytestmark = pytest.mark.slurm

# Says which task it is and which cluster it reached, then waits for the file argv[1].
DRIVER = (
    "import json, os, sys, time, ray\nray.init()\n"
    "nodes = sorted(n['NodeName'] for n in ray.nodes() if n['Alive'])\n"
    "print('cluster', json.dumps({'task': os.environ['SLURM_ARRAY_TASK_ID'], 'nodes': nodes,"
    " 'gcs': ray.get_runtime_context().gcs_address}), flush=True)\n"
    "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.2)\n"
)


def test_each_task_of_a_two_task_array_is_its_own_two_node_cluster(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    go = slurm_tmp / "go"
    render = ["--array", "0-1", "--nodes", "2", "--gpus-per-node", "0", "--", "python", "-c", DRIVER, str(go)]
    array_id, _ = submit(minicluster, slurm_tmp, render)
    tasks = {task: f"{array_id}_{task}" for task in ("0", "1")}
    seen = {}
    for task, job_id in tasks.items():
        wait_for_output(minicluster, slurm_tmp, job_id, "cluster {")
        logs = LogDir(slurm_tmp / f"{job_id}{protocol.LOG_DIR_SUFFIX}")
        [line] = [line for line in logs.driver_log.read_text().splitlines() if line.startswith("cluster ")]
        said = json.loads(line.removeprefix("cluster "))
        assert said["task"] == task and len(said["nodes"]) == 2, said
        assert said["gcs"] == logs.started_ray_head.read_text().strip()
        seen[task] = said
    # Two clusters at once, on four different nodes; raysub attach takes a task as ID_TASK.
    assert len({*seen["0"]["nodes"], *seen["1"]["nodes"]}) == 4, seen
    attached = minicluster.run("raysub", "attach", tasks["1"], "--", "hostname", cwd=slurm_tmp)
    assert attached.stdout.strip() in seen["1"]["nodes"], attached.stderr
    go.touch()
    for job_id in tasks.values():
        result = minicluster.wait(job_id)
        assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
            minicluster, slurm_tmp, job_id
        )
    elsewhere = slurm_tmp / "elsewhere"
    elsewhere.mkdir()
    shown = json.loads(minicluster.run("raysub", "status", "--json", str(array_id), cwd=elsewhere).stdout)
    assert [Path(task["log_dir"]).name for task in shown] == [f"{job_id}-logs" for job_id in tasks.values()]
    assert [(task["phase"], task["slurm_state"]) for task in shown] == [
        (f"{Phase.FINISHED} 0", "COMPLETED")
    ] * 2
    assert_clean(minicluster, array_id)
