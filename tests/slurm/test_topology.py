"""Where the nodes sit, given to Ray (issue 42), on the minicluster's topology/tree (node1-2 under switch s1,
node3-4 under s2; scripts/minicluster): each node's switch is a Ray label a placement group can select, the
nodes are listed switch by switch, a NeMo-RL-style driver gets the nvlink_domain_*/topo_rank resources it
asks for (nvidia-smi stands in with a GB200's recorded -q and an H200's topo -m: no GPU here), each node
has NeMo-RL's GPU-to-CPU file, and --clean-mpi-env leaves no MPI launcher variable to Ray or the driver."""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.minicluster import MiniCluster
from tests.support.prereq import REPO
from tests.support.raysub_jobs import assert_clean, job_report, run_job

pytestmark = pytest.mark.slurm

GB200_UUID = "dc6e40c4-d722-4357-9ba6-5291dd461278"  # tests/fixtures/topology/q-gb200-fabric.txt
MPI = {"PMI_SIZE": "4", "PMIX_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "MPI_LOCALRANKID": "0"}
# As NeMo-RL does (nemo_rl/distributed/virtual_cluster.py): a placement group whose bundles ask for a
# sliver of the NVLink domain's resource, and each node's topo_rank read from ray.nodes().
DRIVER = f"""
import json, os, socket
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as In
ray.init()
nodes = {{n["NodeName"]: n for n in ray.nodes() if n["Alive"]}}
print("ranks", json.dumps({{k: n["Resources"].get("topo_rank") for k, n in nodes.items()}}))
print("own", json.dumps({{k: n["Resources"].get("fast_disk") for k, n in nodes.items()}}))
print("labels", json.dumps({{k: n["Labels"] for k, n in nodes.items()}}))
@ray.remote(num_cpus=0.01)
def where():
    mpi = sorted(k for k in os.environ if k.startswith(("PMI_", "PMIX_", "MPI_", "OMPI_")))
    path = os.environ.get("NRL_GPU_CPU_AFFINITY_FILE", "")
    return socket.gethostname(), mpi, "SLURM_JOB_ID" in os.environ, open(path).read() if path else None
def run_in(pg, n):
    return sorted(ray.get([where.options(scheduling_strategy=In(pg, placement_group_bundle_index=i)).remote()
                           for i in range(n)], timeout=60))
domain = placement_group([{{"CPU": 0.01, "nvlink_domain_{GB200_UUID}": 0.001}}] * 4, strategy="STRICT_SPREAD")
ray.get(domain.ready(), timeout=60)
print("domain", json.dumps(run_in(domain, 4)))
s2 = placement_group([{{"CPU": 0.01}}] * 2, strategy="SPREAD",
                     bundle_label_selector=[{{"raysub/switch": "s2"}}] * 2)
ray.get(s2.ready(), timeout=60)
print("s2", json.dumps([host for host, *_ in run_in(s2, 2)]))
print("driver", json.dumps([sorted(k for k in os.environ if k.startswith(("PMI_", "OMPI_"))),
                            os.environ.get("NRL_JOB_START_EPOCH", "")]))
"""


def said(log: str, key: str) -> Any:
    [line] = [line for line in log.splitlines() if line.startswith(f"{key} ")]
    return json.loads(line.removeprefix(f"{key} "))


def test_the_nodes_topology_reaches_ray_as_labels_and_nemo_rls_resources(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    stand_in = slurm_tmp / "gpu-node"
    (stand_in / "bin").mkdir(parents=True)
    (stand_in / "bin" / "nvidia-smi").symlink_to(REPO / "tests" / "fakes" / "nvidia-smi")
    shutil.copy(REPO / "tests" / "fixtures" / "topology" / "q-gb200-fabric.txt", stand_in / "q.txt")
    shutil.copy(REPO / "tests" / "fixtures" / "topology" / "topo-hgx-h200.txt", stand_in / "topo.txt")
    setup = f"export PATH={stand_in}/bin:$PATH FAKE_NVIDIA_SMI_DIR={stand_in}"
    env = [arg for key, value in MPI.items() for arg in ("--env", f"{key}={value}")]
    own = '--ray-start-arg=--resources={"fast_disk": 2}'  # added to the topology's, not in their place
    render = ["--nodes", "4", "--gpus-per-node", "0", "--setup", setup, "--clean-mpi-env", own, *env]
    result, logs = run_job(minicluster, slurm_tmp, [*render, "--", "python", "-c", DRIVER])
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp, result.job_id
    )
    log = logs.driver_log.read_text()
    # Listed switch by switch: the head and node2 (s1), then node3 and node4 (s2); ranks in that order.
    assert [entry.node for entry in logs.node_map()] == ["node1", "node2", "node3", "node4"]
    assert said(log, "ranks") == {"node1": 1.0, "node2": 2.0, "node3": 3.0, "node4": 4.0}
    assert said(log, "own") == {f"node{k}": 2.0 for k in range(1, 5)}
    labels = said(log, "labels")
    assert isinstance(labels, dict)
    for node, switch in (("node1", "s1"), ("node2", "s1"), ("node3", "s2"), ("node4", "s2")):
        assert labels[node]["raysub/switch"] == switch, labels
        assert labels[node]["raysub/nvlink-domain"] == GB200_UUID
        assert labels[node]["raysub/job"] == str(result.job_id)
    assert said(log, "s2") == ["node3", "node4"]
    # The domain's placement group ran on every node; no MPI variable reached Ray's workers, SLURM_* did;
    # each node's GPU-to-CPU file is ray.sub's format (GPUs 0-3 on NUMA node 0; node1 is not on this machine).
    cpus = Path("/sys/devices/system/node/node0/cpulist").read_text().strip()
    numa = "".join(f"{gpu}:{cpus}\n" for gpu in range(4))
    assert said(log, "domain") == [[f"node{k}", [], True, numa] for k in range(1, 5)]
    mpi_left, started = said(log, "driver")
    assert mpi_left == [] and float(started) > 0
    status = json.loads(minicluster.run("raysub", "status", "--json", str(logs.path)).stdout)
    assert status["topology"] == {
        f"node{k}": {"switch": f"s{(k + 1) // 2}", "block": None, "nvlink_domain": GB200_UUID, "rank": k}
        for k in range(1, 5)
    }
    assert_clean(minicluster, result.job_id)
