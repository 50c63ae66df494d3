"""The step as the trainer says it (issue 43, items 1 and 2), on the minicluster, in one job: a Ray Train v2
run on two nodes (torch, gloo) reports through raysub.trainer_hooks.ray_train's callback, and raysub health
shows that step, total and rate, naming the trainer as the source, although the driver's own text says
something else; the same driver writes TensorBoard events (tensorboardX), and without the trainer's report
health reads the step from them, still not from the text."""

import json
import textwrap
from pathlib import Path

import pytest

from raysub import protocol
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, run_job

pytestmark = pytest.mark.slurm

# An epoch-local counter in the driver's text ("Step 3/4" of an epoch), which no reader of text could tell
# from the global step; the trainer reports its global step 6 of 6, and samples/s; its TensorBoard events
# end at step 9 (a count of its own, so that the test tells the sources apart).
DRIVER = textwrap.dedent(
    """
    import sys
    import ray.train
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from tensorboardX import SummaryWriter
    from raysub.trainer_hooks.ray_train import RaysubCallback

    def train(config):
        for step in range(1, 7):
            ray.train.report({"step": step, "samples_per_s": 250.0 * step})

    print("Epoch 2/2 Step 3/4", flush=True)
    callback = RaysubCallback(total=6, throughput_key="samples_per_s", unit="samples/s")
    scaling = ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5})
    run = RunConfig(storage_path=sys.argv[1], callbacks=[callback])
    TorchTrainer(train, scaling_config=scaling, run_config=run).fit()
    writer = SummaryWriter(sys.argv[2])
    for step in range(1, 10):
        writer.add_scalar("train/loss", 1.0 / step, step)
    writer.close()
    print("Epoch 2/2 Step 3/4", flush=True)
    """
)


def test_health_takes_the_trainers_step_then_tensorboards_over_the_drivers_text(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    script = slurm_tmp / "train.py"
    script.write_text(DRIVER)
    storage, events = slurm_tmp / "ray-train", slurm_tmp / "tb"
    storage.mkdir(mode=0o755)
    render = ["--nodes", "2", "--gpus-per-node", "0", "--", "python", str(script), str(storage), str(events)]
    result, logs = run_job(minicluster, slurm_tmp, render)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp, result.job_id
    )
    health = ["raysub", "health", "--json", "--tensorboard-dir", str(events), str(logs.path)]
    checkup = json.loads(minicluster.run(*health, check=False).stdout)
    assert (checkup["step"], checkup["total_steps"], checkup["step_source"]) == (6, 6, "trainer (ray-train)")
    assert checkup["throughput"] == {"value": 1500.0, "unit": "samples/s"}
    said = minicluster.run("raysub", "health", str(logs.path), check=False).stdout
    assert "step 6/6, 1,500 samples/s (from the trainer (ray-train))" in said
    # Without the trainer's report: TensorBoard's step, and still not the text's.
    logs.file(protocol.TRAINER_PROGRESS).unlink()
    checkup = json.loads(minicluster.run(*health, check=False).stdout)
    assert (checkup["step"], checkup["step_source"]) == (9, "tensorboard")
    assert_clean(minicluster, result.job_id)
