"""Where the nodes sit, given to Ray (issue 42), and the step as the trainer says it (issue 43), on the
minicluster's topology/tree (node1-2 under switch s1, node3-4 under s2; scripts/minicluster). The two jobs
run side by side, one test, so that they share the minicluster's time: the topology job on node2-4, the
trainer's on node1.

Topology: each node's switch is a Ray label a placement group can select, the nodes are listed switch by
switch, a NeMo-RL-style driver gets the nvlink_domain_*/topo_rank resources it asks for (nvidia-smi stands
in with a GB200's recorded -q and an H200's topo -m: no GPU here), each node has NeMo-RL's GPU-to-CPU file,
and --clean-mpi-env leaves no MPI launcher variable to Ray or the driver.

The trainer's step: a Ray Train v2 run (two workers of the framework-free DataParallelTrainer) reports
through raysub.trainer_hooks.ray_train's callback, and raysub health shows that step, total and rate,
naming the trainer as the source, although the driver's own text says something else; the same driver
writes TensorBoard events (tensorboardX), and without the trainer's report health reads the step from
them, still not from the text."""

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from raysub import protocol
from raysub.protocol import step_sources, trainer_progress
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.prereq import REPO
from tests.support.raysub_jobs import assert_clean, job_report, submit

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
sliver = {{"CPU": 0.01, "nvlink_domain_{GB200_UUID}": 0.001}}
domain = placement_group([sliver] * len(nodes), strategy="STRICT_SPREAD")
ray.get(domain.ready(), timeout=60)
print("domain", json.dumps(run_in(domain, len(nodes))))
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


# An epoch-local counter in the driver's text ("Step 3/4" of an epoch), which no reader of text could tell
# from the global step; the trainer reports its global step 6 of 6, and samples/s; its TensorBoard events
# end at step 9 (a count of its own, so that the test tells the sources apart).
TRAINER = textwrap.dedent(
    """
    import sys
    import ray.train
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from tensorboardX import SummaryWriter
    from raysub.trainer_hooks.ray_train import RaysubCallback

    def train(config):
        for step in range(1, 7):
            ray.train.report({"step": step, "samples_per_s": 250.0 * step})

    print("Epoch 2/2 Step 3/4", flush=True)
    callback = RaysubCallback(total=6, throughput_key="samples_per_s", unit="samples/s")
    scaling = ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5})
    run = RunConfig(storage_path=sys.argv[1], callbacks=[callback])
    DataParallelTrainer(train, scaling_config=scaling, run_config=run).fit()
    writer = SummaryWriter(sys.argv[2])
    for step in range(1, 10):
        writer.add_scalar("train/loss", 1.0 / step, step)
    writer.close()
    print("Epoch 2/2 Step 3/4", flush=True)
    print("run step 12 of 12", flush=True)  # a form only the job's own --step-regex reads
    """
)


STEP_REGEX = r"run step (?P<step>\d+) of (?P<total>\d+)"


def topology_render(slurm_tmp: Path) -> list[str]:
    stand_in = slurm_tmp / "gpu-node"
    (stand_in / "bin").mkdir(parents=True)
    (stand_in / "bin" / "nvidia-smi").symlink_to(REPO / "tests" / "fakes" / "nvidia-smi")
    shutil.copy(REPO / "tests" / "fixtures" / "topology" / "q-gb200-fabric.txt", stand_in / "q.txt")
    shutil.copy(REPO / "tests" / "fixtures" / "topology" / "topo-hgx-h200.txt", stand_in / "topo.txt")
    setup = f"export PATH={stand_in}/bin:$PATH FAKE_NVIDIA_SMI_DIR={stand_in}"
    env = [arg for key, value in MPI.items() for arg in ("--env", f"{key}={value}")]
    own = '--ray-start-arg=--resources={"fast_disk": 2}'  # added to the topology's, not in their place
    render = ["--nodes", "3", "--gpus-per-node", "0", "--setup", setup, "--clean-mpi-env", own, *env]
    return [*render, "--", "python", "-c", DRIVER]


def check_topology(minicluster: MiniCluster, workdir: Path, job_id: int, logs: LogDir) -> None:
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, workdir, job_id)
    log = logs.driver_log.read_text()
    nodes = ["node2", "node3", "node4"]
    switches = {"node2": "s1", "node3": "s2", "node4": "s2"}
    # Listed switch by switch: the head (s1), then node3 and node4 (s2); ranks in that order.
    assert [entry.node for entry in logs.node_map()] == nodes
    assert said(log, "ranks") == {node: float(rank) for rank, node in enumerate(nodes, 1)}
    assert said(log, "own") == dict.fromkeys(nodes, 2.0)
    labels = said(log, "labels")
    for node in nodes:
        assert labels[node]["raysub/switch"] == switches[node], labels
        assert labels[node]["raysub/nvlink-domain"] == GB200_UUID
        assert labels[node]["raysub/job"] == str(job_id)
    assert said(log, "s2") == ["node3", "node4"]
    # The domain's placement group ran on every node; no MPI variable reached Ray's workers, SLURM_* did;
    # each node's GPU-to-CPU file is ray.sub's format (GPUs 0-3 on NUMA node 0; node1 is not on this machine).
    cpus = Path("/sys/devices/system/node/node0/cpulist").read_text().strip()
    numa = "".join(f"{gpu}:{cpus}\n" for gpu in range(4))
    assert said(log, "domain") == [[node, [], True, numa] for node in nodes]
    mpi_left, started = said(log, "driver")
    assert mpi_left == [] and float(started) > 0
    status = json.loads(minicluster.run("raysub", "status", "--json", str(logs.path)).stdout)
    assert status["topology"] == {
        node: {"switch": switches[node], "block": None, "nvlink_domain": GB200_UUID, "rank": rank}
        for rank, node in enumerate(nodes, 1)
    }


def check_trainer(minicluster: MiniCluster, workdir: Path, job_id: int, logs: LogDir, events: Path) -> None:
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, workdir, job_id)
    health = ["raysub", "health", "--json", "--tensorboard-dir", str(events), str(logs.path)]
    checkup = json.loads(minicluster.run(*health, check=False).stdout)
    assert (checkup["step"], checkup["total_steps"], checkup["step_source"]) == (6, 6, "trainer (ray-train)")
    assert checkup["throughput"] == {"value": 1500.0, "unit": "samples/s"}
    told = minicluster.run("raysub", "health", str(logs.path), check=False).stdout
    assert "step 6/6, 1,500 samples/s (from the trainer (ray-train))" in told
    # Without the trainer's report: TensorBoard's step, and still not the text's.
    logs.file(protocol.TRAINER_PROGRESS).unlink()
    checkup = json.loads(minicluster.run(*health, check=False).stdout)
    assert (checkup["step"], checkup["step_source"]) == (9, "tensorboard")
    # Without either: the driver's text, read with the pattern the job was rendered with (LOG_DIR).
    assert step_sources.read(logs.path).step_regex == STEP_REGEX
    checkup = json.loads(minicluster.run("raysub", "health", "--json", str(logs.path), check=False).stdout)
    assert (checkup["step"], checkup["total_steps"], checkup["step_source"]) == (12, 12, "driver log")
    # The report draws the trainer's reports (its history), not the text's.
    assert [report.step for report in trainer_progress.history(logs.path)][-1] == 6
    page = workdir / "report.html"
    minicluster.run("raysub", "report", "--output", str(page), str(logs.path))
    assert "the step as the trainer (ray-train) reported it" in page.read_text()


def test_topology_reaches_ray_and_the_trainers_own_step_reaches_health(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    where, trained = slurm_tmp / "topology", slurm_tmp / "trainer"
    where.mkdir(mode=0o755)
    trained.mkdir(mode=0o755)
    script = trained / "train.py"
    script.write_text(TRAINER)
    storage, events = trained / "ray-train", trained / "tb"
    storage.mkdir(mode=0o755)
    trainer_render = [
        "--nodes",
        "1",
        "--gpus-per-node",
        "0",
        "--step-regex",
        STEP_REGEX,
        "--",
        "python",
        str(script),
        str(storage),
        str(events),
    ]
    trainer_id, trainer_logs = submit(minicluster, trained, trainer_render, "--nodelist=node1")
    topology_id, topology_logs = submit(minicluster, where, topology_render(where), "--nodelist=node[2-4]")
    check_topology(minicluster, where, topology_id, topology_logs)
    check_trainer(minicluster, trained, trainer_id, trainer_logs, events)
    assert_clean(minicluster, topology_id)
    assert_clean(minicluster, trainer_id)
