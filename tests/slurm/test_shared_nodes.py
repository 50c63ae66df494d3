"""Jobs that share nodes (issue 25, item 1): on the minicluster's shared partition, 2-node --no-exclusive
jobs on the same two nodes run at once, each on its own block of ports, each driver in its own cluster even
when the submitting shell's RAY_ADDRESS names the other's, and neither ending nor cancelling one touches the
other."""

import json
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, driver, job_report, submit, wait_for_output

pytestmark = pytest.mark.slurm
EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"

# Says which cluster it reached and which nodes that cluster has, waits for the file argv[1], then runs a
# task on every node and says so again.
DRIVER = """
import json, os, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()

def cluster(word):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    said = {"gcs": ray.get_runtime_context().gcs_address, "nodes": sorted(n["NodeName"] for n in nodes)}
    print(word, json.dumps(said), flush=True)
    return nodes

cluster("before")
while not os.path.exists(sys.argv[1]):
    time.sleep(0.2)

@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()

nodes = cluster("after")
done = ray.get([
    where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
    for n in nodes
])
assert sorted(done) == sorted(n["NodeID"] for n in nodes), done
print("tasks ran on every node", flush=True)
"""


def said(logs: LogDir, word: str) -> dict[str, object]:
    [line] = [line for line in logs.driver_log.read_text().splitlines() if line.startswith(f"{word} ")]
    result: dict[str, object] = json.loads(line.removeprefix(f"{word} "))
    return result


def port_blocks(logs: LogDir) -> dict[str, set[str]]:
    """The blocks of ports each node took (a node's retry may take another)."""
    blocks: dict[str, set[str]] = {}
    for entry in logs.timeline():
        if entry.phase == protocol.PHASE_RAY_PORTS:
            blocks.setdefault(entry.node, set()).add(entry.detail)
    return blocks


def state(cluster: MiniCluster, job_id: int) -> str:
    return cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%T", check=False).stdout.strip()


def test_two_jobs_on_the_same_two_nodes_each_reach_only_their_own_cluster(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    jobs: dict[str, tuple[int, LogDir]] = {}
    nodes = ""

    def start(name: str, *sbatch: str) -> tuple[int, LogDir]:
        workdir = slurm_tmp / name
        workdir.mkdir(mode=0o755)
        render = ["--nodes", "2", "--gpus-per-node", "0", "--no-exclusive", "--"]
        render += ["python", driver(workdir, DRIVER), str(workdir / "go")]
        placed = [f"--nodelist={nodes}"] if nodes else []
        job_id, logs = submit(
            minicluster, workdir, render, "--partition=shared", "-c", "1", "--mem=500", *placed, *sbatch
        )
        wait_for_output(minicluster, workdir, job_id, "before {")
        jobs[name] = (job_id, logs)
        return job_id, logs

    def release(name: str) -> None:
        (slurm_tmp / name / "go").touch()

    first, first_logs = start("first")
    nodes = minicluster.run("squeue", "-h", "-j", str(first), "-o", "%N").stdout.strip()
    first_address = first_logs.started_ray_head.read_text().strip()
    # The submitting shell points Ray at the first job's cluster, as a stray RAY_ADDRESS does.
    second, second_logs = start("second", f"--export=ALL,RAY_ADDRESS={first_address}")
    assert (state(minicluster, first), state(minicluster, second)) == ("RUNNING", "RUNNING")
    hosts = minicluster.run("scontrol", "show", "hostnames", nodes).stdout.split()
    for job_id, logs in jobs.values():
        seen = said(logs, "before")
        assert seen["gcs"] == logs.started_ray_head.read_text().strip(), job_report(
            minicluster, slurm_tmp, job_id
        )
        assert seen["nodes"] == hosts
    # On each node the two jobs took different blocks (blocks never overlap: a different start is a
    # different block). Each node picks its own, so the two nodes of one job may differ.
    first_blocks, second_blocks = port_blocks(first_logs), port_blocks(second_logs)
    assert sorted(first_blocks) == sorted(second_blocks) == hosts
    for node, blocks in first_blocks.items():
        assert blocks.isdisjoint(second_blocks[node]), (node, blocks, second_blocks[node])

    release("first")
    result = minicluster.wait(first)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp / "first", first
    )
    # A third job takes the first one's place, and is cancelled while the second runs.
    third, _ = start("third")
    minicluster.run("scancel", str(third))
    assert minicluster.wait(third).state == "CANCELLED"
    assert state(minicluster, second) == "RUNNING"

    release("second")
    result = minicluster.wait(second)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(
        minicluster, slurm_tmp / "second", second
    )
    assert said(second_logs, "after") == said(second_logs, "before")
    assert "tasks ran on every node" in second_logs.driver_log.read_text()
    for job_id in (first, second, third):
        assert_clean(minicluster, job_id)


def sockets_between(minicluster: MiniCluster, node: str, first: int, last: int) -> list[int]:
    """The local ports in ``first..last`` of every TCP socket in ``node``'s network namespace (listening,
    connected or closing), read as the node script reads them."""
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        rows = minicluster.run(*minicluster.enter_node_netns(node), "cat", table).stdout.splitlines()[1:]
        ports += [int(row.split()[1].rsplit(":", 1)[1], 16) for row in rows]
    return sorted(port for port in ports if first <= port <= last)


def wait_until_free(minicluster: MiniCluster, nodes: list[str], first: int, last: int) -> None:
    deadline = time.monotonic() + 180
    while busy := {
        node: ports for node in nodes if (ports := sockets_between(minicluster, node, first, last))
    }:
        assert time.monotonic() < deadline, f"ports {first}-{last} still held after 180 s: {busy}"
        time.sleep(2)


def test_every_node_takes_the_one_block_outside_its_ephemeral_ports(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    # Every node gives outgoing connections ports 10000-17999: 16 of the 17 blocks of --port-range
    # 10000-18499; 18000-18499 is the only one outside, whatever block the job id picks. Not the default
    # range: the jobs before this one took blocks of it, and their closing sockets would hold a block for up
    # to a minute (their outgoing ones are in the nodes' own ephemeral range, 32768 and up).
    nodes = [f"node{k}" for k in range(1, minicluster.nodes + 1)]
    ranges = {
        node: minicluster.run(*minicluster.enter_node_netns(node), "cat", EPHEMERAL).stdout for node in nodes
    }

    def set_ranges(value: dict[str, str]) -> None:
        for node, text in value.items():
            minicluster.run(
                *minicluster.enter_node_netns(node), "sh", "-c", f'echo "$1" >{EPHEMERAL}', "-", text
            )

    set_ranges(dict.fromkeys(nodes, "10000 17999"))
    try:
        wait_until_free(minicluster, nodes, 18000, 18499)
        workdir = slurm_tmp / "ephemeral"
        workdir.mkdir(mode=0o755)
        # The one block outside the nodes' ephemeral range, in a range no job before this one used.
        render = ["--nodes", "2", "--gpus-per-node", "0", "--no-exclusive", "--port-range", "10000-18499"]
        render += ["--"]
        render += ["python", "-c", "import ray; ray.init()"]
        job_id, logs = submit(minicluster, workdir, render, "--partition=shared", "-c", "1", "--mem=500")
        result = minicluster.wait(job_id)
    finally:
        set_ranges({node: text.strip() for node, text in ranges.items()})
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, workdir, job_id)
    blocks = port_blocks(logs)
    assert len(blocks) == 2 and all(taken == {"18000-18499"} for taken in blocks.values()), blocks
    warned = [
        p
        for p in (logs.path / protocol.NODE_LOG_DIR).iterdir()
        if "ephemeral port range" in p.read_text(errors="replace")
    ]
    assert warned == []
    assert_clean(minicluster, job_id)
