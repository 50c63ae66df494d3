"""GPU checks on the real minicluster: the preflight gate (with a fake nvidia-smi, the only part that is
not real: there are no GPUs here) ends a job whose node3 has a busy GPU before Ray starts there; the smoke
test places one actor on each of 8 logical GPU slots of 4 nodes (Ray advertises what --num-gpus says and
assigns those slots as it would real GPUs), runs gloo's all-reduce and leaves no placement group."""

import json
import textwrap
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.smoke_result import read_result
from tests.support.batch import FAKES
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, run_job, submit, wait_for

pytestmark = pytest.mark.slurm

IDLE = """\
gpu 0, GPU-00000000-0000-4000-8000-000000000000, NVIDIA H100 80GB HBM3, 0, 1, 81559, 30, 70.00, 700.00
gpu 1, GPU-00000000-0000-4000-8000-000000000001, NVIDIA H100 80GB HBM3, 0, 1, 81559, 31, 71.00, 700.00
"""
BUSY = IDLE.replace("0, 1, 81559, 31", "97, 30512, 81559, 58") + (
    "app 4242, /usr/bin/python3, 30000, GPU-00000000-0000-4000-8000-000000000001\n"
)


def test_preflight_fail_ends_the_job_before_ray_starts_on_a_node_with_a_busy_gpu(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    # Two logical GPUs per node (Ray advertises what --num-gpus says), and nvidia-smi replaced by a fake
    # that answers for each node from its scenario: node3's GPU 1 is held by another job's process.
    scenarios, fake = slurm_tmp / "gpus", slurm_tmp / "bin"
    scenarios.mkdir()
    fake.mkdir()
    (scenarios / "default").write_text(IDLE)
    (scenarios / "node3").write_text(BUSY)
    (fake / "nvidia-smi").symlink_to(FAKES / "nvidia-smi")
    setup = f"export PATH={fake}:$PATH FAKE_NVIDIA_SMI_DIR={scenarios}"
    result, logs = run_job(
        minicluster,
        slurm_tmp,
        ["--nodes", "4", "--gpus-per-node", "2", "--no-gpu-request", "--preflight", "fail", "--setup", setup,
         "--", "python", "-c", "import ray; ray.init(); print('never runs')"],
    )  # fmt: skip
    report = job_report(minicluster, slurm_tmp, result.job_id)
    assert result.exit_code != 0, report
    ended = logs.ended.read_text()
    assert (
        ended.startswith("worker ")
        and " on node3: GPU preflight: GPU 1 is held by pid 4242 (python3" in ended
    )
    assert not logs.file(protocol.DRIVER_STARTED).exists(), report
    assert "Ray runtime started" not in logs.worker_log(1, 3).read_text(), "Ray started on node3"
    status = json.loads(minicluster.run("raysub", "status", "--json", str(logs.path)).stdout)
    assert any(w.startswith("GPU preflight on node3: GPU 1 is held") for w in status["warnings"]), status
    assert_clean(minicluster, result.job_id)


# Run on the head after the smoke test, in the same cluster: every placement group Ray still holds.
PLACEMENT_GROUPS = textwrap.dedent(
    """
    import json, ray
    ray.init()
    print(json.dumps([g["state"] for g in ray.util.placement_group_table().values()]))
    """
)


def test_smoke_places_one_actor_on_each_gpu_slot_and_leaves_no_placement_group(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    # An interactive job: the cluster stays up, the smoke test runs in it, then Ray is asked what is left.
    job_id, logs = submit(
        minicluster, slurm_tmp, ["--nodes", "4", "--gpus-per-node", "2", "--no-gpu-request"]
    )
    attach = ["bash", str(logs.file(protocol.ATTACH_SCRIPT))]
    try:
        wait_for(logs.file(protocol.STARTED_RAY_HEAD))
        deadline = time.monotonic() + 120
        while "cluster ready" not in logs.head_log.read_text():
            assert time.monotonic() < deadline, job_report(minicluster, slurm_tmp, job_id)
            time.sleep(0.5)
        out = slurm_tmp / "smoke.json"
        smoke = minicluster.run(
            *attach, "raysub", "smoke", "--nodes", "4", "--gpus-per-node", "2", "--allreduce=required",
            "-o", str(out), check=False, timeout=300,
        )  # fmt: skip
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        left = minicluster.run(*attach, "python", "-c", PLACEMENT_GROUPS, timeout=120).stdout.splitlines()[-1]
    finally:
        minicluster.run("scancel", str(job_id))
    minicluster.wait(job_id)
    placed = read_result(out)
    assert placed is not None and placed.ok, placed
    slots = {(actor.node, actor.gpu_ids) for actor in placed.actors}
    assert len(placed.actors) == len(slots) == 8, placed.actors
    assert {node for node, _ in slots} == {f"node{k}" for k in range(1, 5)}
    assert all(len(gpu_ids) == 1 for _, gpu_ids in slots)
    assert (placed.allreduce.status, placed.allreduce.backend, placed.allreduce.world_size) == (
        "ok",
        "gloo",
        8,
    )
    assert "CREATED" not in json.loads(left), left
    # Where each node sits (the minicluster's topology/tree; no nvidia-smi: each node its own NVLink
    # domain), each switch and domain checked by a placement group that selects it.
    assert placed.topology == {
        f"node{k}": {"raysub/switch": f"s{(k + 1) // 2}", "raysub/nvlink-domain": f"node{k}"}
        for k in range(1, 5)
    }
    assert_clean(minicluster, job_id)


def test_render_smoke_runs_the_smoke_test_as_the_jobs_driver(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    result, logs = run_job(
        minicluster, slurm_tmp, ["--nodes", "2", "--gpus-per-node", "2", "--no-gpu-request", "--smoke"]
    )
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp, result.job_id
    )
    placed = read_result(logs.file(protocol.SMOKE))
    assert placed is not None and placed.ok and len({(a.node, a.gpu_ids) for a in placed.actors}) == 4
    assert placed.allreduce.status == "ok"
    assert_clean(minicluster, result.job_id)
