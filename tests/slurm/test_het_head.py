"""A head apart (issue 25, item 3): with --head-partition, a heterogeneous job puts the head and the driver
alone on a node of one partition, without GPUs, and the workers on nodes of another, in two job steps."""

import json
from pathlib import Path

import pytest

from raysub import protocol
from raysub.status import Phase
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, submit, wait_for_output

pytestmark = pytest.mark.slurm

# Says which nodes the cluster has and their CPUs, then waits for the file argv[1].
DRIVER = (
    "import json, os, sys, time, ray\nray.init()\n"
    "nodes = {n['NodeName']: n['Resources'].get('CPU') for n in ray.nodes() if n['Alive']}\n"
    "print('nodes', json.dumps(nodes), flush=True)\n"
    "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.2)\n"
)


def test_a_head_in_one_partition_and_three_workers_in_another_run_the_driver_in_two_steps(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    render = ["--nodes", "4", "--gpus-per-node", "0", "--head-partition", "shared", "--head-cpus", "1"]
    render += [
        "--head-mem",
        "300",
        "--partition",
        "main",
        "--",
        "python",
        "-c",
        DRIVER,
        str(slurm_tmp / "go"),
    ]
    job_id, logs = submit(minicluster, slurm_tmp, render)
    wait_for_output(minicluster, slurm_tmp, job_id, "nodes {")
    # The whole cluster, in two job steps: the head's and ALL the workers'.
    assert minicluster.steps(job_id) == 2, job_report(minicluster, slurm_tmp, job_id)
    # raysub attach reaches the head's node (component 0) and a worker's (component 1).
    nodes_by_role = {(e.role, e.index): e.node for e in logs.node_map()}
    for where, node in ((["--worker", "2"], nodes_by_role["worker", 2]), ([], nodes_by_role["head", 0])):
        attached = minicluster.run(
            "raysub", "attach", str(job_id), "--log-dir", str(slurm_tmp), *where, "--", "hostname"
        )
        assert attached.stdout.strip() == node, attached.stderr
    (slurm_tmp / "go").touch()
    result = minicluster.wait(job_id)
    report = job_report(minicluster, slurm_tmp, job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), report
    assert minicluster.steps(job_id) == 4, report  # and the two of raysub attach
    [line] = [line for line in logs.driver_log.read_text().splitlines() if line.startswith("nodes ")]
    nodes = json.loads(line.removeprefix("nodes "))
    # The head's node gives the job 1 CPU (component 0, partition shared); each worker's node all of its
    # own (component 1, partition main, whole nodes).
    head = logs.file(protocol.ATTACH_ENV).read_text().split()[1]
    whole = minicluster.run("scontrol", "-o", "show", "node", head).stdout
    cpus = int(whole.split("CPUTot=")[1].split()[0])
    assert nodes == {name: (1.0 if name == head else float(cpus)) for name in nodes}, nodes
    assert len(nodes) == 4, nodes
    shown = json.loads(minicluster.run("raysub", "status", "--json", str(logs.path)).stdout)
    assert shown["phase"] == f"{Phase.FINISHED} 0", shown
    assert "head | " in minicluster.run("raysub", "logs", "--head", str(logs.path)).stdout
    assert_clean(minicluster, job_id)
