"""Training health on the real minicluster: a failed driver restarted in its allocation from the latest
checkpoint, raysub health on a running job (healthy, with its step) and on a hung one (stalled), and
raysub watch resubmitting a job whose node died and resubmitting a stalled one."""

import json
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.logdir import LogDir
from raysub.spec import CHECKPOINT_PLACEHOLDER
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import (
    assert_clean,
    driver,
    job_report,
    run_job,
    submit,
    wait_for,
    wait_for_output,
)

pytestmark = pytest.mark.slurm

NO_GPUS = ["--gpus-per-node", "0"]

# First run: saves step_5 (complete: it holds DONE) and a newer step_9 still being written, then fails.
# Second run: must be told step_5, both in RAYSUB_RESUME_FROM and in place of {checkpoint}.
RESUMING_DRIVER = textwrap.dedent(
    """
    import os, pathlib, sys
    checkpoints, argument = pathlib.Path(sys.argv[1]), sys.argv[2]
    resume = os.environ.get("RAYSUB_RESUME_FROM", "")
    print("resume", repr(resume), "argument", repr(argument), flush=True)
    if not resume:
        (checkpoints / "step_5").mkdir(parents=True)
        (checkpoints / "step_5" / "DONE").write_text("")
        (checkpoints / "step_9").mkdir()
        sys.exit(1)
    assert argument == resume, (argument, resume)
    print("resumed from", resume)
    """
)


def test_a_failed_driver_is_restarted_in_the_allocation_from_the_latest_checkpoint(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    checkpoints = slurm_tmp / "ckpt"
    program = driver(slurm_tmp, RESUMING_DRIVER)
    result, logs = run_job(
        minicluster,
        slurm_tmp,
        ["--nodes", "2", *NO_GPUS, "--driver-restarts", "2", "--restart-backoff", "1",
         "--checkpoint-dir", str(checkpoints), "--create-checkpoint-dir", "--checkpoint-marker", "DONE",
         "--", "python", program, str(checkpoints), CHECKPOINT_PLACEHOLDER],
    )  # fmt: skip
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp, result.job_id
    )
    step_5 = checkpoints / "step_5"
    assert logs.driver_log.read_text() == "resume '' argument ''\n"
    assert f"resumed from {step_5}\n" in logs.file(protocol.driver_log_name(1)).read_text()
    restarts = [e.detail for e in logs.timeline() if e.phase == protocol.PHASE_DRIVER_RESTART]
    assert restarts == [f"run 1 after exit status 1, resuming from {step_5}"]
    assert minicluster.steps(result.job_id) == 2, "a restart in the allocation starts no new step"
    assert_clean(minicluster, result.job_id)


# verl's step line every second, ten of them; then, the first time only, it hangs.
HANGING_DRIVER = textwrap.dedent(
    """
    import pathlib, sys, time
    for step in range(1, 11):
        print(f"step:{step} - actor/loss:{1 / step:.3f} - timing_s/step:1.0", flush=True)
        time.sleep(1)
    hung_once = pathlib.Path(sys.argv[1])
    if not hung_once.exists():
        hung_once.touch()
        time.sleep(3600)
    """
)


def health(cluster: MiniCluster, logs: LogDir, *options: str) -> tuple[int, dict[str, object]]:
    done = cluster.run("raysub", "health", "--json", str(logs.path), *options, check=False)
    report: dict[str, object] = json.loads(done.stdout)
    return done.returncode, report


def test_health_says_healthy_with_the_step_then_stalled_and_watch_resubmits_it(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    hung_once = slurm_tmp / "hung_once"
    render = ["--nodes", "2", *NO_GPUS, "--", "python", driver(slurm_tmp, HANGING_DRIVER), str(hung_once)]
    job_id, logs = submit(minicluster, slurm_tmp, render)
    wait_for_output(minicluster, slurm_tmp, job_id, "step:3 ")
    code, report = health(minicluster, logs)
    assert (code, report["healthy"], report["state"]) == (0, True, "RUNNING"), report
    assert isinstance(report["step"], int) and report["step"] >= 3, report

    wait_for(hung_once)
    deadline = time.monotonic() + 60
    while True:
        code, report = health(minicluster, logs, "--stall-after", "4")
        if code == 1:
            break
        assert time.monotonic() < deadline, report
        time.sleep(1)
    findings = report["findings"]
    assert isinstance(findings, list) and [f["kind"] for f in findings] == ["stall"], report
    assert report["step"] == 10

    watch = minicluster.run(
        "raysub", "watch", str(job_id), "--log-dir", str(slurm_tmp), "--max-resubmissions", "1",
        "--stall-after", "4", "--backoff", "1", "--backoff-max", "2", "--interval", "2", check=False,
    )  # fmt: skip
    assert watch.returncode == 0, watch.stdout + watch.stderr
    assert minicluster.job(job_id).state == "CANCELLED"
    assert_clean(minicluster, job_id)


# Three stacks' formats one after another, as a run's driver log would show them (the lines are shaped as
# in tests/fixtures/corpus/: Megatron-LM's mixtral block, torchtitan's multi-rank block, llm.c's AMD-fork
# block). The second stack prints from a Ray task on another node, so its lines carry Ray's prefix. Before
# each next stack the driver waits for the test's go file. It also says what NCCL_DEBUG the job gave it and
# a task on another node.
THREE_STACKS_DRIVER = textwrap.dedent(
    """
    import os, pathlib, sys, time, ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    go = pathlib.Path(sys.argv[1])
    def wait(phase):
        while not (go / str(phase)).exists():
            time.sleep(0.2)
    def nccl_settings():
        return os.environ.get("NCCL_DEBUG"), os.environ.get("NCCL_DEBUG_SUBSYS")
    for step, stamp in ((1, "00:00:00"), (2, "00:00:06"), (3, "00:00:12")):
        print(f" [2026-11-27 {stamp}] iteration {step:>8}/     100 | consumed samples: {128 * step:>12} |"
              f" elapsed time per iteration (ms): {5829.9 if step == 3 else 5811.2} |"
              f" throughput per GPU (TFLOP/s/GPU): {224.0 if step == 3 else 223.4} |"
              f" learning rate: 1.000000E-05 | global batch size:   128 | lm loss: 5.3E+00 |", flush=True)
    wait(1)
    ray.init()
    @ray.remote(num_cpus=0.1)
    def titan(node):
        for step, stamp, tps in ((4, "17,508", "10,050"), (5, "19,145", "10,007"), (6, "20,782", "10,011")):
            print(f"[titan] 2026-11-27 00:01:{stamp} - root - INFO - step: {step:2d}  loss:  7.07623"
                  f"  grad_norm: 46.5000  memory: 66.91GiB(37.51%)  tps: {tps}  tflops: 313.36  mfu: 13.93%",
                  flush=True)
        return nccl_settings()
    here = ray.get_runtime_context().get_node_id()
    other = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here)
    strategy = NodeAffinitySchedulingStrategy(other, soft=False)
    task = ray.get(titan.options(scheduling_strategy=strategy).remote(other))
    print("nccl driver", nccl_settings(), "task", task, flush=True)
    wait(2)
    for step, ms, tok in ((7, "36.62", "111903"), (8, "36.67", "111885"), (9, "36.74", "111854")):
        print(f"step {step:4d}/100 | loss 3.2514 (+nanz)| norm 0.4521 (+nanz)| lr 3.00e-04 | {ms} ms |"
              f" 9.1% bf16 MFU | {tok} tok/s", flush=True)
    wait(3)
    """
)


def test_health_reads_three_stacks_formats_one_after_another_on_four_nodes(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    go = slurm_tmp / "go"
    go.mkdir()
    render = ["--nodes", "4", *NO_GPUS, "--", "python", driver(slurm_tmp, THREE_STACKS_DRIVER), str(go)]
    job_id, logs = submit(minicluster, slurm_tmp, render)
    expected = [
        ("lm loss: 5.3E+00", 3, 100, 5.8299, {"value": 224.0, "unit": "TFLOP/s/device"}),
        ("tps: 10,011", 6, None, 1.637, {"value": 10011.0, "unit": "tokens/s/device"}),
        ("111854 tok/s", 9, 100, 0.03674, {"value": 111854.0, "unit": "tokens/s"}),
    ]
    for phase, (last, step, total, seconds, throughput) in enumerate(expected, start=1):
        wait_for_output(minicluster, slurm_tmp, job_id, last)
        code, report = health(minicluster, logs)
        assert (code, report["schema_version"], report["step"]) == (0, 2, step), report
        assert report["seconds_per_step"] == pytest.approx(seconds), report
        assert report["throughput"] == throughput, report
        if total is not None:
            assert report["total_steps"] == total, report
        (go / str(phase)).touch()
    assert "nccl driver ('INFO', 'NET') task ('INFO', 'NET')" in logs.driver_log.read_text()
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert_clean(minicluster, job_id)


# First job: saves step_3 (NeMo-RL's layout: complete once training_info.json is in it), says so, and
# trains on; the test then kills a worker's Ray. Second job: told step_3, it finishes.
LOSING_DRIVER = textwrap.dedent(
    """
    import os, pathlib, sys, time, ray
    checkpoints, running = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    resume = os.environ.get("RAYSUB_RESUME_FROM")
    if resume:
        print("resumed from", resume)
        sys.exit(0)
    ray.init()  # returns once the cluster is whole: node3 is in it
    (checkpoints / "step_3").mkdir(parents=True)
    (checkpoints / "step_3" / "training_info.json").write_text("{}")
    running.touch()
    time.sleep(3600)
    """
)


def test_watch_resubmits_a_job_that_lost_a_node_and_it_resumes(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    checkpoints, running = slurm_tmp / "ckpt", slurm_tmp / "running"
    program = driver(slurm_tmp, LOSING_DRIVER)
    script = slurm_tmp / "job.sub"
    render = [
        "--nodes",
        "3",
        *NO_GPUS,
        "--time=5",
        "--",
        "python",
        program,
        str(checkpoints),
        str(running),
    ]
    script.write_text(minicluster.run("raysub", "render", *render).stdout)
    watch = subprocess.Popen(
        ["raysub", "watch", str(script), "--checkpoint-dir", str(checkpoints), "--create-checkpoint-dir",
         "--max-resubmissions", "2",
         "--backoff", "1", "--backoff-max", "2", "--interval", "2"],
        cwd=slurm_tmp, env=minicluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(running)
        raylets = [pid for pid, cmd in minicluster.processes("node3").items() if "/raylet/raylet " in cmd]
        assert len(raylets) == 1, minicluster.processes("node3")
        minicluster.run("kill", "-KILL", str(raylets[0]))
        output, _ = watch.communicate(timeout=240)
    finally:
        watch.kill()
    assert watch.returncode == 0, output
    state = json.loads((slurm_tmp / "job.sub.watch.json").read_text())
    first, second = (entry["job_id"] for entry in state["history"])
    assert minicluster.job(int(first)).state == "FAILED"
    logs = LogDir.of(slurm_tmp, second)
    assert logs.driver_log.read_text() == f"resumed from {checkpoints / 'step_3'}\n", output
    # The job named node3 as failed: the next one asked for as many nodes, without it.
    assert state["excluded"] == ["node3"] and state["history"][0]["failed_nodes"] == ["node3"], output
    nodes = [entry.node for entry in logs.node_map()]
    assert len(nodes) == 3 and "node3" not in nodes, nodes
    assert_clean(minicluster, int(second))
