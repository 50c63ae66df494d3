"""``raysub plan`` and ``raysub render`` with parallel sizes: the arithmetic, every spelling of every size,
the rules with their one-line errors, --json, and render's sizes in place of --nodes."""

import json
from pathlib import Path

import click
import pytest

from raysub.cli import cli
from raysub.plan import SIZES, Plan, PlanError, nearest_tensor_sizes, plan
from raysub.spec import nodes_from_options
from tests.conftest import RunCli

EVERY_FLAG = [(size.name, flag) for size in SIZES for flag in size.flags]

# The spellings users bring from their frameworks (issue 13); the table may grow, never lose one.
REQUIRED = {
    "tp": [
        *("--tensor-parallel-size", "--tensor-model-parallel-size", "--tensor_model_parallel_size"),
        *("--tp-size", "--tp_size", "--tp"),
    ],
    "pp": ["--pipeline-parallel-size", "--pipeline_model_parallel_size", "--pp-size", "--pp_size", "--pp"],
    "dp": ["--data-parallel-size", "--data_parallel_size", "--dp-size", "--dp_size", "--dp"],
    "cp": ["--context-parallel-size", "--context_parallel_size", "--cp-size", "--cp_size", "--cp"],
    "dcp": [
        *("--decode-context-parallel-size", "--decode_context_parallel_size", "--dcp-size"),
        *("--dcp_size", "--dcp"),
    ],
}


def planned(raysub_cli: RunCli, *args: str) -> dict[str, int]:
    result = raysub_cli("plan", *args, "--json")
    assert result.code == 0, result.stderr
    data: dict[str, int] = json.loads(result.stdout)
    return data


# ---- the spellings ----


@pytest.mark.parametrize(("name", "flag"), EVERY_FLAG, ids=[flag for _, flag in EVERY_FLAG])
def test_every_spelling_sets_its_size(raysub_cli: RunCli, name: str, flag: str) -> None:
    data = planned(raysub_cli, "--gpus-per-node", "8", flag, "2")
    assert data[name] == 2
    assert all(data[other.name] == 1 for other in SIZES if other.name != name)


def test_the_spellings_users_bring_are_all_there() -> None:
    for name, flags in REQUIRED.items():
        size = next(size for size in SIZES if size.name == name)
        assert set(flags) <= set(size.flags), name


def test_no_spelling_belongs_to_two_sizes_and_each_has_a_source() -> None:
    flags = [flag for size in SIZES for flag in size.flags]
    assert len(flags) == len(set(flags))
    assert all(spelling.used_by for size in SIZES for spelling in size.spellings)
    assert all(size.flags[0] == f"--{size.name}" for size in SIZES)


def test_plan_and_render_take_the_same_size_options() -> None:
    assert isinstance(cli, click.Group)

    def size_options(command: str) -> dict[str | None, list[str]]:
        return {p.name: p.opts for p in cli.commands[command].params if p.name in {s.name for s in SIZES}}

    assert size_options("plan") == size_options("render") == {size.name: list(size.flags) for size in SIZES}


def test_sizes_read_the_environment(raysub_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYSUB_TP", "4")
    monkeypatch.setenv("RAYSUB_GPUS_PER_NODE", "4")
    assert planned(raysub_cli)["nodes"] == 1
    assert planned(raysub_cli, "--dp", "3")["nodes"] == 3


# ---- the arithmetic ----


@pytest.mark.parametrize(
    ("sizes", "width"),
    [
        ({"dp": 4}, 4),
        ({"cp": 4}, 4),
        ({"dcp": 4}, 4),
        ({"dp": 4, "cp": 2}, 4),
        ({"dp": 2, "cp": 4}, 4),
        ({"dp": 2, "cp": 2, "dcp": 8}, 8),
        ({"dp": 6, "cp": 3, "dcp": 2}, 6),
        ({}, 1),
    ],
)
def test_world_size_takes_the_widest_of_dp_cp_and_dcp(sizes: dict[str, int], width: int) -> None:
    result = plan(8, tp=2, pp=3, **sizes)
    assert result.data_width == width
    assert result.world_size == 2 * 3 * width


@pytest.mark.parametrize(
    ("tp", "pp", "dp", "per_node", "world", "nodes", "left_over"),
    [
        (8, 2, 4, 8, 64, 8, 0),
        (2, 3, 1, 8, 6, 1, 2),
        (4, 1, 3, 8, 12, 2, 4),
        (1, 1, 1, 8, 1, 1, 7),
        (2, 1, 9, 8, 18, 3, 6),
        (16, 1, 2, 8, 32, 4, 0),
        (4, 5, 1, 4, 20, 5, 0),
        (3, 1, 2, 8, 6, 1, 2),
        (1, 7, 1, 1, 7, 7, 0),
    ],
)
def test_nodes_round_up_and_the_last_node_leaves_gpus_over(
    tp: int, pp: int, dp: int, per_node: int, world: int, nodes: int, left_over: int
) -> None:
    result = plan(per_node, tp=tp, pp=pp, dp=dp)
    assert (result.world_size, result.nodes, result.left_over_gpus) == (world, nodes, left_over)
    assert (result.warning is None) == (left_over == 0)


def test_a_size_left_out_or_none_is_one() -> None:
    assert plan(8, tp=None, cp=2) == Plan(tp=1, pp=1, dp=1, cp=2, dcp=1, gpus_per_node=8)


def test_json_has_the_sizes_and_what_follows_from_them(raysub_cli: RunCli) -> None:
    result = raysub_cli("plan", "--tp", "2", "--pp", "3", "--dcp", "2", "--gpus-per-node", "8", "--json")
    assert result.code == 0
    assert json.loads(result.stdout) == {
        "tp": 2,
        "pp": 3,
        "dp": 1,
        "cp": 1,
        "dcp": 2,
        "gpus_per_node": 8,
        "world_size": 12,
        "nodes": 2,
        "left_over_gpus": 4,
    }
    assert (
        result.stderr
        == "raysub: warning: 12 GPUs do not fill whole nodes of 8: 4 GPUs of the last node stay unused\n"
    )


def test_the_text_says_the_formula_and_the_render_options(raysub_cli: RunCli) -> None:
    result = raysub_cli("plan", "--tp", "8", "--pp", "2", "--dp", "4", "--gpus-per-node", "8")
    assert (result.code, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "world size: 64 GPUs = tp 8 x pp 2 x max(dp 4, cp 1, dcp 1)",
        "nodes:      8 of 8 GPUs (raysub render --nodes 8 --gpus-per-node 8, or the same sizes)",
        "left over:  0 GPUs on the last node",
    ]


# ---- the rules ----


def data_rule(value: int, width: int) -> str:
    return (
        f"{value} must divide max(dp, cp, dcp) = {width}: data, context and decode-context parallel "
        f"groups split the same {width} blocks of tp x pp GPUs"
    )


@pytest.mark.parametrize(
    ("args", "option", "message"),
    [
        (["--tp", "0"], "--tp", "must be at least 1, not 0"),
        (["--pp", "-1"], "--pp", "must be at least 1, not -1"),
        (["--dp", "0"], "--dp", "must be at least 1, not 0"),
        (["--cp", "0"], "--cp", "must be at least 1, not 0"),
        (["--dcp", "0"], "--dcp", "must be at least 1, not 0"),
        (["--gpus-per-node", "0"], "--gpus-per-node", "must be at least 1 to place parallel ranks on, not 0"),
        (
            ["--tp", "3", "--dp", "4"],
            "--tp",
            "3 must divide --gpus-per-node (8) or be a multiple of it, or some tensor-parallel groups "
            "straddle two nodes; the nearest sizes that fit are 2 and 4",
        ),
        (
            ["--tp", "12"],
            "--tp",
            "12 must divide --gpus-per-node (8) or be a multiple of it, or some tensor-parallel groups "
            "straddle two nodes; the nearest sizes that fit are 8 and 16",
        ),
        (["--dp", "4", "--cp", "3"], "--cp", data_rule(3, 4)),
        (["--dp", "2", "--cp", "3"], "--dp", data_rule(2, 3)),
        (["--dp", "4", "--dcp", "6"], "--dp", data_rule(4, 6)),
        (["--cp", "4", "--dcp", "3"], "--dcp", data_rule(3, 4)),
    ],
)
def test_each_broken_rule_is_one_line_naming_the_option(
    raysub_cli: RunCli, args: list[str], option: str, message: str
) -> None:
    result = raysub_cli("plan", "--gpus-per-node", "8", *args)
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == f"raysub: error: Invalid value for '{option}': {message}\n"


def test_the_library_raises_plan_error_naming_the_option() -> None:
    with pytest.raises(PlanError) as caught:
        plan(8, tp=5, dp=2)
    assert caught.value.option == "--tp"
    assert str(caught.value).startswith("--tp: 5 must divide --gpus-per-node (8)")


@pytest.mark.parametrize(
    ("tp", "per_node", "nearest"),
    [(3, 8, (2, 4)), (5, 8, (4, 8)), (7, 8, (4, 8)), (5, 6, (3, 6)), (12, 8, (8, 16)), (9, 4, (8, 12))],
)
def test_the_nearest_tensor_sizes_that_fit(tp: int, per_node: int, nearest: tuple[int, int]) -> None:
    assert nearest_tensor_sizes(tp, per_node) == nearest


@pytest.mark.parametrize(("tp", "per_node"), [(1, 8), (2, 8), (4, 8), (8, 8), (16, 8), (24, 8), (3, 6)])
def test_tensor_groups_on_one_node_or_whole_nodes_are_fine(tp: int, per_node: int) -> None:
    assert plan(per_node, tp=tp, dp=4).nodes >= 1


def test_an_odd_tensor_size_is_fine_on_a_single_node() -> None:
    assert plan(8, tp=3, dp=2).nodes == 1
    assert plan(8, tp=3, pp=2, dp=1).left_over_gpus == 2
    with pytest.raises(PlanError):
        plan(8, tp=3, dp=3)  # 9 GPUs: two nodes, and a group across them


def test_rules_are_checked_in_order() -> None:
    with pytest.raises(PlanError) as caught:
        plan(0, tp=3, dp=3, cp=2)
    assert caught.value.option == "--gpus-per-node"
    with pytest.raises(PlanError) as caught:
        plan(8, tp=3, dp=3, cp=2)
    assert caught.value.option == "--tp"


# ---- render with sizes ----


def test_render_with_sizes_writes_the_script_of_render_with_nodes(raysub_cli: RunCli) -> None:
    command = ["--gpus-per-node", "8", "-p", "batch", "--", "python", "train.py"]
    by_nodes = raysub_cli("render", "--nodes", "8", *command)
    by_sizes = raysub_cli(
        "render", "--tensor-model-parallel-size", "8", "--pp", "2", "--dp_size", "4", *command
    )
    assert by_sizes.code == by_nodes.code == 0
    assert by_sizes.stdout == by_nodes.stdout
    assert by_sizes.stderr == ""
    assert "#SBATCH --nodes=8\n" in by_sizes.stdout


def test_render_with_sizes_warns_of_gpus_left_over(raysub_cli: RunCli) -> None:
    result = raysub_cli("render", "--tp", "2", "--pp", "3", "--gpus-per-node", "8", "--", "true")
    assert result.code == 0
    assert "#SBATCH --nodes=1\n" in result.stdout
    assert (
        result.stderr
        == "raysub: warning: 6 GPUs do not fill whole nodes of 8: 2 GPUs of the last node stay unused\n"
    )


def test_render_with_sizes_and_a_dedicated_head_adds_the_head(raysub_cli: RunCli) -> None:
    result = raysub_cli(
        "render", "--tp", "4", "--dp", "4", "--gpus-per-node", "8", "--dedicated-head", "--", "x"
    )
    assert result.code == 0, result.stderr
    assert "#SBATCH --nodes=3\n" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--nodes", "2", "--tp", "8"],
            "give --nodes or the parallel sizes (--tp, --pp, --dp, --cp, --dcp), not both",
        ),
        (
            [],
            "is required (how many nodes the job gets), or the parallel sizes "
            "(--tp, --pp, --dp, --cp, --dcp)",
        ),
    ],
)
def test_render_takes_nodes_or_sizes_not_both_nor_neither(
    raysub_cli: RunCli, args: list[str], message: str
) -> None:
    result = raysub_cli("render", *args, "--", "true")
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("raysub: error: Invalid value for '--nodes': ")
    assert message in result.stderr


def test_nodes_from_the_environment_and_sizes_on_the_command_line_conflict(
    raysub_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYSUB_NODES", "4")
    result = raysub_cli("render", "--dp", "2", "--", "true")
    assert result.code == 2
    assert "RAYSUB_NODES" in result.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--tp", "3", "--dp", "4"], "--tp"),
        (["--dp", "4", "--cp", "3"], "--cp"),
        (["--pp", "0"], "--pp"),
        (["--tp", "2", "--gpus-per-node", "0"], "--gpus-per-node"),
    ],
)
def test_render_refuses_sizes_that_break_a_rule(raysub_cli: RunCli, args: list[str], option: str) -> None:
    result = raysub_cli("render", *args, "--", "true")
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1
    assert f"'{option}'" in result.stderr


def test_nodes_from_options_gives_the_nodes_and_the_plan_they_came_from() -> None:
    values = {"nodes": None, "tp": 8, "dp": 2, "cp": None, "gpus_per_node": 8, "dedicated_head": False}
    assert nodes_from_options(values) == (2, Plan(tp=8, pp=1, dp=2, cp=1, dcp=1, gpus_per_node=8))
    assert nodes_from_options({**values, "dedicated_head": True}) == (
        3,
        Plan(tp=8, pp=1, dp=2, cp=1, dcp=1, gpus_per_node=8),
    )
    assert nodes_from_options({"nodes": 5, "gpus_per_node": 8}) == (5, None)


def test_a_profile_can_give_the_sizes(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    (tmp_path / "raysub.toml").write_text("[profiles.run7]\ntp = 8\ndp = 2\ngpus-per-node = 4\n")
    result = raysub_cli("render", "--profile", "run7", "--", "true")
    assert result.code == 0, result.stderr
    assert "#SBATCH --nodes=4\n" in result.stdout


@pytest.mark.parametrize(
    ("sizes", "domain", "switch", "straddling"),
    [
        # GB200 NVL72 of 4-GPU trays: 18 nodes a domain. tp 8 takes 2 nodes: 9 groups to a domain.
        ({"tp": 8, "pp": 4, "dp": 9}, 18, 16, []),
        # tp 16 takes 4 nodes: 18 is no multiple of 4, so some group straddles two domains.
        ({"tp": 16, "pp": 1, "dp": 9}, 18, None, ["tensor-parallel group"]),
        # A replica (tp x pp = 32 GPUs) takes 8 nodes: leaf switches of 18 cannot hold whole replicas.
        ({"tp": 8, "pp": 4, "dp": 9}, None, 18, ["model replica"]),
        # A tensor-parallel group within one node never straddles anything.
        ({"tp": 2, "pp": 1, "dp": 36}, 18, 18, []),
    ],
)
def test_plan_says_which_groups_straddle_a_domain_or_a_switch(
    raysub_cli: RunCli, sizes: dict[str, int], domain: int | None, switch: int | None, straddling: list[str]
) -> None:
    args = [f"--{name}={value}" for name, value in sizes.items()] + ["--gpus-per-node", "4"]
    args += [
        *(["--domain-nodes", str(domain)] if domain else []),
        *(["--switch-nodes", str(switch)] if switch else []),
    ]
    result = raysub_cli("plan", *args, "--json")
    assert result.code == 0, result.stderr
    placed = json.loads(result.stdout)["placement"]
    assert [
        kind
        for kind in ("tensor-parallel group", "model replica")
        if any(kind in w for w in placed["warnings"])
    ] == straddling
    assert all(f"raysub: warning: {w}" in result.stderr for w in placed["warnings"])
    text = raysub_cli("plan", *args).stdout
    assert ("does not fit whole" in text) == bool(straddling)


def test_a_domain_of_no_nodes_is_refused_naming_the_option(raysub_cli: RunCli) -> None:
    result = raysub_cli("plan", "--tp", "8", "--domain-nodes", "0")
    assert result.code == 2 and "--domain-nodes" in result.stderr and "at least 1" in result.stderr
