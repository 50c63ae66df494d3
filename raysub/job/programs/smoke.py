"""raysub's smoke test: proves a job's placement before the real run.

Connects to the job's Ray at RAY_ADDRESS (set in every step of a raysub job), reserves one placement-group
bundle per GPU ({"GPU": 1, "CPU": 1}), or one per node ({"CPU": 1}) when the job has no GPUs, starts one
actor in each bundle and checks what they report: every node of the cluster and every GPU slot got
exactly one actor, and no two actors share a GPU of a node. With --allreduce the actors then run a
torch.distributed all-reduce (NCCL where every actor sees a CUDA GPU, gloo otherwise) and its bandwidth
is measured; without torch that part is skipped, unless --allreduce=required. The placement group is
removed and the actors killed before the end, whatever happened; every wait is bounded by --timeout. Then,
for each switch, block and NVLink domain the nodes' topology labels name (--topology, docs/topology.md), a
placement group that selects it by label must land on exactly its nodes.

The driver of a job rendered with ``raysub render --smoke`` (``python -m raysub.job.programs.smoke``, run as
the other node programs are), and ``raysub smoke`` in a shell of a running job, which runs this program as it
is: its command line below is the only one. Prints a table, writes LOG_DIR/smoke.json (its format:
raysub/protocol/smoke_result.py), and exits 0 when every check passed, 1 with a one-line reason on stderr
when one did not (or Ray could not be reached), and 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from raysub import protocol
from raysub.job.lib.ray_nodes import alive_nodes, gcs_answers
from raysub.protocol import Node, one_line
from raysub.protocol.smoke_result import (
    AllReduce,
    Placement,
    SmokeResult,
    result_path,
    write_result,
)

FAILED = 1
STRATEGIES = ("PACK", "SPREAD", "STRICT_SPREAD")
# GPU bundles: PACK, as the real run's workers are usually placed (Ray Train's default); with as many
# bundles as GPUs every GPU gets one either way. Per-node bundles: STRICT_SPREAD, the only strategy that
# makes "one bundle on each node" a guarantee rather than a preference.
GPU_STRATEGY = "PACK"
NODE_STRATEGY = "STRICT_SPREAD"
ALLREDUCE_MODES = ("optional", "required")
BUNDLE_CPUS = 1  # what a training worker takes by default (Ray Train's {"CPU": 1, "GPU": 1})
TIMEOUT_S = 120.0
ALLREDUCE_MIB = 64.0
ALLREDUCE_ITERATIONS = 5


@dataclass(frozen=True)
class Options:
    """What the smoke test expects of the cluster (None: whatever Ray has) and how it tests it."""

    nodes: int | None = None
    gpus_per_node: int | None = None
    head_gpus: int | None = None  # None: --gpus-per-node (a --dedicated-head job has 0)
    strategy: str | None = None  # None: GPU_STRATEGY or NODE_STRATEGY, for the kind of bundle
    allreduce: str | None = None  # None: no all-reduce; else one of ALLREDUCE_MODES
    allreduce_mib: float = ALLREDUCE_MIB
    timeout: float = TIMEOUT_S


@dataclass(frozen=True)
class PlacementRequest:
    """The placement group to ask Ray for: ``count`` bundles of ``resources``, placed by ``strategy``."""

    gpus: bool  # one bundle per GPU; otherwise one per node
    strategy: str
    count: int
    resources: dict[str, float]


def make_result(
    request: PlacementRequest | None,
    nodes: list[Node],
    actors: list[Placement],
    problems: list[str],
    allreduce: AllReduce | None = None,
) -> SmokeResult:
    allreduce = allreduce or AllReduce()
    return SmokeResult(
        ok=not problems and not allreduce.failed,
        strategy=request.strategy if request else None,
        bundles=request.count if request else 0,
        bundle_resources=dict(request.resources) if request else {},
        nodes=nodes,
        actors=sorted(actors, key=lambda p: p.bundle),
        problems=problems,
        allreduce=allreduce,
    )


# ---- what to place, and the checks: pure functions of what Ray says ----


def expected_gpus(node: Node, options: Options) -> int | None:
    """The GPUs ``node`` should advertise (None: not said)."""
    if options.gpus_per_node is None:
        return None
    if node.head and options.head_gpus is not None:
        return options.head_gpus
    return options.gpus_per_node


def gpu_slots(nodes: list[Node], options: Options) -> int:
    """How many GPUs the job should have: --gpus-per-node on each of --nodes (the head's own count with
    --head-gpus), or else what Ray's nodes advertise."""
    if options.gpus_per_node is None:
        return sum(node.gpus for node in nodes)
    count = options.nodes if options.nodes is not None else len(nodes)
    head = options.gpus_per_node if options.head_gpus is None else options.head_gpus
    return head + max(count - 1, 0) * options.gpus_per_node


def placement_request(nodes: list[Node], options: Options) -> PlacementRequest:
    """One bundle per GPU slot, or per node when the job has no GPUs."""
    slots = gpu_slots(nodes, options)
    if slots > 0:
        return PlacementRequest(True, options.strategy or GPU_STRATEGY, slots, {"GPU": 1, "CPU": BUNDLE_CPUS})
    count = options.nodes if options.nodes is not None else len(nodes)
    return PlacementRequest(False, options.strategy or NODE_STRATEGY, count, {"CPU": BUNDLE_CPUS})


def node_problems(nodes: list[Node], options: Options, job_nodes: Sequence[str] = ()) -> list[str]:
    """Ray's nodes against what the job expects: how many, which (``job_nodes``: the job's node names,
    when known), and the GPUs each advertises."""
    problems = []
    if options.nodes is not None and len(nodes) != options.nodes:
        missing = sorted(set(job_nodes) - {node.name for node in nodes})
        which = f"; not in Ray: {' '.join(missing)}" if missing else ""
        problems.append(f"{options.nodes} nodes expected, {len(nodes)} alive in Ray{which}")
    for node in nodes:
        want = expected_gpus(node, options)
        if want is not None and node.gpus != want:
            problems.append(f"{node.name} advertises {node.gpus} GPUs to Ray, not {want}")
    return problems


def strategy_problems(request: PlacementRequest, nodes: list[Node]) -> list[str]:
    """A placement that cannot exist on this cluster, said before asking Ray for it."""
    if request.strategy == "STRICT_SPREAD" and request.count > len(nodes):
        return [
            f"STRICT_SPREAD puts each bundle on a node of its own: {request.count} bundles need "
            f"{request.count} nodes and Ray has {len(nodes)} (use PACK or SPREAD for one bundle per GPU)"
        ]
    return []


def placement_problems(nodes: list[Node], actors: list[Placement], gpus: bool) -> list[str]:
    """Where the actors landed against the cluster: every GPU slot (or every node) exactly once."""
    known = {node.node_id for node in nodes}
    problems = [
        f"bundle {a.bundle} runs on node {a.node_id}, which is not alive in Ray"
        for a in actors
        if a.node_id not in known
    ]
    return problems + (gpu_problems(nodes, actors) if gpus else per_node_problems(nodes, actors))


def gpu_problems(nodes: list[Node], actors: list[Placement]) -> list[str]:
    """Each actor sees one GPU, no GPU of a node is seen by two actors, and every GPU has an actor."""
    problems = []
    holders: dict[tuple[str, str], list[int]] = {}
    for actor in actors:
        if len(actor.gpu_ids) != 1:
            ids = ",".join(actor.gpu_ids) or "none"
            problems.append(
                f"bundle {actor.bundle} on {actor.node} sees {len(actor.gpu_ids)} GPUs ({ids}), not 1"
            )
        for gpu in actor.gpu_ids:
            holders.setdefault((actor.node_id, gpu), []).append(actor.bundle)
    names = {node.node_id: node.name for node in nodes}
    for (node_id, gpu), bundles in sorted(holders.items()):
        if len(bundles) > 1:
            shared = ", ".join(map(str, sorted(bundles)))
            problems.append(f"GPU {gpu} of {names.get(node_id, node_id)} is shared by bundles {shared}")
    for node in nodes:
        held = sorted(gpu for node_id, gpu in holders if node_id == node.node_id)
        if node.gpus and not held:
            problems.append(f"{node.name} got no actor (it has {node.gpus} GPUs)")
        elif len(held) < node.gpus:
            problems.append(
                f"{node.name}: {len(held)} of its {node.gpus} GPUs got an actor (GPU ids {','.join(held)})"
            )
    return problems


def per_node_problems(nodes: list[Node], actors: list[Placement]) -> list[str]:
    """Without GPUs: exactly one actor on every node."""
    problems = []
    for node in nodes:
        bundles = sorted(a.bundle for a in actors if a.node_id == node.node_id)
        if not bundles:
            problems.append(f"{node.name} got no actor")
        elif len(bundles) > 1:
            problems.append(
                f"{node.name} got {len(bundles)} actors (bundles {', '.join(map(str, bundles))}), not 1"
            )
    return problems


def allreduce_backend(torches: Sequence[Mapping[str, Any]], gpus: bool) -> str:
    """NCCL when every actor has a GPU and a CUDA torch, gloo otherwise."""
    return "nccl" if gpus and all(t.get("cuda") for t in torches) else "gloo"


def without_torch(
    torches: Mapping[int, Mapping[str, Any]], placements: Sequence[Placement], mode: str
) -> AllReduce | None:
    """The all-reduce's outcome when some actor's Python has no torch (``torches``: each bundle's answer):
    skipped, or failed with --allreduce=required. None when every one has torch."""
    node_of = {p.bundle: p.node for p in placements}
    lacking = sorted({node_of.get(k, f"bundle {k}") for k, t in torches.items() if t.get("version") is None})
    if not lacking:
        return None
    reason = f"torch is not installed with Ray's Python on {', '.join(lacking)}"
    if mode == "required":
        return AllReduce("failed", reason + " (--allreduce=required)")
    return AllReduce("skipped", reason)


def allreduce_result(timings: Sequence[Mapping[str, Any]], backend: str, nbytes: int) -> AllReduce:
    """The all-reduce from every rank's answer: correct sums, and the slowest rank's time."""
    world = len(timings)
    wrong = [str(rank) for rank, t in enumerate(timings) if t["value"] != world]
    if wrong:
        reason = f"the all-reduce summed wrong on ranks {','.join(wrong)} (expected {world})"
        return AllReduce("failed", reason, backend, world, nbytes)
    seconds = max(float(t["seconds"]) for t in timings)
    algbw = nbytes / seconds / 1e9 if seconds > 0 else None
    busbw = algbw * 2 * (world - 1) / world if algbw is not None else None
    return AllReduce("ok", "", backend, world, nbytes, seconds, algbw, busbw)


# ---- the actor in each bundle (its code travels to the nodes by value: a node needs Ray, not raysub) ----


class Probe:
    """Reports where it runs; takes part in the all-reduce. Uses only the standard library, ray and torch."""

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "hostname": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    def torch(self) -> dict[str, Any]:
        """torch's version (None without torch) and whether it sees a CUDA GPU."""
        try:
            import torch
        except ImportError:
            return {"version": None, "cuda": False}
        return {"version": str(torch.__version__), "cuda": bool(torch.cuda.is_available())}

    def rendezvous(self) -> str:
        """``host:port`` on this node, free a moment ago, for rank 0 of the all-reduce to listen on."""
        import ray

        ip = ray.util.get_node_ip_address()
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((ip, 0))
            port = probe.getsockname()[1]
        return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"

    def allreduce(
        self, rank: int, world: int, address: str, backend: str, nbytes: int, timeout: float
    ) -> dict[str, Any]:
        return timed_allreduce(rank, world, address, backend, nbytes, timeout)


def timed_allreduce(
    rank: int, world: int, address: str, backend: str, nbytes: int, timeout: float
) -> dict[str, Any]:
    """One rank: a first all-reduce of ones (which makes the connections; every element must come back
    as ``world``), then ALLREDUCE_ITERATIONS timed ones. Returns the sum seen and seconds per all-reduce."""
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        backend,
        init_method=f"tcp://{address}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout),
    )
    try:
        device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        tensor = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor)
        low, high = tensor.min().item(), tensor.max().item()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        for _ in range(ALLREDUCE_ITERATIONS):
            dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = (time.perf_counter() - started) / ALLREDUCE_ITERATIONS
    finally:
        dist.destroy_process_group()
    return {"value": low if low != world else high, "seconds": seconds}


# ---- the run: needs Ray ----


def gather(refs: Sequence[Any], timeout: float, what: str) -> tuple[dict[int, Any], list[str]]:
    """Every answer that came within ``timeout`` s, by index; a problem for each that failed, and one for
    those that did not answer. All are awaited together (ray.wait), so the wait is ``timeout`` at most."""
    import ray

    if not refs:
        return {}, []
    index = {ref: k for k, ref in enumerate(refs)}
    ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    answers, problems = {}, []
    for ref in ready:
        try:
            answers[index[ref]] = ray.get(ref, timeout=timeout)
        except Exception as error:
            problems.append(f"bundle {index[ref]}: {what} failed: {one_line(error)}")
    if pending:
        late = ",".join(str(k) for k in sorted(index[ref] for ref in pending))
        problems.append(f"bundles {late}: no answer within {timeout:g} s ({what})")
    return answers, problems


class Session:
    """The placement group and its actors, removed and killed by close() whatever happened."""

    def __init__(self, request: PlacementRequest, timeout: float) -> None:
        self.request = request
        self.timeout = timeout
        self.group: Any = None
        self.actors: list[Any] = []

    def place(self, nodes: list[Node]) -> tuple[list[Placement], list[str]]:
        """The placement group, one actor per bundle, and where each actor says it runs."""
        import ray
        from ray import cloudpickle
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if __name__ != "__main__":  # run as a program, the classes are in __main__: pickled by value already
            cloudpickle.register_pickle_by_value(sys.modules[__name__])
        request = self.request
        bundles = [dict(request.resources) for _ in range(request.count)]
        self.group = placement_group(bundles, strategy=request.strategy, name=f"raysub-smoke-{os.getpid()}")
        if not self.group.wait(self.timeout):
            return [], [self.unplaced(ray.cluster_resources())]
        actor = ray.remote(Probe)
        for k in range(request.count):
            where = PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=k
            )
            options = {"num_cpus": BUNDLE_CPUS, "num_gpus": 1 if request.gpus else 0, "max_restarts": 0}
            self.actors.append(actor.options(scheduling_strategy=where, **options).remote())
        answers, problems = gather([a.where.remote() for a in self.actors], self.timeout, "where it runs")
        names = {node.node_id: node.name for node in nodes}
        placements = [placement(k, answer, names) for k, answer in answers.items()]
        return placements, problems

    def unplaced(self, cluster: Mapping[str, float]) -> str:
        shape = json.dumps(self.request.resources)
        has = ", ".join(f"{cluster.get(key, 0):g} {key}" for key in self.request.resources)
        return (
            f"Ray could not place {self.request.count} bundles of {shape} ({self.request.strategy}) within "
            f"{self.timeout:g} s; the cluster has {has}"
        )

    def allreduce(self, mode: str, nbytes: int, placements: Sequence[Placement]) -> AllReduce:
        """The actors' all-reduce: skipped (or failed, when required) unless every actor has torch."""
        torches, problems = gather([a.torch.remote() for a in self.actors], self.timeout, "torch's version")
        if problems:
            return AllReduce("failed", problems[0])
        lacking = without_torch(torches, placements, mode)
        if lacking is not None:
            return lacking
        backend = allreduce_backend(list(torches.values()), self.request.gpus)
        address, problems = gather([self.actors[0].rendezvous.remote()], self.timeout, "a free port")
        if problems:
            return AllReduce("failed", problems[0], backend, len(self.actors), nbytes)
        world = len(self.actors)
        calls = [
            a.allreduce.remote(k, world, address[0], backend, nbytes, self.timeout)
            for k, a in enumerate(self.actors)
        ]
        timings, problems = gather(calls, self.timeout, "the all-reduce")
        if problems:
            return AllReduce("failed", problems[0], backend, world, nbytes)
        return allreduce_result([timings[k] for k in range(world)], backend, nbytes)

    def close(self) -> None:
        """Kill the actors and remove the placement group (explicitly: never left to garbage collection)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as error:  # already dead: nothing to kill
                print(f"raysub smoke: could not kill an actor: {one_line(error)}", file=sys.stderr)
        self.actors = []
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None


# The labels a node's topology program gives Ray (raysub/job/lib/topology.py), each checked by a placement
# group that selects one of its values; and what every such node has a sliver of, so that the check needs
# no CPU of the nodes.
TOPOLOGY_LABELS = ("raysub/switch", "raysub/block", "raysub/nvlink-domain")
EVERY_NODE = "slurm_managed_ray_cluster"


def topology_groups(table: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(label, value) -> the alive nodes (by id) that carry it, from ``ray.nodes()``."""
    groups: dict[tuple[str, str], list[str]] = {}
    for entry in table:
        for key in TOPOLOGY_LABELS:
            value = (entry.get("Labels") or {}).get(key) if entry.get("Alive") else None
            if value and EVERY_NODE in entry.get("Resources", {}):
                groups.setdefault((key, value), []).append(entry["NodeID"])
    return groups


def topology_problems(timeout: float) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Each node's topology labels (by name), and for each switch, block and NVLink domain whether a
    placement group that selects it by label gets exactly its nodes, one bundle on each."""
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    table = ray.nodes()
    names = {entry["NodeID"]: entry.get("NodeName") or entry["NodeManagerAddress"] for entry in table}
    where = {
        names[entry["NodeID"]]: {k: v for k, v in (entry.get("Labels") or {}).items() if k in TOPOLOGY_LABELS}
        for entry in table
        if entry.get("Alive") and entry.get("Labels")
    }
    problems = []
    for (key, value), members in sorted(topology_groups(table).items()):
        bundles = [{EVERY_NODE: 0.001} for _ in members]
        group = placement_group(bundles, "STRICT_SPREAD", bundle_label_selector=[{key: value}] * len(members))
        try:
            if not group.wait(timeout):
                problems.append(
                    f"a placement group selecting {key}={value} was not placed within {timeout:g} s"
                )
                continue
            landed = set(placement_group_table(group)["bundles_to_node_id"].values())
            if landed != set(members):
                outside = sorted(names.get(n, n) for n in landed - set(members))
                problems.append(f"a placement group selecting {key}={value} landed on {', '.join(outside)}")
        finally:
            remove_placement_group(group)
    return where, problems


def placement(bundle: int, answer: Mapping[str, Any], names: Mapping[str, str]) -> Placement:
    return Placement(
        bundle=bundle,
        node_id=answer["node_id"],
        node=names.get(answer["node_id"], answer["hostname"]),
        hostname=answer["hostname"],
        ip=answer["ip"],
        gpu_ids=tuple(answer["gpu_ids"]),
        cuda_visible_devices=answer["cuda_visible_devices"],
    )


def run(options: Options) -> SmokeResult:
    """The smoke test against the Ray this process is connected to."""
    import ray

    nodes = alive_nodes(ray.nodes())
    request = placement_request(nodes, options)
    job_nodes = os.environ.get(protocol.ENV_NODE_LIST, "").split()
    problems = node_problems(nodes, options, job_nodes)
    impossible = strategy_problems(request, nodes)
    if impossible:
        return make_result(request, nodes, [], problems + impossible)
    session = Session(request, options.timeout)
    allreduce = AllReduce()
    actors: list[Placement] = []
    try:
        actors, failures = session.place(nodes)
        problems += failures
        if actors:  # none: the placement group or every actor failed, and that problem is said already
            problems += placement_problems(nodes, actors, request.gpus)
        if options.allreduce and not failures and actors:
            allreduce = session.allreduce(options.allreduce, int(options.allreduce_mib * 2**20), actors)
    except Exception as error:  # a Ray error the checks did not foresee: still a result, with its traceback
        traceback.print_exc()
        problems.append(f"the smoke test stopped: {type(error).__name__}: {one_line(error)}")
    finally:
        session.close()
    topology: dict[str, dict[str, str]] = {}
    try:
        topology, wrong = topology_problems(options.timeout)
        problems += wrong
    except Exception as error:  # as above
        problems.append(f"the topology check stopped: {type(error).__name__}: {one_line(error)}")
    return replace(make_result(request, nodes, actors, problems, allreduce), topology=topology)


IN_A_JOB = "run it in the job (raysub attach JOB -- raysub smoke), or set RAY_ADDRESS to its head's host:port"


def smoke(options: Options) -> SmokeResult:
    """Connect to the running Ray (unless this process already is), run, disconnect."""
    import logging

    try:
        import ray
    except ImportError as error:
        reason = f"no Ray in {sys.executable} ({one_line(error)}): {IN_A_JOB}, or pip install 'raysub[ray]'"
        return make_result(None, [], [], [reason])
    if ray.is_initialized():
        return run(options)
    # Never "auto": on a shared node that finds whichever Ray started there last, maybe a neighbour's.
    address = os.environ.get("RAY_ADDRESS")
    if not address:
        return make_result(None, [], [], [f"RAY_ADDRESS is not set, so this is no job's step: {IN_A_JOB}"])
    try:
        gcs_answers(address, options.timeout)
        ray.init(address=address, logging_level=logging.WARNING)
    except Exception as error:
        reason = f"cannot connect to Ray at {address} (inside a job RAY_ADDRESS is set): {one_line(error)}"
        return make_result(None, [], [], [reason])
    try:
        return run(options)
    finally:
        ray.shutdown()


# ---- printing ----


def table(result: SmokeResult) -> str:
    """Where each actor ran, then the all-reduce (when asked), the problems and the summary."""
    rows = [("bundle", "node", "IP", "GPU ids", "CUDA_VISIBLE_DEVICES")]
    rows += [
        (str(a.bundle), a.node, a.ip, ",".join(a.gpu_ids) or "-", a.cuda_visible_devices or "-")
        for a in result.actors
    ]
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    if not result.actors:
        lines = ["no actor ran"]
    if result.allreduce.status != "off":
        lines.append(describe_allreduce(result.allreduce))
    for node, labels in sorted(result.topology.items()):
        lines.append(
            f"topology: {node}: "
            + ", ".join(f"{k.removeprefix('raysub/')} {v}" for k, v in sorted(labels.items()))
        )
    lines += [f"problem: {problem}" for problem in result.problems]
    lines.append(summary(result))
    return "\n".join(lines)


def summary(result: SmokeResult) -> str:
    """The last line: ok or FAILED, and how many bundles were placed on how many nodes."""
    word = "ok" if result.ok else "FAILED"
    if not result.bundles:
        return word
    kind = "GPU" if "GPU" in result.bundle_resources else "node"
    nodes = len({a.node_id for a in result.actors})
    return (
        f"{word}: {len(result.actors)} of {result.bundles} bundles (one per {kind}, {result.strategy}) "
        f"placed on {nodes} of {len(result.nodes)} nodes"
    )


def describe_allreduce(result: AllReduce) -> str:
    if result.status != "ok":
        return f"all-reduce: {result.status}: {result.reason}"
    size = result.bytes / 2**20
    return (
        f"all-reduce: {result.backend}, {result.world_size} ranks, {size:g} MiB in "
        f"{(result.seconds or 0) * 1e3:.1f} ms: bus bandwidth {result.busbw_gbps or 0:.2f} GB/s "
        f"(algorithm bandwidth {result.algbw_gbps or 0:.2f} GB/s)"
    )


# ---- the program ----


def whole(minimum: int) -> Any:
    """An argparse type: a whole number of at least ``minimum``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return convert


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


# The command line's help; ``raysub smoke`` is this program (it names itself in protocol.ENV_SMOKE_PROG).
PROG = "python -m raysub.job.programs.smoke"
DESCRIPTION = """\
Prove the running job's placement: one actor per GPU (or per node), each where it should be.

Run it inside a job (raysub attach, where RAY_ADDRESS is set). It makes a placement group of one
bundle per GPU (or per node with --gpus-per-node 0), starts an actor in each, and checks that
every node and every GPU got exactly one and no two share a GPU; then removes the placement
group and the actors. Prints where each actor ran. Exit status 0 when every check passed, 1
(with the reason) when one did not or Ray could not be reached, 2 for a usage error. raysub
render --smoke makes it a job's driver (docs/smoke.md)."""
EXAMPLE = """\
Example:
  raysub attach 4711 -- raysub smoke --nodes 4 --gpus-per-node 8 --allreduce
  raysub smoke --gpus-per-node 0 -o smoke.json"""


def help_formatter(prog: str) -> argparse.HelpFormatter:
    """The texts above as written, in the terminal's width but no wider than raysub's other commands'."""
    width = max(min(shutil.get_terminal_size().columns, 100) - 2, 50)
    return argparse.RawDescriptionHelpFormatter(prog, width=width)


def parse(argv: Sequence[str] | None) -> tuple[Options, Path | None]:
    """The smoke test's options, and where its result goes (None: nowhere)."""
    parser = argparse.ArgumentParser(
        prog=os.environ.get(protocol.ENV_SMOKE_PROG, PROG),
        description=DESCRIPTION,
        epilog=EXAMPLE,
        formatter_class=help_formatter,
    )
    parser.add_argument(
        "--nodes", type=whole(1), metavar="N", help="Nodes the cluster should have; default: those in Ray."
    )
    parser.add_argument(
        "--gpus-per-node",
        type=whole(0),
        metavar="N",
        help="GPUs each node should advertise; default: what each does. 0: one bundle per node, no GPUs.",
    )
    parser.add_argument(
        "--head-gpus",
        type=whole(0),
        metavar="N",
        help="GPUs the head should advertise (0 for a job with --dedicated-head); default: --gpus-per-node.",
    )
    parser.add_argument(
        "--strategy",
        type=str.upper,
        choices=STRATEGIES,
        help=f"The placement group's strategy. Default: {GPU_STRATEGY} for one bundle per GPU, as a "
        f"training run's workers are placed; {NODE_STRATEGY} for one per node, the only strategy that "
        "guarantees it.",
    )
    parser.add_argument(
        "--allreduce",
        nargs="?",
        const="optional",
        choices=ALLREDUCE_MODES,
        help="Also all-reduce across the actors (NCCL on GPUs, else gloo) and measure the bandwidth; "
        "skipped where torch is missing, unless --allreduce=required.",
    )
    parser.add_argument(
        "--allreduce-mib",
        type=positive,
        default=ALLREDUCE_MIB,
        metavar="MIB",
        help="The all-reduce's size in MiB (default: %(default)g).",
    )
    parser.add_argument(
        "--timeout",
        type=positive,
        default=TIMEOUT_S,
        metavar="SECONDS",
        help="The longest any one wait may take: the placement, each round of calls to the actors "
        "(default: %(default)g).",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=f"Write the result ({protocol.SMOKE}'s format) here; default: LOG_DIR/{protocol.SMOKE}.",
    )
    parser.add_argument(
        "--log-dir",
        help=f"The job's LOG_DIR; default: ${protocol.ENV_LOG_DIR}, set for a job's driver. Without "
        "either (and without --output) the result is only printed.",
    )
    args = parser.parse_args(argv)
    options = Options(
        args.nodes,
        args.gpus_per_node,
        args.head_gpus,
        args.strategy,
        args.allreduce,
        args.allreduce_mib,
        args.timeout,
    )
    return options, Path(args.output) if args.output else result_path(args.log_dir)


def main(argv: Sequence[str] | None = None) -> int:
    options, path = parse(argv)
    result = smoke(options)
    print(table(result), flush=True)
    if path is not None:
        write_result(path, result)
    if not result.ok:
        print(f"raysub smoke: {result.reason}", file=sys.stderr)
        return FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
