"""The smoke test (raysub/job/programs/smoke.py, ``raysub smoke``, ``raysub render --smoke``): its placement
checks as pure functions, smoke.json's writer and reader, the driver script render makes of it, the command
lines' usage errors, and one short run against a real single-machine Ray with two (logical) GPUs."""

import dataclasses
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from raysub import protocol
from raysub.job.lib import ray_nodes
from raysub.job.programs import smoke
from raysub.job.programs.smoke import Options
from raysub.job.render import render
from raysub.protocol import Node, smoke_result
from raysub.protocol.smoke_result import AllReduce, Placement
from raysub.spec import JobSpec
from raysub.validate import extract
from tests.conftest import RunCli

NODE1 = Node("id1", "node1", "10.0.0.1", 2, head=True)
NODE2 = Node("id2", "node2", "10.0.0.2", 2)
# A port nothing listens on (connecting to it is refused at once): "no Ray here".
NO_RAY = "127.0.0.1:1"


def actor(bundle: int, node: Node, *gpus: str) -> Placement:
    return Placement(bundle, node.node_id, node.name, node.name, node.ip, gpus, ",".join(gpus) or None)


def whole() -> list[Placement]:
    return [actor(0, NODE1, "0"), actor(1, NODE1, "1"), actor(2, NODE2, "0"), actor(3, NODE2, "1")]


# ---- the checks ----


def test_one_actor_per_gpu_everywhere_is_no_problem() -> None:
    assert smoke.placement_problems([NODE1, NODE2], whole(), gpus=True) == []


def test_two_actors_on_one_gpu_are_a_duplicate_and_leave_a_slot_empty() -> None:
    actors = [*whole()[:1], actor(1, NODE1, "0"), *whole()[2:]]
    assert smoke.placement_problems([NODE1, NODE2], actors, gpus=True) == [
        "GPU 0 of node1 is shared by bundles 0, 1",
        "node1: 1 of its 2 GPUs got an actor (GPU ids 0)",
    ]


def test_the_same_gpu_id_on_two_nodes_is_no_duplicate() -> None:
    assert smoke.gpu_problems([NODE1, NODE2], [actor(0, NODE1, "0"), actor(1, NODE2, "0")]) == [
        "node1: 1 of its 2 GPUs got an actor (GPU ids 0)",
        "node2: 1 of its 2 GPUs got an actor (GPU ids 0)",
    ]


def test_a_node_without_an_actor_is_missing() -> None:
    assert smoke.placement_problems([NODE1, NODE2], whole()[:2], gpus=True) == [
        "node2 got no actor (it has 2 GPUs)"
    ]


def test_a_missing_slot_names_the_gpus_that_did_get_one() -> None:
    big = Node("id3", "node3", "10.0.0.3", 4)
    actors = [actor(k, big, str(k)) for k in (0, 1, 3)]
    assert smoke.gpu_problems([big], actors) == ["node3: 3 of its 4 GPUs got an actor (GPU ids 0,1,3)"]


def test_an_actor_must_see_exactly_one_gpu() -> None:
    actors = [actor(0, NODE1, "0", "1"), actor(1, NODE2), actor(2, NODE2, "1")]
    assert smoke.gpu_problems([NODE1, NODE2], actors) == [
        "bundle 0 on node1 sees 2 GPUs (0,1), not 1",
        "bundle 1 on node2 sees 0 GPUs (none), not 1",
        "node2: 1 of its 2 GPUs got an actor (GPU ids 1)",
    ]


def test_a_node_without_gpus_needs_no_gpu_actor() -> None:
    head = Node("id0", "head", "10.0.0.9", 0, head=True)
    assert smoke.placement_problems([head, NODE2], whole()[2:], gpus=True) == []


def test_without_gpus_every_node_gets_exactly_one_actor() -> None:
    nodes = [Node("a", "a", "1", 0), Node("b", "b", "2", 0), Node("c", "c", "3", 0)]
    one_each = [actor(k, node) for k, node in enumerate(nodes)]
    assert smoke.placement_problems(nodes, one_each, gpus=False) == []
    packed = [actor(0, nodes[0]), actor(1, nodes[0]), actor(2, nodes[1])]
    assert smoke.placement_problems(nodes, packed, gpus=False) == [
        "a got 2 actors (bundles 0, 1), not 1",
        "c got no actor",
    ]


def test_an_actor_on_a_node_ray_does_not_list_is_a_problem() -> None:
    stranger = Node("id9", "node9", "10.0.0.9", 2)
    problems = smoke.placement_problems([NODE1, NODE2], [*whole(), actor(4, stranger, "0")], gpus=True)
    assert problems == ["bundle 4 runs on node id9, which is not alive in Ray"]


def test_the_node_table_against_the_job() -> None:
    options = Options(nodes=3, gpus_per_node=2)
    assert smoke.node_problems([NODE1, NODE2], options, ["node1", "node2", "node3"]) == [
        "3 nodes expected, 2 alive in Ray; not in Ray: node3"
    ]
    short = Node("id2", "node2", "10.0.0.2", 1)
    assert smoke.node_problems([NODE1, short], Options(gpus_per_node=2)) == [
        "node2 advertises 1 GPUs to Ray, not 2"
    ]
    dedicated = Node("id1", "node1", "10.0.0.1", 0, head=True)
    assert smoke.node_problems([dedicated, NODE2], Options(nodes=2, gpus_per_node=2, head_gpus=0)) == []
    assert smoke.node_problems([NODE1, NODE2], Options()) == []


def test_the_placement_request_one_bundle_per_gpu_packed_or_one_per_node_strictly_spread() -> None:
    assert smoke.placement_request([NODE1, NODE2], Options()) == smoke.PlacementRequest(
        True, "PACK", 4, {"GPU": 1, "CPU": 1}
    )
    # The job's own numbers, not what Ray has: a node that never joined still needs its bundles.
    assert smoke.placement_request([NODE1], Options(nodes=4, gpus_per_node=8, head_gpus=0)).count == 24
    assert smoke.placement_request([NODE1, NODE2], Options(gpus_per_node=0)) == smoke.PlacementRequest(
        False, "STRICT_SPREAD", 2, {"CPU": 1}
    )
    assert smoke.placement_request([NODE1, NODE2], Options(strategy="SPREAD")).strategy == "SPREAD"
    # A lone dedicated head has no GPU to place: one bundle per node instead.
    assert not smoke.placement_request([NODE1], Options(nodes=1, gpus_per_node=8, head_gpus=0)).gpus


def test_strict_spread_of_more_bundles_than_nodes_is_refused_before_asking_ray() -> None:
    request = smoke.placement_request([NODE1, NODE2], Options(strategy="STRICT_SPREAD"))
    (problem,) = smoke.strategy_problems(request, [NODE1, NODE2])
    assert problem.startswith("STRICT_SPREAD puts each bundle on a node of its own: 4 bundles need 4 nodes")
    assert (
        smoke.strategy_problems(
            smoke.placement_request([NODE1, NODE2], Options(gpus_per_node=0)), [NODE1, NODE2]
        )
        == []
    )


def test_alive_nodes_from_ray_nodes() -> None:
    def entry(node_id: str, name: str, alive: bool, **resources: float) -> dict[str, object]:
        return {"NodeID": node_id, "Alive": alive, "NodeName": name, "NodeManagerAddress": f"ip-{name}",
                "Resources": {"CPU": 8.0, **resources}}  # fmt: skip

    table = [
        entry("w", "worker", True, GPU=8.0),
        entry("d", "dead", False, GPU=8.0),
        entry("h", "head", True, **{ray_nodes.HEAD_RESOURCE: 1.0}),
    ]
    assert ray_nodes.alive_nodes(table) == [
        Node("h", "head", "ip-head", 0, True),
        Node("w", "worker", "ip-worker", 8),
    ]


def test_the_all_reduce_result() -> None:
    result = smoke.allreduce_result(
        [{"value": 4, "seconds": 0.5}, {"value": 4, "seconds": 1.0}] * 2, "gloo", 10**9
    )
    assert (result.status, result.world_size, result.seconds, result.algbw_gbps) == ("ok", 4, 1.0, 1.0)
    assert result.busbw_gbps == pytest.approx(1.5)  # 2 (n - 1) / n of the algorithm bandwidth
    wrong = smoke.allreduce_result([{"value": 2, "seconds": 1.0}, {"value": 3, "seconds": 1.0}], "gloo", 8)
    assert (wrong.status, wrong.reason) == ("failed", "the all-reduce summed wrong on ranks 1 (expected 2)")


def test_without_torch_the_all_reduce_is_skipped_unless_required() -> None:
    torches: dict[int, dict[str, object]] = {0: {"version": "2.5", "cuda": False}, 1: {"version": None}}
    placements = whole()[:2]
    skipped = smoke.without_torch(torches, placements, "optional")
    assert skipped == AllReduce("skipped", "torch is not installed with Ray's Python on node1")
    required = smoke.without_torch(torches, placements, "required")
    assert required is not None and required.failed
    assert smoke.without_torch({0: torches[0]}, placements, "required") is None
    assert smoke.allreduce_backend([{"cuda": True}, {"cuda": True}], gpus=True) == "nccl"
    assert smoke.allreduce_backend([{"cuda": True}, {"cuda": False}], gpus=True) == "gloo"
    assert smoke.allreduce_backend([{"cuda": True}], gpus=False) == "gloo"


# ---- smoke.json ----


def a_result() -> smoke_result.SmokeResult:
    request = smoke.placement_request([NODE1, NODE2], Options())
    allreduce = smoke.allreduce_result([{"value": 4, "seconds": 0.25}] * 4, "nccl", 2**26)
    result = smoke.make_result(request, [NODE1, NODE2], whole()[::-1], [], allreduce)
    return dataclasses.replace(result, topology={"node1": {"raysub/switch": "s1"}})


def test_each_switch_block_and_domain_the_labels_name_is_checked_with_its_nodes() -> None:
    every = {smoke.EVERY_NODE: 1.0}
    table = [
        {
            "NodeID": "a",
            "Alive": True,
            "Resources": every,
            "Labels": {"raysub/switch": "s1", "ray.io/x": "1"},
        },
        {
            "NodeID": "b",
            "Alive": True,
            "Resources": every,
            "Labels": {"raysub/switch": "s1", "raysub/block": "b"},
        },
        {"NodeID": "c", "Alive": False, "Resources": every, "Labels": {"raysub/switch": "s2"}},  # gone
        {"NodeID": "d", "Alive": True, "Resources": {}, "Labels": {"raysub/switch": "s3"}},  # not raysub's
        {"NodeID": "e", "Alive": True, "Resources": every},  # Ray without labels
    ]
    assert smoke.topology_groups(table) == {("raysub/switch", "s1"): ["a", "b"], ("raysub/block", "b"): ["b"]}


def test_smoke_json_round_trips(tmp_path: Path) -> None:
    report = a_result()
    path = tmp_path / protocol.SMOKE
    smoke_result.write_result(path, report)
    assert smoke_result.read_result(path) == report
    assert [a.bundle for a in report.actors] == [0, 1, 2, 3]  # in bundle order, however they answered
    record = json.loads(path.read_text())
    assert set(record) == {"ok", "strategy", "bundles", "bundle_resources", "nodes", "actors", "problems",
                           "allreduce", "t", "topology"}  # fmt: skip
    assert record["actors"][0] == {
        "bundle": 0, "node_id": "id1", "node": "node1", "hostname": "node1", "ip": "10.0.0.1",
        "gpu_ids": ["0"], "cuda_visible_devices": "0",
    }  # fmt: skip
    assert record["allreduce"]["backend"] == "nccl"
    assert [p.name for p in tmp_path.iterdir()] == [protocol.SMOKE]  # written atomically, nothing left


def test_a_missing_or_malformed_smoke_json_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / protocol.SMOKE
    assert smoke_result.read_result(path) is None
    for text in (
        "",
        "{",
        "[]",
        '{"ok": true}',
        json.dumps({**json.loads(smoke_result.result_json(a_result())), "nodes": 3}),
    ):
        path.write_text(text)
        assert smoke_result.read_result(path) is None, text


def test_smoke_json_goes_into_the_jobs_log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(protocol.ENV_LOG_DIR, raising=False)
    assert smoke_result.result_path(None) is None
    assert smoke_result.result_path(tmp_path) == tmp_path / "smoke.json"
    monkeypatch.setenv(protocol.ENV_LOG_DIR, str(tmp_path))
    assert smoke_result.result_path(None) == tmp_path / "smoke.json"


def test_the_reason_is_one_line() -> None:
    report = smoke.make_result(None, [], [], ["first\nproblem", "second"])
    assert (report.ok, report.reason) == (False, "first problem (and 1 more problems)")
    assert a_result().ok and a_result().reason == ""
    failed = smoke.make_result(None, [], [], [], AllReduce("failed", "NCCL timed out"))
    assert (failed.ok, failed.reason) == (False, "NCCL timed out")


def test_the_table() -> None:
    lines = smoke.table(a_result()).splitlines()
    assert lines[0].split() == ["bundle", "node", "IP", "GPU", "ids", "CUDA_VISIBLE_DEVICES"]
    assert lines[1].split() == ["0", "node1", "10.0.0.1", "0", "0"]
    assert lines[5].startswith("all-reduce: nccl, 4 ranks, 64 MiB in 250.0 ms: bus bandwidth 0.40 GB/s")
    assert lines[6] == "topology: node1: switch s1"
    assert lines[7] == "ok: 4 of 4 bundles (one per GPU, PACK) placed on 2 of 2 nodes"


# ---- render --smoke: the driver ----


def driver_script(spec: JobSpec) -> str:
    return next(e.text for e in extract(render(spec)) if e.name == protocol.DRIVER_SCRIPT)


def shell_function(script: str, name: str) -> str:
    start = script.index(f"\n{name}() {{\n")
    return script[start : script.index("\n}\n", start) + 3]


def test_render_smoke_makes_the_smoke_test_the_driver() -> None:
    spec = JobSpec(nodes=4, gpus_per_node=8, smoke=True)
    script = driver_script(spec)
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "\nLOG_DIR=${_RAYSUB_LOG_DIR:?is not set; run this script through the batch script}\n" in script
    assert script.endswith("\nnode_program smoke --nodes=4 --gpus-per-node=8 --allreduce\n")
    assert "exec " not in script
    # One definition of how a node program runs, in the shared bash the driver sources, as the head does.
    assert f'source "${{LOG_DIR}}/{protocol.SHARED_BASH}"' in script
    shared = next(e.text for e in extract(render(spec)) if e.name == protocol.SHARED_BASH)
    for function in ("ray_python", "node_program"):
        assert shell_function(shared, function)
        assert f"\n{function}() {{" not in script
    assert not spec.interactive
    assert protocol.ATTACH_SCRIPT not in [e.name for e in extract(render(spec))]


def test_render_smoke_with_a_dedicated_head_or_no_gpus() -> None:
    dedicated = driver_script(JobSpec(nodes=3, gpus_per_node=4, dedicated_head=True, smoke=True))
    assert dedicated.endswith("\nnode_program smoke --nodes=3 --gpus-per-node=4 --head-gpus=0 --allreduce\n")
    cpu = driver_script(JobSpec(nodes=2, gpus_per_node=0, smoke=True))
    assert cpu.endswith("\nnode_program smoke --nodes=2 --gpus-per-node=0 --allreduce\n")


def test_a_users_driver_is_unchanged() -> None:
    script = driver_script(JobSpec(nodes=2, command=("python", "train.py", "--name", "it's")))
    assert script.splitlines()[-1] == "exec python train.py --name 'it'\"'\"'s'"
    assert "node_program" not in script


def test_the_smoke_driver_runs_logdirs_copy_with_rays_python(tmp_path: Path) -> None:
    """driver_command.sh run as the head runs it: the interpreter of the 'ray' command (its shebang),
    LOG_DIR's copy of raysub first on PYTHONPATH, the job's arguments. A stand-in smoke module says what it
    got. (From the job's directory: ``python -m`` puts the working directory before PYTHONPATH.)"""
    log_dir = tmp_path / "logs"
    package = log_dir / protocol.NODE_PYTHON_DIR / "raysub"
    programs = package / "job" / "programs"
    programs.mkdir(parents=True)
    for directory in (package, package / "job", programs):
        (directory / "__init__.py").write_text("")
    said = "{'argv': sys.argv[1:], 'file': __file__, 'python': sys.executable}"
    (programs / "smoke.py").write_text(f"import json, sys\nprint(json.dumps({said}))\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f"#!{sys.executable}\n")
    (bin_dir / "ray").chmod(0o755)
    spec = JobSpec(nodes=2, gpus_per_node=4, smoke=True)
    driver = tmp_path / protocol.DRIVER_SCRIPT
    driver.write_text(driver_script(spec))
    # The shared bash the driver sources, where the batch script writes it.
    shared = next(e.text for e in extract(render(spec)) if e.name == protocol.SHARED_BASH)
    (log_dir / protocol.SHARED_BASH).write_text(shared)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", protocol.ENV_LOG_DIR: str(log_dir), "PYTHONPATH": "/elsewhere"}
    done = subprocess.run(
        ["bash", str(driver)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said == {
        "argv": ["--nodes=2", "--gpus-per-node=4", "--allreduce"],
        "file": str(programs / "smoke.py"),
        "python": sys.executable,
    }
    env.pop(protocol.ENV_LOG_DIR)
    done = subprocess.run(
        ["bash", str(driver)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert f"{protocol.ENV_LOG_DIR}: is not set; run this script through the batch script" in done.stderr


def test_the_rendered_smoke_job_passes_strict_validation(raysub_cli: RunCli, tmp_path: Path) -> None:
    from tests.support.prereq import tool

    tool("shellcheck")
    job = tmp_path / "job.sub"
    result = raysub_cli(
        "render", "-N", "3", "--gpus-per-node", "4", "--dedicated-head", "--smoke", "-o", str(job)
    )
    assert (result.code, result.stderr) == (0, "")
    result = raysub_cli("validate", "--strict", str(job))
    assert result.code == 0, result.stderr


# ---- the command lines ----


def test_smoke_and_a_command_together_are_a_usage_error(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "-N", "2", "--smoke", "--", "python", "train.py")
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("raysub: error: ") and "'--smoke'" in result.stderr


USAGE_ERRORS = [
    ["--strategy", "STRICT_PACK"],
    ["--nodes", "0"],
    ["--gpus-per-node", "-1"],
    ["--allreduce=sometimes"],
    ["--timeout", "0"],
    ["extra"],
]


@pytest.mark.parametrize("args", USAGE_ERRORS)
def test_raysub_smoke_is_the_node_program_by_name(raysub_cli: RunCli, args: list[str]) -> None:
    result = raysub_cli("smoke", *args)
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.startswith("usage: raysub smoke ")
    assert result.stderr.splitlines()[-1].startswith("raysub smoke: error: ")


@pytest.mark.parametrize("args", USAGE_ERRORS)
def test_the_node_programs_usage_errors(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(protocol.ENV_SMOKE_PROG, raising=False)
    with pytest.raises(SystemExit) as exit_:
        smoke.main(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("usage: python -m raysub.job.programs.smoke ")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--nodes", "x"], "argument --nodes: must be a whole number, not 'x'"),
        (["--nodes", "0"], "argument --nodes: must be at least 1, not 0"),
        (["--timeout", "abc"], "argument --timeout: must be a number, not 'abc'"),
    ],
)
def test_a_bad_value_is_named_in_words(raysub_cli: RunCli, args: list[str], said: str) -> None:
    result = raysub_cli("smoke", *args)
    assert result.code == 2
    assert result.stderr.splitlines()[-1] == f"raysub smoke: error: {said}"


def test_raysub_smoke_help_is_the_programs_with_an_example(raysub_cli: RunCli) -> None:
    result = raysub_cli("smoke", "--help")
    assert (result.code, result.stderr) == (0, "")
    assert result.stdout.startswith("usage: raysub smoke [-h] [--nodes N]")
    assert "\nExample:\n  raysub attach 4711 -- raysub smoke " in result.stdout
    assert max(map(len, result.stdout.splitlines())) <= 100


def test_allreduce_is_a_flag_with_an_optional_value() -> None:
    assert smoke.parse([])[0].allreduce is None
    assert smoke.parse(["--allreduce"])[0].allreduce == "optional"
    assert smoke.parse(["--allreduce=required"])[0].allreduce == "required"
    assert smoke.parse(["--strategy", "spread"])[0].strategy == "SPREAD"
    options = smoke.parse(["--nodes", "2", "--gpus-per-node", "2", "--head-gpus", "0", "--timeout", "9"])[0]
    assert options == Options(nodes=2, gpus_per_node=2, head_gpus=0, timeout=9)


def test_the_result_goes_to_output_else_into_the_log_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(protocol.ENV_LOG_DIR, raising=False)
    assert smoke.parse([])[1] is None
    assert smoke.parse(["--log-dir", str(tmp_path)])[1] == tmp_path / protocol.SMOKE
    assert smoke.parse(["-o", "out.json", "--log-dir", str(tmp_path)])[1] == Path("out.json")
    monkeypatch.setenv(protocol.ENV_LOG_DIR, str(tmp_path))
    assert smoke.parse([])[1] == tmp_path / protocol.SMOKE


def test_without_ray_smoke_fails_with_one_line_and_writes_why(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", NO_RAY)
    monkeypatch.delenv(protocol.ENV_LOG_DIR, raising=False)
    out = tmp_path / "out.json"
    result = raysub_cli("smoke", "--allreduce", "--strategy", "spread", "--timeout", "5", "-o", str(out))
    assert result.code == 1
    assert result.stderr.startswith(f"raysub smoke: cannot connect to Ray at {NO_RAY}")
    assert result.stderr.count("\n") == 1
    assert result.stdout.splitlines()[-1] == "FAILED"
    written = smoke_result.read_result(out)
    assert written is not None and not written.ok
    # The node program in this process: the same, into the job's LOG_DIR.
    monkeypatch.setenv(protocol.ENV_LOG_DIR, str(tmp_path))
    assert smoke.main(["--timeout", "5"]) == smoke.FAILED
    assert (tmp_path / protocol.SMOKE).exists()


def test_outside_a_job_smoke_refuses_to_guess_a_ray(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No RAY_ADDRESS: not "auto", which on a shared node may find a neighbour's Ray."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(protocol.ENV_LOG_DIR, raising=False)
    result = raysub_cli("smoke", "--timeout", "5")
    assert result.code == 1
    said = f"raysub smoke: RAY_ADDRESS is not set, so this is no job's step: {smoke.IN_A_JOB}\n"
    assert result.stderr == said


def test_without_ray_in_its_python_smoke_names_that_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    result = smoke.smoke(Options(timeout=5))
    assert not result.ok
    assert result.reason.startswith(f"no Ray in {sys.executable} (")
    assert result.reason.endswith("or pip install 'raysub[ray]'")


# ---- against a real Ray: one machine, two logical GPUs ----


def test_a_real_ray_gets_one_actor_per_gpu_and_no_placement_group_left(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ray started in this process (ephemeral ports, no dashboard); the all-reduce runs with torch's gloo
    (torch is in the test extra)."""
    ray = pytest.importorskip("ray")
    # Ray writes a token to ~/.ray/auth_token when it makes one, and any Ray started later by this user
    # then wants it: keep this Ray's home here, and its authentication off.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    for name in ("RAY_ADDRESS", protocol.ENV_NODE_LIST):  # restored afterwards, whatever Ray sets
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, logging_level=logging.WARNING)
    try:
        report = smoke.smoke(Options(allreduce="required", allreduce_mib=1, timeout=60))
        impossible = smoke.smoke(Options(strategy="STRICT_SPREAD", timeout=60))
        groups = ray.util.placement_group_table()
    finally:
        ray.shutdown()
    assert report.ok, report.problems
    assert (report.strategy, report.bundles, report.bundle_resources) == ("PACK", 2, {"GPU": 1, "CPU": 1})
    assert len(report.nodes) == 1 and report.nodes[0].head
    assert {a.node_id for a in report.actors} == {report.nodes[0].node_id}
    assert sorted(a.gpu_ids for a in report.actors) == [("0",), ("1",)]
    assert all(a.cuda_visible_devices == a.gpu_ids[0] for a in report.actors)
    assert (report.allreduce.status, report.allreduce.backend, report.allreduce.world_size) == (
        "ok",
        "gloo",
        2,
    )
    assert report.allreduce.bytes == 2**20 and report.allreduce.busbw_gbps is not None
    assert not impossible.ok and impossible.problems[0].startswith("STRICT_SPREAD puts each bundle")
    # Removed explicitly, not left to garbage collection: none is still holding its GPUs.
    assert groups and all(group["state"] != "CREATED" for group in groups.values())
