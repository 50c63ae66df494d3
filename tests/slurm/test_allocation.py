"""Ray sees what Slurm gave (issue 25, item 2): on the minicluster's shared partition, a job given 1 CPU and
600 MB per node shows Ray 1 CPU and that memory per node, not the machine's CPUs and memory."""

import json
from pathlib import Path

import pytest

from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, submit

pytestmark = pytest.mark.slurm

DRIVER = "import json, ray\nray.init()\nprint('resources', json.dumps(ray.cluster_resources()), flush=True)\n"
MB = 1024 * 1024


def test_ray_counts_the_cpus_and_memory_slurm_gave_not_the_machines(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    render = ["--nodes", "2", "--gpus-per-node", "0", "--no-exclusive", "--", "python", "-c", DRIVER]
    job_id, logs = submit(
        minicluster, slurm_tmp, render, "--partition=shared", "--cpus-per-task=1", "--mem=600"
    )
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    [line] = [line for line in logs.driver_log.read_text().splitlines() if line.startswith("resources ")]
    resources = json.loads(line.removeprefix("resources "))
    assert resources["CPU"] == 2.0, resources  # the machine has more: the minicluster's nodes share its CPUs
    store = 600 * MB * 3 // 10
    assert resources["object_store_memory"] == pytest.approx(2 * store, rel=0.01), resources
    assert resources["memory"] == pytest.approx(2 * (600 * MB - store), rel=0.01), resources
    assert_clean(minicluster, job_id)
