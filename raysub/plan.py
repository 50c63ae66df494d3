"""How many GPUs and nodes a run with given parallel sizes needs: ``raysub plan``, and ``raysub render``
with the sizes in place of --nodes. The rules and their reasons are in docs/plan.md.

SIZES is the one table of the sizes and of the spellings frameworks use for them; the command line builds
both commands' options from it, and docs/plan.md's table of spellings is generated from it.
"""

import json
from dataclasses import asdict, dataclass

from raysub.errors import OptionError


class PlanError(OptionError):
    """Sizes no run can be placed with; ``option`` names the option at fault (``--tp``)."""


@dataclass(frozen=True)
class Spelling:
    """One framework's name for a size, accepted as ``--<flag>``: an option (``tensor-model-parallel-size``)
    or a config key (``tensor_model_parallel_size``); ``used_by`` says who uses it and where."""

    flag: str
    used_by: str


@dataclass(frozen=True)
class Size:
    """One parallel size: raysub's option ``--<name>`` (also the attribute of Plan and the key in --json)
    and the other spellings it answers to."""

    name: str
    meaning: str
    spellings: tuple[Spelling, ...]

    @property
    def option(self) -> str:
        return f"--{self.name}"

    @property
    def flags(self) -> tuple[str, ...]:
        """Every option that sets this size, raysub's own first."""
        return (self.option, *(f"--{spelling.flag}" for spelling in self.spellings))


SGLANG_NEMO_RL = "NeMo-RL (`policy.generation.sglang_cfg.{}`)"
SIZES = (
    Size(
        "tp",
        "Tensor-parallel size: GPUs that split every layer.",
        (
            Spelling("tp-size", "SGLang"),
            Spelling("tp_size", "TensorRT-LLM (`trtllm-serve`); " + SGLANG_NEMO_RL.format("tp_size")),
            Spelling("tensor-parallel-size", "vLLM; SGLang (alias of `--tp-size`)"),
            Spelling(
                "tensor_parallel_size",
                "vLLM (`LLM(tensor_parallel_size=...)`); NeMo-RL (`policy.dtensor_cfg.`, "
                "`policy.generation.vllm_cfg.`); TensorRT-LLM (`trtllm-serve`); verl (VeOmni engine)",
            ),
            Spelling("tensor-model-parallel-size", "Megatron-LM"),
            Spelling(
                "tensor_model_parallel_size",
                "Megatron-Core (`ModelParallelConfig`); NeMo-RL (`policy.megatron_cfg.`); verl "
                "(`actor_rollout_ref.actor.megatron.`, `actor_rollout_ref.rollout.`)",
            ),
        ),
    ),
    Size(
        "pp",
        "Pipeline-parallel size: stages the layers are split into.",
        (
            Spelling("pp-size", "SGLang"),
            Spelling("pp_size", "TensorRT-LLM (`trtllm-serve`); " + SGLANG_NEMO_RL.format("pp_size")),
            Spelling("pipeline-parallel-size", "vLLM; SGLang (alias of `--pp-size`)"),
            Spelling(
                "pipeline_parallel_size",
                "vLLM (`LLM(pipeline_parallel_size=...)`); NeMo-RL (`policy.generation.vllm_cfg.`); "
                "TensorRT-LLM (`trtllm-serve`); verl (VeOmni engine)",
            ),
            Spelling("pipeline-model-parallel-size", "Megatron-LM"),
            Spelling(
                "pipeline_model_parallel_size",
                "Megatron-Core (`ModelParallelConfig`); NeMo-RL (`policy.megatron_cfg.`); verl "
                "(`actor_rollout_ref.actor.megatron.`, `actor_rollout_ref.rollout.`)",
            ),
        ),
    ),
    Size(
        "dp",
        "Data-parallel size: model replicas that split every batch.",
        (
            Spelling("dp-size", "SGLang"),
            Spelling("dp_size", SGLANG_NEMO_RL.format("dp_size")),
            Spelling("data-parallel-size", "vLLM; SGLang (alias of `--dp-size`)"),
            Spelling(
                "data_parallel_size",
                "vLLM (`LLM(data_parallel_size=...)`); verl (`actor_rollout_ref.rollout.`, VeOmni engine)",
            ),
        ),
    ),
    Size(
        "cp",
        "Context-parallel size: GPUs that split every sequence.",
        (
            Spelling("cp-size", "the dash form of `cp_size`"),
            Spelling("cp_size", "TensorRT-LLM (`trtllm-serve`)"),
            Spelling("context-parallel-size", "Megatron-LM"),
            Spelling(
                "context_parallel_size",
                "Megatron-Core (`ModelParallelConfig`); NeMo-RL (`policy.megatron_cfg.`, "
                "`policy.dtensor_cfg.`); verl (`actor_rollout_ref.actor.megatron.`, VeOmni engine); "
                "TensorRT-LLM (`trtllm-serve`)",
            ),
        ),
    ),
    Size(
        "dcp",
        "Decode-context-parallel size: GPUs that split the KV cache while decoding.",
        (
            Spelling("dcp-size", "SGLang"),
            Spelling("dcp_size", "SGLang (`ServerArgs.dcp_size`)"),
            Spelling("decode-context-parallel-size", "vLLM; SGLang (alias of `--dcp-size`)"),
            Spelling("decode_context_parallel_size", "vLLM (`LLM(decode_context_parallel_size=...)`)"),
        ),
    ),
)
SIZE_OF = {size.name: size for size in SIZES}
# The sizes that split the same blocks of tp x pp GPUs; the widest of them sets the world size.
DATA_SIZES = ("dp", "cp", "dcp")


def nearest_tensor_sizes(tp: int, gpus_per_node: int) -> tuple[int, int]:
    """The tensor-parallel sizes next below and above ``tp`` that keep every group on one node or on
    whole nodes: divisors of ``gpus_per_node``, then its multiples."""
    if tp < gpus_per_node:
        divisors = [d for d in range(1, gpus_per_node + 1) if gpus_per_node % d == 0]
        return max(d for d in divisors if d < tp), min(d for d in divisors if d > tp)
    below = tp // gpus_per_node * gpus_per_node
    return below, below + gpus_per_node


@dataclass(frozen=True)
class Plan:
    """A run's parallel sizes on nodes of ``gpus_per_node`` GPUs; ``check`` says whether they fit.
    ``plan()`` makes a checked one, with 1 for each size left out."""

    tp: int
    pp: int
    dp: int
    cp: int
    dcp: int
    gpus_per_node: int

    @property
    def data_width(self) -> int:
        """How many blocks of tp x pp GPUs the run takes: max(dp, cp, dcp). Data, context and
        decode-context parallelism split these same blocks (docs/plan.md)."""
        return max(self.dp, self.cp, self.dcp)

    @property
    def world_size(self) -> int:
        """The GPUs the run uses: tp x pp x max(dp, cp, dcp)."""
        return self.tp * self.pp * self.data_width

    @property
    def nodes(self) -> int:
        """Nodes of ``gpus_per_node`` GPUs that hold the world size, rounded up."""
        return -(-self.world_size // self.gpus_per_node)

    @property
    def left_over_gpus(self) -> int:
        """GPUs of the last node the run does not use."""
        return self.nodes * self.gpus_per_node - self.world_size

    @property
    def warning(self) -> str | None:
        """A sentence for a person when the run leaves GPUs unused; None when it fills whole nodes."""
        if not self.left_over_gpus:
            return None
        return (
            f"{self.world_size} GPUs do not fill whole nodes of {self.gpus_per_node}: "
            f"{self.left_over_gpus} GPUs of the last node stay unused"
        )

    def check(self) -> "Plan":
        """Raise PlanError for the first size the run cannot be placed with; return self otherwise."""
        self._check_bounds()
        self._check_tensor_groups()
        self._check_data_sizes()
        return self

    def _check_bounds(self) -> None:
        if self.gpus_per_node < 1:
            raise PlanError(
                "--gpus-per-node", f"must be at least 1 to place parallel ranks on, not {self.gpus_per_node}"
            )
        for size in SIZES:
            value = getattr(self, size.name)
            if value < 1:
                raise PlanError(size.option, f"must be at least 1, not {value}")

    def _check_tensor_groups(self) -> None:
        """A tensor-parallel group lies on one node or on whole nodes, never partly on two. A run on a
        single node has no boundary to straddle."""
        tp, per_node = self.tp, self.gpus_per_node
        if self.nodes > 1 and per_node % tp and tp % per_node:
            below, above = nearest_tensor_sizes(tp, per_node)
            raise PlanError(
                "--tp",
                f"{tp} must divide --gpus-per-node ({per_node}) or be a multiple of it, or some "
                "tensor-parallel groups straddle two nodes; the nearest sizes that fit are "
                f"{below} and {above}",
            )

    def _check_data_sizes(self) -> None:
        """dp, cp and dcp each divide the widest of them, so their groups tile the same blocks evenly."""
        width = self.data_width
        for name in DATA_SIZES:
            value = getattr(self, name)
            if width % value:
                raise PlanError(
                    SIZE_OF[name].option,
                    f"{value} must divide max(dp, cp, dcp) = {width}: data, context and decode-context "
                    f"parallel groups split the same {width} blocks of tp x pp GPUs",
                )

    def as_dict(self) -> dict[str, int]:
        """The sizes and what follows from them, as --json prints them."""
        return {
            **asdict(self),
            "world_size": self.world_size,
            "nodes": self.nodes,
            "left_over_gpus": self.left_over_gpus,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def describe(self) -> str:
        """A few lines for a person."""
        sizes = f"tp {self.tp} x pp {self.pp} x max(dp {self.dp}, cp {self.cp}, dcp {self.dcp})"
        render = f"raysub render --nodes {self.nodes} --gpus-per-node {self.gpus_per_node}, or the same sizes"
        return "\n".join(
            [
                f"world size: {self.world_size} GPUs = {sizes}",
                f"nodes:      {self.nodes} of {self.gpus_per_node} GPUs ({render})",
                f"left over:  {self.left_over_gpus} GPUs on the last node",
            ]
        )


@dataclass(frozen=True)
class Placement:
    """Where a plan's groups fall, its ranks laid out in topology order (raysub's workers are numbered
    switch by switch; docs/topology.md): a tensor-parallel group on ``tp_nodes`` consecutive nodes (0: it
    shares one node with others), a model replica (tp x pp GPUs) on ``replica_nodes``. A group straddles a
    domain or switch of N nodes when it is wider than N, or when N is not a multiple of its width (the
    groups then tile the domains unevenly)."""

    tp_nodes: int
    replica_nodes: int
    domain_nodes: int | None  # nodes a multi-node NVLink domain holds (18 on a GB200 NVL72 of 4-GPU trays)
    switch_nodes: int | None  # nodes under one leaf switch (or Slurm block)

    @staticmethod
    def straddles(width: int, room: int | None) -> bool:
        return room is not None and width > 1 and room % width != 0

    def warnings(self) -> list[str]:
        """A sentence for each kind of group that some group of must straddle a domain or a switch."""
        said = []
        if self.straddles(self.tp_nodes, self.domain_nodes):
            said.append(
                f"a tensor-parallel group spans {self.tp_nodes} nodes, which NVLink domains of "
                f"{self.domain_nodes} nodes cannot hold whole: some groups straddle two domains and run "
                "at the network's speed"
            )
        if self.straddles(self.replica_nodes, self.switch_nodes):
            said.append(
                f"a model replica (tp x pp) spans {self.replica_nodes} nodes, which leaf switches of "
                f"{self.switch_nodes} nodes cannot hold whole: some replicas' traffic crosses the fabric's "
                "upper level"
            )
        return said

    def describe(self) -> list[str]:
        lines = []
        for room, kind, group, width in (
            (self.domain_nodes, "NVLink domain", "tensor-parallel group", self.tp_nodes),
            (self.switch_nodes, "leaf switch", "model replica", self.replica_nodes),
        ):
            if room is not None:
                fits = (
                    "does not fit whole" if self.straddles(width, room) else f"{room // max(width, 1)} to one"
                )
                lines.append(f"{kind + ':':15}{room} nodes; a {group} takes {max(width, 1)}: {fits}")
        return lines


def placement(result: Plan, domain_nodes: int | None, switch_nodes: int | None) -> Placement:
    """Where ``result``'s groups fall on NVLink domains and leaf switches of these many nodes."""
    for option, value in (("--domain-nodes", domain_nodes), ("--switch-nodes", switch_nodes)):
        if value is not None and value < 1:
            raise PlanError(option, f"must be at least 1, not {value}")
    per_node = result.gpus_per_node
    tp_nodes = result.tp // per_node if result.tp >= per_node else 0
    replica_nodes = -(-(result.tp * result.pp) // per_node)
    return Placement(tp_nodes, replica_nodes, domain_nodes, switch_nodes)


def plan(gpus_per_node: int, **sizes: int | None) -> Plan:
    """The checked Plan for ``sizes`` (tp, pp, dp, cp, dcp; one left out or None is 1) on nodes of
    ``gpus_per_node`` GPUs. Raises PlanError, naming the option at fault."""
    given = {name: value for name, value in sizes.items() if value is not None}
    return Plan(gpus_per_node=gpus_per_node, **{**dict.fromkeys(SIZE_OF, 1), **given}).check()
