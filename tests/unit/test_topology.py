"""Where a node sits (raysub/job/lib/topology.py, raysub/job/programs/topology.py), judged on nvidia-smi's
and Slurm's outputs as published (tests/fixtures/topology/README.md names each source), and against
NeMo-RL's ray.sub on the same inputs."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from raysub.job.lib import topology as rules
from raysub.job.programs import topology as program
from raysub.protocol import topology_log
from tests.support.batch import job_spec, run_batch_script
from tests.support.prereq import REPO

FIXTURES = REPO / "tests" / "fixtures" / "topology"
GB200_UUID = "dc6e40c4-d722-4357-9ba6-5291dd461278"
# NeMo-RL's ray.sub (NVIDIA-NeMo/RL 7ea279ab, ray.sub lines 502-505): the node's ClusterUUID, as its probe
# finds it, run here as it is written.
RAY_SUB_PROBE = "nvidia-smi -q 2>/dev/null | grep 'ClusterUUID' | head -1 | awk -F: '{print $2}' | tr -d ' '"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def ray_sub_resources(q_output: str, gpus: int, rank: int, tmp_path: Path) -> str:
    """The --resources JSON ray.sub (lines 562-584) gives a node that is not a dedicated head, its probe
    run with an nvidia-smi that prints ``q_output``."""
    bin_dir = tmp_path / "ray-sub-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "q.txt").write_text(q_output)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat {bin_dir / 'q.txt'}\n")
    smi.chmod(0o755)
    uuid = subprocess.run(
        ["bash", "-c", RAY_SUB_PROBE],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
    ).stdout.strip()
    said = f'{{"slurm_managed_ray_cluster": 1, "worker_units": {gpus}'
    said += f', "nvlink_domain_{uuid}": 1' if uuid else ""
    return said + f', "topo_rank": {rank}}}'


def run_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, q: str | None, *args: str) -> list[str]:
    """The topology program on node "n7" of LOG_DIR tmp_path/logs, nvidia-smi answering -q with fixture
    ``q`` and topo -m with the H200's; its stdout's lines."""
    smi_dir = tmp_path / "smi"
    smi_dir.mkdir(exist_ok=True)
    if q:
        shutil.copy(FIXTURES / q, smi_dir / "q.txt")
    shutil.copy(FIXTURES / "topo-hgx-h200.txt", smi_dir / "topo.txt")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").symlink_to(REPO / "tests" / "fakes" / "nvidia-smi")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(smi_dir))
    (tmp_path / "logs").mkdir(mode=0o750, exist_ok=True)
    argv = ["--log-dir", str(tmp_path / "logs"), "--node", "n7", "--job", "42", "--nvidia-smi-timeout", "10"]
    return [*_main(monkeypatch, [*argv, *args])]


def _main(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert program.main(argv) == 0
    return out.getvalue().splitlines()


def test_a_gb200_gpu_names_its_nvlink_domain_and_clique() -> None:
    [fabric] = rules.parse_fabrics(text("q-gb200-fabric.txt"))
    assert (fabric.state, fabric.status, fabric.clique_id) == ("Completed", "Success", "2")
    assert fabric.domain == GB200_UUID


@pytest.mark.parametrize(
    ("fixture", "gpus"),
    [
        ("q-hgx-h100.txt", 8),  # Completed, Success, CliqueId 0 and an all-zero ClusterUUID
        ("q-hgx-a100.txt", 4),  # all N/A
        ("q-fabric-in-progress.txt", 1),  # registration not done: N/A
        ("q-fabric-insufficient.txt", 1),  # Completed with Insufficient Resources and zeros
    ],
)
def test_gpus_that_share_no_nvlink_beyond_their_node_name_no_domain(fixture: str, gpus: int) -> None:
    fabrics = rules.parse_fabrics(text(fixture))
    assert len(fabrics) == gpus
    assert rules.node_domain(fabrics) is None
    assert all(f.domain is None for f in fabrics)


def test_on_a_gb200_node_the_resources_are_ray_subs_to_the_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = run_program(tmp_path, monkeypatch, "q-gb200-fabric.txt", "--gpus", "4", "--rank", "3")
    assert said[0] == ray_sub_resources(text("q-gb200-fabric.txt"), 4, 3, tmp_path)
    assert json.loads(said[0])[f"nvlink_domain_{GB200_UUID}"] == 1


@pytest.mark.parametrize("fixture", ["q-hgx-h100.txt", "q-hgx-a100.txt", None])
def test_a_node_without_fabric_is_its_own_domain_where_ray_sub_makes_one_of_all(
    fixture: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = json.loads(run_program(tmp_path, monkeypatch, fixture, "--gpus", "8", "--rank", "2")[0])
    theirs = json.loads(ray_sub_resources(text(fixture) if fixture else "", 8, 2, tmp_path))
    assert {k for k in said if k not in theirs} == {"nvlink_domain_n7"}
    # ray.sub: nvlink_domain_00000000-0000-0000-0000-000000000000 or nvlink_domain_N/A, one pretended
    # domain for every such node; without nvidia-smi, none. Everything else is the same.
    pretended = [k for k in theirs if k not in said]
    assert pretended == ([] if fixture is None else [k for k in theirs if k.startswith("nvlink_domain_")])
    assert {k: v for k, v in said.items() if k != "nvlink_domain_n7"} == {
        k: v for k, v in theirs.items() if k not in pretended
    }


def test_the_node_writes_its_record_labels_and_gpu_cpu_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(program, "NUMA_NODES", tmp_path / "sys")
    for numa, cpus in (("0", "0-63,128-191"), ("1", "64-127,192-255")):
        (tmp_path / "sys" / f"node{numa}").mkdir(parents=True)
        (tmp_path / "sys" / f"node{numa}" / "cpulist").write_text(f"{cpus}\n")
    said = run_program(
        tmp_path, monkeypatch, "q-gb200-fabric.txt", "--gpus", "4", "--rank", "5",
        "--address", "block7.n7", "--pattern", "block.node", "--resources", '{"fast_disk": 1}',
    )  # fmt: skip
    [record] = topology_log.read_all(tmp_path / "logs").values()
    assert (record.block, record.switch, record.nvlink_domain, record.nvlink_clique) == (
        "block7",
        None,
        GB200_UUID,
        "2",
    )
    assert record.rank == 70000000007  # ray.sub's rank under topology/block
    assert record.resources["fast_disk"] == 1
    assert json.loads(Path(said[1]).read_text()) == {
        "raysub/block": "block7", "raysub/job": "42", "raysub/node": "n7",
        "raysub/nvlink-clique": "2", "raysub/nvlink-domain": GB200_UUID,
    }  # fmt: skip
    # ray.sub's format, one line per GPU: GPUs 0-3 on NUMA node 0, 4-7 on 1 (the H200's topo -m).
    assert Path(said[2]).read_text().splitlines() == [
        *(f"{gpu}:0-63,128-191" for gpu in range(4)),
        *(f"{gpu}:64-127,192-255" for gpu in range(4, 8)),
    ]


def test_numa_nodes_are_read_from_every_form_of_topo_m() -> None:
    # Newer drivers end with "GPU NUMA ID"; a GB200's NUMA Affinity lists several nodes, the CPU's first.
    assert rules.numa_of_gpus(text("topo-hgx-h200.txt")) == [
        (str(g), "0" if g < 4 else "1") for g in range(8)
    ]
    # The GB200 tray as published ends inside GPU3's row: that row is left out, not guessed.
    assert rules.numa_of_gpus(text("topo-gb200.txt")) == [("0", "0"), ("1", "0"), ("2", "1")]
    # Older drivers end with NUMA Affinity (ray.sub's second-to-last column would be the CPU Affinity there).
    assert rules.numa_of_gpus(text("topo-h100-old.txt")) == [
        (str(g), "0" if g < 4 else "1") for g in range(8)
    ]
    assert rules.numa_of_gpus("") == []


@pytest.mark.parametrize(
    ("address", "pattern", "rank"),
    [
        ("block3.gb200-0042", "block.node", 30002000042),  # ray.sub's own examples
        ("blk08.n09", "block.node", 80000000009),
        ("blockA.nodeX", "block.node", None),
        ("root.s1.node1", "switch.switch.node", None),
        ("", "", None),
    ],
)
def test_a_rank_under_topology_block_is_ray_subs(address: str, pattern: str, rank: int | None) -> None:
    assert rules.block_rank(address, pattern) == rank


@pytest.mark.parametrize(
    ("address", "pattern", "leaf"),
    [
        ("root.s2.node4", "switch.switch.node", ("switch", "s2")),
        ("s1.node1", "switch.node", ("switch", "s1")),
        ("block01.node1", "block.node", ("block", "block01")),
        ("node1", "node", None),
        ("a.b", "switch.switch.node", None),
    ],
)
def test_the_switch_or_block_above_a_node(address: str, pattern: str, leaf: tuple[str, str] | None) -> None:
    assert rules.leaf(address, pattern) == leaf


def test_the_workers_start_in_topology_order_when_it_is_not_slurms(tmp_path: Path) -> None:
    # nodeA (the head) and nodeC under s1, nodeB under s2: Slurm's order nodeB, nodeC is not the switches'.
    topology = tmp_path / "topology.txt"
    topology.write_text(
        "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=nodeA,nodeC\n"
        "SwitchName=s2 Level=0 LinkSpeed=1 Nodes=nodeB\n"
        "SwitchName=root Level=1 LinkSpeed=1 Nodes=nodeA,nodeB,nodeC Switches=s1,s2\n"
    )
    job = run_batch_script(tmp_path, job_spec("rst"), {"FAKE_SCONTROL_TOPOLOGY": str(topology)}, "71")
    assert [entry.node for entry in job.log_dir.node_map()] == ["nodeA", "nodeC", "nodeB"]
    workers = job.steps["worker.sh"]
    assert "--distribution=arbitrary" in workers.argv
    assert Path(workers.env["SLURM_HOSTFILE"]).read_text().split() == ["nodeC", "nodeB"]


@pytest.mark.parametrize(
    "listing",
    [
        "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=nodeA,nodeB\n"
        "SwitchName=s2 Level=0 LinkSpeed=1 Nodes=nodeC\n",
        "BlockName=b1 BlockIndex=0 Nodes=nodeA,nodeB BlockSize=18\n"
        "BlockName=b2 BlockIndex=1 Nodes=nodeC BlockSize=18\n",
        "",  # no topology plugin
    ],
)
def test_workers_already_in_topology_order_start_as_slurm_places_them(tmp_path: Path, listing: str) -> None:
    topology = tmp_path / "topology.txt"
    topology.write_text(listing)
    job = run_batch_script(tmp_path, job_spec("rst"), {"FAKE_SCONTROL_TOPOLOGY": str(topology)}, "72")
    assert [entry.node for entry in job.log_dir.node_map()] == ["nodeA", "nodeB", "nodeC"]
    workers = job.steps["worker.sh"]
    assert "--distribution=arbitrary" not in workers.argv and "SLURM_HOSTFILE" not in workers.env


def test_a_block_listing_as_published_orders_the_workers_too(tmp_path: Path) -> None:
    # A GB200 NVL72 cluster's blocks of 18 nodes (tests/fixtures/topology/scontrol-block.txt); the head on
    # block02, one worker on block01, one on block02: the head's block comes first.
    nodes = ("slurm-compute-node-018", "slurm-compute-node-000", "slurm-compute-node-019")
    env = {
        "FAKE_SCONTROL_TOPOLOGY": str(FIXTURES / "scontrol-block.txt"),
        "SLURM_JOB_NODELIST": "slurm-compute-node-[000,018-019]",
        "SLURMD_NODENAME": nodes[0],
    }
    job = run_batch_script(tmp_path, job_spec("rst"), env, "74")
    assert [entry.node for entry in job.log_dir.node_map()] == [nodes[0], nodes[2], nodes[1]]
    assert Path(job.steps["worker.sh"].env["SLURM_HOSTFILE"]).read_text().split() == [nodes[2], nodes[1]]


def test_no_topology_runs_and_ships_none_of_it() -> None:
    from raysub.job.render import node_library, render
    from raysub.spec import JobSpec

    spec = JobSpec(nodes=2, command=("python", "train.py"), topology=False)
    script = render(spec)
    assert "node_program topology" not in script and "order_by_switch" not in script
    assert "--labels-file" not in script.partition("PAYLOAD")[0]
    assert not [dest for dest, _ in node_library(spec) if "topology" in dest]


@pytest.mark.parametrize(
    ("arg", "said"),
    [
        ("--resources=[1]", "a JSON object of numbers"),
        ('--resources={"a": "x"}', "a JSON object of numbers"),
        ("--resources", "a JSON object of numbers"),  # the JSON as a second argument: not seen
        ("--labels-file=/x.yaml", "raysub gives each node its labels file"),
    ],
)
def test_resources_and_labels_of_ones_own_are_refused_when_raysub_cannot_add_them(
    arg: str, said: str
) -> None:
    from raysub.errors import SpecError
    from raysub.spec import JobSpec

    with pytest.raises(SpecError) as error:
        JobSpec(nodes=2, command=("x",), ray_start_args=(arg,)).check()
    assert error.value.option == "--ray-start-arg" and said in error.value.message
    JobSpec(nodes=2, command=("x",), ray_start_args=(arg,), topology=False).check()  # Ray's own, then


def test_resources_of_ones_own_go_to_the_topology_program_not_past_it() -> None:
    from raysub.job.render import render
    from raysub.spec import JobSpec

    script = render(JobSpec(nodes=2, command=("x",), ray_start_args=('--resources={"fast_disk": 2}',)))
    assert """--resources='{"fast_disk": 2}' --nvidia-smi-timeout""" in script
    assert "'--resources={\"fast_disk\": 2}'" not in script  # not among the args every 'ray start' takes


@pytest.mark.parametrize(
    ("value", "taken"),
    [("s1", True), ("dc6e40c4-d722-4357-9ba6-5291dd461278", True), ("a" * 64, False), ("rack/1", False)],
)
def test_a_label_value_ray_would_refuse_is_left_out(value: str, taken: bool) -> None:
    assert (rules.label_value(value) is not None) == taken


def test_status_says_where_the_nodes_sit(tmp_path: Path) -> None:
    from raysub.status import Status

    where: dict[str, object] = {"switch": "s1", "block": None, "nvlink_domain": GB200_UUID, "rank": 1}
    status = Status("7", 0, str(tmp_path), "RUNNING", "driver running", None, 1, 1)
    status.topology = {"node1": where, "node2": {**where, "rank": 2}, "node3": {**where, "switch": "s2"}}
    assert (
        f"topology: s1, NVLink {GB200_UUID}: node1 node2; s2, NVLink {GB200_UUID}: node3" in status.describe()
    )
    assert json.loads(status.to_json())["topology"]["node3"]["switch"] == "s2"
