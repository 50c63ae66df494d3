"""Growing a running job on the minicluster (issue 44), one 2-node job (node1, node2) for all of it.

Ray's autoscaler (--autoscale 4): the driver's STRICT_SPREAD placement group of 4 bundles is placed once
the autoscaler's node provider has submitted two grow jobs (node3, node4), whose nodes have the job's --env
value (which LOG_DIR never holds); once the group is gone and they idle past --autoscale-idle 20, they are
released and leave the queue. raysub grow then adds two nodes by hand; a task sees 4 nodes, and the grow
nodes carry their own job's label. A task running on a grow node when that job is cancelled is retried by
Ray on the job's own nodes, the driver goes on and the job's ENDED is not written. Two more grow jobs
leave through Ray's drain: raysub shrink's while a task runs there (it finishes there), the other on
Slurm's warning signal; Ray records each node's death as a preemption, with the reason. A last grow job
ends within 10 s of the job it grows, which ends with its driver's exit code. A worker started by hand with
another token, or none, is refused by Ray."""

import json
import subprocess
import sys
import textwrap
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol import grow_jobs
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, submit, wait_for

pytestmark = pytest.mark.slurm

# Waits for 4 nodes; a task counts them; a long task is placed on a grow node (soft: it may run elsewhere
# when that node is gone) and says where each attempt ran; then the driver waits for the test.
DRIVER = textwrap.dedent(
    """
    import json, os, pathlib, sys, time
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as InGroup

    here = pathlib.Path(sys.argv[1])
    ray.init()
    job = os.environ["SLURM_JOB_ID"]
    alive = lambda: [node for node in ray.nodes() if node["Alive"]]

    # Ray's autoscaler: a group the job's 2 nodes cannot hold.
    @ray.remote(num_cpus=1)
    def where():
        return ray.get_runtime_context().get_node_id(), os.environ.get("WANDB_API_KEY", "")

    group = placement_group([{"CPU": 1}] * 4, strategy="STRICT_SPREAD")
    ray.get(group.ready(), timeout=150)
    placed = ray.get([
        where.options(scheduling_strategy=InGroup(group, bundle)).remote()
        for bundle in range(4)
    ])
    scaled = {n["NodeID"] for n in alive() if "NODE_ID_AS_RESOURCE" in n["Resources"]}
    # Whether each grow node had the driver's own --env value (the value itself stays out of the log).
    keys = sorted({key == os.environ["WANDB_API_KEY"] for node, key in placed if node in scaled})
    nodes = len({node for node, _ in placed})
    print("group", json.dumps({"nodes": nodes, "scaled": len(scaled), "env": keys}), flush=True)
    remove_placement_group(group)
    deadline = time.time() + 150
    while len(alive()) > 2 and time.time() < deadline:
        time.sleep(0.5)
    print("released", json.dumps({"nodes": len(alive())}), flush=True)
    (here / "released").touch()

    # raysub grow, by hand.
    deadline = time.time() + 150
    while len(alive()) < 4 and time.time() < deadline:
        time.sleep(0.5)

    @ray.remote(num_cpus=0)
    def count():
        return len([node for node in ray.nodes() if node["Alive"]])

    grown = [node for node in alive() if node.get("Labels", {}).get("raysub/job", job) != job]
    print("nodes", json.dumps({"task_saw": ray.get(count.remote()), "grown": len(grown)}), flush=True)

    @ray.remote(num_cpus=0, max_retries=3)
    def long(marker, first=60):
        ip = ray.util.get_node_ip_address()
        with open(marker, "a") as out:
            out.write(ip + "\\n")
        time.sleep(first if len(pathlib.Path(marker).read_text().split()) == 1 else 0)
        return ip

    on_grown = NodeAffinitySchedulingStrategy(grown[0]["NodeID"], soft=True)
    ran = ray.get(long.options(scheduling_strategy=on_grown).remote(str(here / "attempts")))
    print("long", json.dumps({"finished_on": ran}), flush=True)
    (here / "retried").touch()

    # Leaving through Ray's drain: a task running on the grow node of raysub shrink finishes there, the
    # other grow node (Slurm's warning signal) is idle; each node's death says why it left.
    def of_job(grow_job):
        labelled = [n for n in alive() if n.get("Labels", {}).get("raysub/job") == grow_job]
        return labelled[0]["NodeID"] if labelled else None

    while not (here / "drain_jobs").exists():
        time.sleep(0.2)
    shrunk, warned = (here / "drain_jobs").read_text().split()
    deadline = time.time() + 150
    while not (of_job(shrunk) and of_job(warned)) and time.time() < deadline:
        time.sleep(0.5)
    nodes = {shrunk: of_job(shrunk), warned: of_job(warned)}
    on_shrunk = NodeAffinitySchedulingStrategy(nodes[shrunk], soft=True)
    ran = ray.get(long.options(scheduling_strategy=on_shrunk).remote(str(here / "draining"), 6))
    while any(n["Alive"] for n in ray.nodes() if n["NodeID"] in nodes.values()) and time.time() < deadline:
        time.sleep(0.2)
    gone = {n["NodeID"]: n for n in ray.nodes() if n["NodeID"] in nodes.values() and not n["Alive"]}
    why = {
        job: [gone[node].get("DeathReason"), gone[node].get("DeathReasonMessage")]
        for job, node in nodes.items() if node in gone
    }
    attempts = len((here / "draining").read_text().split())
    print("drained", json.dumps({"finished_on": ran, "attempts": attempts, "why": why}), flush=True)
    (here / "drained").touch()
    while not (here / "end").exists():
        time.sleep(0.2)
    sys.exit(5)
    """
)


def said(log: str, key: str) -> dict[str, object]:
    line = next(line for line in log.splitlines() if line.startswith(f"{key} "))
    return json.loads(line.removeprefix(f"{key} "))  # type: ignore[no-any-return]


# The leave file's reason on Slurm's warning signal (templates/grow.sub.j2).
WARNED = "Slurm's warning signal (its time limit or a preemption)"
SECRET = "s3cr3t-grow-4712"  # noqa: S105 (a made-up --env value the test looks for)


def grow(minicluster: MiniCluster, workdir: Path, job_id: int, *args: str) -> str:
    """raysub grow, from a shell that has the job's --env value (LOG_DIR does not keep it)."""
    env = {"WANDB_API_KEY": SECRET}
    out = minicluster.run("raysub", "grow", str(job_id), "--log-dir", str(workdir), *args, env=env).stdout
    return out.split()[2].rstrip(":")  # "grow job <id>: ..."


def test_a_grow_job_adds_nodes_leaves_without_ending_the_job_and_ends_with_it(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    script = slurm_tmp / "driver.py"
    script.write_text(DRIVER)
    scaling = ["--autoscale", "4", "--autoscale-idle", "20", "--env", f"WANDB_API_KEY={SECRET}"]
    render = ["--nodes", "2", "--gpus-per-node", "0", *scaling, "--", "python", str(script), str(slurm_tmp)]
    # Ray's autoscaler looks every second, not every 5 (as Ray on Spark has it): the test waits less.
    faster = "--export=ALL,AUTOSCALER_UPDATE_INTERVAL_S=1"
    job_id, logs = submit(minicluster, slurm_tmp, render, "--nodelist=node[1-2]", "--time=8", faster)
    with ThreadPoolExecutor(1) as meanwhile:
        stranger = meanwhile.submit(join_with_another_token, minicluster, slurm_tmp, logs)
        grow_and_shrink(minicluster, slurm_tmp, job_id, logs, stranger)


def join_with_another_token(minicluster: MiniCluster, slurm_tmp: Path, logs: LogDir) -> dict[str, str]:
    """A worker's ray start on node4 with a token of its own, then with none, while the autoscaler's grow
    nodes idle (so that it takes no CPU from a bring-up): how each ended ("refused: <output>" when Ray
    refused it, else what happened)."""
    wrong = slurm_tmp / "wrong_token"
    wrong.write_text("0" * 64 + "\n")
    wrong.chmod(0o600)
    deadline = time.monotonic() + 180
    while "\ngroup " not in (logs.driver_log.read_text() if logs.driver_log.exists() else ""):
        if time.monotonic() > deadline or logs.ended.exists():
            return {"wrong": "the job's autoscaling never placed its group"}
        time.sleep(0.5)
    address = logs.file(protocol.STARTED_RAY_HEAD).read_text().strip()
    bare = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(slurm_tmp)}
    ended = {}
    for kind, env in (
        ("wrong", bare | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)}),
        ("missing", bare),
    ):
        temp = slurm_tmp / f"stranger-{kind}"
        start = ["timeout", "90", "ray", "start", f"--address={address}", f"--temp-dir={temp}"]
        try:
            minicluster.run_in_node_netns("node4", *start, env=env, timeout=120)
            ended[kind] = "joined"
        except subprocess.CalledProcessError as error:
            said = f"{error.stdout}{error.stderr}"
            # Refused, not left waiting (timeout's 124), and by the token check.
            ended[kind] = "refused" if error.returncode != 124 and "auth" in said.lower() else said
    return ended


def grow_and_shrink(
    minicluster: MiniCluster,
    slurm_tmp: Path,
    job_id: int,
    logs: LogDir,
    stranger: "Future[dict[str, str]]",
) -> None:
    # Ray's autoscaler grew the cluster for the group, its nodes had the --env value, and it released them.
    deadline = time.monotonic() + 300
    while not (slurm_tmp / "released").exists():
        assert time.monotonic() < deadline, job_report(minicluster, slurm_tmp, job_id)
        assert not logs.ended.exists(), job_report(minicluster, slurm_tmp, job_id)
        time.sleep(0.2)
    log = logs.driver_log.read_text()
    assert said(log, "group") == {"nodes": 4, "scaled": 2, "env": [True]}, job_report(
        minicluster, slurm_tmp, job_id
    )
    assert said(log, "released") == {"nodes": 2}
    scaled = [mark for mark in grow_jobs.read_all(logs.path) if mark.by == "autoscale"]
    assert len(scaled) == 2, scaled
    deadline = time.monotonic() + 30
    while [mark.job_id for mark in scaled if minicluster.is_queued(mark.job_id)]:
        assert time.monotonic() < deadline, f"released grow jobs still queued: {scaled}"
        time.sleep(0.2)
    told = logs.file(protocol.AUTOSCALE_LOG).read_text()
    assert told.count("submitted") == 2 and told.count("released by Ray's autoscaler") == 2, told
    for path in logs.path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    # raysub grow, by hand: not from a shell without the job's --env value.
    bare = minicluster.run("raysub", "grow", str(job_id), "--log-dir", str(slurm_tmp), check=False)
    assert bare.returncode == 1 and "--env WANDB_API_KEY" in bare.stderr, bare.stderr
    first = grow(minicluster, slurm_tmp, job_id, "--nodes", "2", "--sbatch-arg=--nodelist=node[3-4]")
    wait_for(slurm_tmp / "attempts", timeout=150)
    assert said(logs.driver_log.read_text(), "nodes") == {"task_saw": 4, "grown": 2}
    grown_ip = (slurm_tmp / "attempts").read_text().split()[0]
    assert grown_ip in ("198.18.0.13", "198.18.0.14"), grown_ip  # node3, node4
    # The grow job is cancelled while the long task runs on one of its nodes: Ray runs it again elsewhere,
    # the driver goes on, and the job goes on.
    minicluster.run("scancel", str(first))
    # Two grow jobs of one node, to leave through Ray's drain: they start once the first has left.
    second = grow(minicluster, slurm_tmp, job_id, "--nodes", "1", "--sbatch-arg=--nodelist=node3")
    third = grow(minicluster, slurm_tmp, job_id, "--nodes", "1", "--sbatch-arg=--nodelist=node4")
    (slurm_tmp / "drain_jobs.tmp").write_text(f"{second} {third}\n")
    (slurm_tmp / "drain_jobs.tmp").rename(slurm_tmp / "drain_jobs")
    wait_for(slurm_tmp / "retried", timeout=120)
    finished_on = said(logs.driver_log.read_text(), "long")["finished_on"]
    assert finished_on in ("198.18.0.11", "198.18.0.12"), finished_on
    assert not logs.ended.exists(), logs.ended.read_text()
    # raysub shrink drains the second while a task runs there, and returns once its job has left the queue;
    # Slurm's warning signal (as its time limit nears; here by hand) drains the third, whose job then ends.
    wait_for(slurm_tmp / "draining", timeout=120)
    minicluster.run("scancel", "--batch", "--signal=USR1", third)
    shrunk = minicluster.run("raysub", "shrink", str(job_id), "--log-dir", str(slurm_tmp), "--job", second)
    assert f"ended grow job {second}" in shrunk.stdout, shrunk.stdout
    assert not minicluster.is_queued(second)
    # A last grow job, for the end: on node4 once the third has left it.
    last = grow(minicluster, slurm_tmp, job_id, "--nodes", "1", "--sbatch-arg=--nodelist=node4")
    wait_for(slurm_tmp / "drained", timeout=90)
    drained = said(logs.driver_log.read_text(), "drained")
    preempted = 3  # NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED
    assert drained == {
        "finished_on": "198.18.0.13",  # node3: not run again elsewhere
        "attempts": 1,
        "why": {
            second: [preempted, f"raysub grow job {second} leaves: raysub shrink"],
            third: [preempted, f"raysub grow job {third} leaves: {WARNED}"],
        },
    }, job_report(minicluster, slurm_tmp, job_id)
    # Each left as soon as Ray let it go (its raylet ends itself once drained and idle), not at the deadline.
    for grown in (second, third):
        while minicluster.is_queued(grown):
            time.sleep(0.2)
        told = (logs.path / protocol.GROW_DIR / grown / "worker-0.log").read_text()
        assert "leave: Ray has let the node go" in told, told
    assert not logs.ended.exists(), logs.ended.read_text()
    listed = json.loads(
        minicluster.run(
            "raysub", "shrink", str(job_id), "--log-dir", str(slurm_tmp), "--list", "--json"
        ).stdout
    )
    by_hand = [(entry["job_id"], entry["nodes"]) for entry in listed if entry["by"] == "grow"]
    assert by_hand == [(first, 2), (second, 1), (third, 1), (last, 1)]
    assert sorted(entry["job_id"] for entry in listed if entry["by"] == "autoscale") == [
        m.job_id for m in scaled
    ]
    # A grow job's files pass LOG_DIR's privacy rules: no one else writes, the step environment is private.
    grow_dir = logs.path / protocol.GROW_DIR
    assert {path.stat().st_mode & 0o022 for path in grow_dir.rglob("*")} == {0}
    assert logs.file(protocol.STEP_ENV).stat().st_mode & 0o777 == 0o600
    # A worker that joins with another token than the job's, or none, is refused by Ray (tried meanwhile).
    assert stranger.result() == {"wrong": "refused", "missing": "refused"}
    # raysub status lists the grow jobs as members of the cluster: the last one up on node4 (waited for).
    status = ["raysub", "status", str(job_id), "--log-dir", str(slurm_tmp), "--json"]
    deadline = time.monotonic() + 90
    while True:
        members = {m["job_id"]: m for m in json.loads(minicluster.run(*status).stdout)["members"]}
        if members[last]["state"] == "up" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (members[last]["state"], members[last]["hosts"]) == ("up", ["node4"]), members[last]
    assert (members[second]["state"], members[second]["detail"]) == ("gone", "left Ray: raysub shrink")
    assert [members[m.job_id]["state"] for m in scaled] + [members[first]["state"]] == ["gone"] * 3
    # The last grow job ends with the job it grows: within 10 s of the job's end, none is left in the queue.
    (slurm_tmp / "end").touch()
    result = minicluster.wait(job_id)
    ended = time.monotonic()
    assert (result.state, result.exit_code) == ("FAILED", 5), job_report(minicluster, slurm_tmp, job_id)
    while minicluster.is_queued(last):
        assert time.monotonic() - ended < 10, f"grow job {last} still queued 10 s after the job ended"
        time.sleep(0.2)
    assert_clean(minicluster, job_id)
