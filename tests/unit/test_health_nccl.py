"""raysub.health.nccl on NCCL_DEBUG=INFO lines in NCCL's and aws-ofi-nccl's formats (tests/fixtures/logs/
holds longer samples, hand-written in those formats)."""

from pathlib import Path

import pytest

from raysub import health
from raysub.health.nccl import (
    EFA,
    IB,
    NO_NETWORK,
    ROCE,
    SOCKET,
    nccl_transport,
    transport_findings,
    transports_by_node,
)

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
HOST = "gpu-a01:2231:2290 [0] "
IB_DEVICES = HOST + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.10.0.1<0>"
ROCE_DEVICES = HOST + "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.4.7<0>"
SOCKET_INTERFACES = HOST + "NCCL INFO NET/Socket : Using [0]ib0:10.10.0.1<0> [1]eth0:192.168.1.10<0>"


def lines(*text: str) -> str:
    return "\n".join(text) + "\n"


@pytest.mark.parametrize(
    ("name", "transport"),
    [
        ("nccl_ib.log", IB),
        ("nccl_roce.log", ROCE),
        ("nccl_efa.log", EFA),  # aws-ofi-nccl 1.9 and later: provider, fabric, "Libfabric"
        ("nccl_efa_old.log", EFA),  # older: "Selected Provider is efa", "AWS Libfabric", mpirun's prefix
        ("nccl_socket.log", SOCKET),
    ],
)
def test_recorded_format_logs(name: str, transport: str) -> None:
    assert nccl_transport((LOGS / name).read_text()) == transport


@pytest.mark.parametrize(
    ("text", "transport"),
    [
        (lines(IB_DEVICES, SOCKET_INTERFACES, HOST + "NCCL INFO Using network IB"), IB),
        (lines(ROCE_DEVICES, HOST + "NCCL INFO Using network IB"), ROCE),
        (lines(ROCE_DEVICES, HOST + "NCCL INFO Using network IBext_v8"), ROCE),  # the SHARP plugin
        (lines(IB_DEVICES, HOST + "NCCL INFO Using network IBext"), IB),
        (lines(HOST + "NCCL INFO NET/IB: [0] mlx5_0:uverbs0:1/RoCE provider=Mlx5 speed=400000",
               HOST + "NCCL INFO Using network IB"), ROCE),
        (lines(IB_DEVICES, HOST + "NCCL INFO Using network Socket"), SOCKET),  # NCCL_NET=Socket
        (lines(HOST + "NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 4 nics)",
               HOST + "NCCL INFO Using network Libfabric"), EFA),
        (lines(HOST + "NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
               HOST + "NCCL INFO Using network AWS Libfabric"), EFA),
        (lines(HOST + "NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct"), EFA),
        (lines(HOST + "NCCL INFO NET/OFI Selected provider is tcp, fabric is 10.0.0.0/16",
               HOST + "NCCL INFO Using network Libfabric"), SOCKET),
        (lines(HOST + "NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi",
               HOST + "NCCL INFO Using network Libfabric"), None),  # HPE Slingshot: not classified
        (lines(HOST + "NCCL INFO Using network AWS Libfabric"), None),  # no provider named
        (lines(SOCKET_INTERFACES), None),  # lists fallback interfaces only, on healthy IB runs too
        (lines(IB_DEVICES, SOCKET_INTERFACES), IB),  # NCCL before 2.7 prints no "Using network" line
        (lines(HOST + "NCCL INFO NET/IB : No device found.", SOCKET_INTERFACES), SOCKET),
        (lines(HOST + "NCCL INFO NET/IB : No device found.",
               HOST + "NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>"), None),  # the loopback: one node
        (lines(HOST + "NCCL INFO Using network Socket",
               HOST + "NCCL INFO comm 0x558e rank 0 nranks 1 cudaDev 0 busId 30 - Init START"), None),
        (lines(HOST + "NCCL INFO Ring 00 : 15 -> 0 [receive] via NET/Socket/0"), SOCKET),  # NCCL 2.4 to 2.6
        (lines(HOST + "NCCL INFO NET/IB: [0] mlx5_1:1/IB", HOST + "NCCL INFO rank 0 nranks 8"), IB),  # 2.3
        ("no NCCL here\n", None),
        ("", None),
    ],
)  # fmt: skip
def test_using_network_decides(text: str, transport: str | None) -> None:
    assert nccl_transport(text) == transport


@pytest.mark.parametrize(
    ("channel", "transport"),
    [
        ("Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0", IB),
        ("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", IB),
        ("Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0", SOCKET),
        ("Channel 01/0 : 3[3] -> 14[6] [send] via NET/Libfabric/3/GDRDMA", EFA),
        ("Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA", EFA),
    ],
)
def test_without_using_network_the_channels_decide(channel: str, transport: str) -> None:
    provider = HOST + "NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 4 nics)"
    assert nccl_transport(lines(provider, SOCKET_INTERFACES, HOST + "NCCL INFO " + channel)) == transport
    roce = nccl_transport(lines(ROCE_DEVICES, HOST + "NCCL INFO " + channel))
    assert roce == {IB: ROCE, EFA: None}.get(transport, transport)


def test_intra_node_channels_name_no_network() -> None:
    text = lines(
        HOST + "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        HOST + "NCCL INFO Connected all rings",
    )
    assert nccl_transport(text) is None


def test_the_latest_using_network_line_counts() -> None:
    text = lines(HOST + "NCCL INFO Using network Socket", IB_DEVICES, HOST + "NCCL INFO Using network IB")
    assert nccl_transport(text) == IB


def test_ray_prefixes_and_ansi_are_read_through() -> None:
    text = (
        "\x1b[36m(RayTrainWorker pid=1193, ip=10.0.0.4)\x1b[0m " + HOST + "NCCL INFO Using network Socket\n"
    )
    assert nccl_transport(text) == SOCKET


def test_by_node() -> None:
    texts = {
        "node1": (LOGS / "nccl_ib.log").read_text(),
        "node2": (LOGS / "nccl_socket.log").read_text(),
        "node3": "",
    }
    assert transports_by_node(texts) == {"node1": IB, "node2": SOCKET, "node3": None}


def test_some_nodes_on_sockets_while_others_are_not() -> None:
    findings = transport_findings({"node1": IB, "node2": SOCKET, "node3": EFA, "node4": None}, True)
    assert len(findings) == 1
    assert "sockets" in findings[0]
    assert "node2 while node1, node3 use EFA/IB" in findings[0]
    assert transport_findings({"node1": ROCE, "node2": SOCKET}, False) != []


def test_all_on_sockets_on_a_multi_node_gpu_job() -> None:
    findings = transport_findings({"node1": SOCKET, "node2": SOCKET, "node3": None}, True)
    assert len(findings) == 1
    assert "node1, node2" in findings[0]
    assert transport_findings({"node1": SOCKET, "node2": SOCKET}, False) == []


@pytest.mark.parametrize(
    "by_node", [{}, {"a": None, "b": None}, {"a": IB, "b": IB}, {"a": ROCE, "b": EFA}, {"a": IB, "b": None}]
)
def test_nothing_to_say(by_node: dict[str, str | None]) -> None:
    assert transport_findings(by_node, True) == []


def test_the_package_re_exports_nccl_transport() -> None:
    assert health.nccl_transport is nccl_transport


def test_a_plugin_that_loads_and_then_fails_is_not_the_network() -> None:
    efa = "NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)"
    failed = (
        "host:1:2 [0] nccl_net_ofi_create_plugin:335 NCCL WARN NET/OFI aws-ofi-nccl initialization failed"
    )
    lines = [f"host:1:2 [0] NCCL INFO {efa}", failed, "host:1:2 [0] NCCL INFO NET/IB : No device found."]
    lines.append("host:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>")
    assert nccl_transport("\n".join(lines)) == SOCKET
    assert nccl_transport("\n".join(lines[:1])) == EFA


def test_communicators_within_one_node_use_no_network() -> None:
    one = "host:1:2 [0] NCCL INFO comm 0x55d7 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0"
    two = "host:1:2 [0] NCCL INFO comm 0x5244 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0"
    socket = "host:1:2 [0] NCCL INFO Using network Socket"
    assert nccl_transport(f"{socket}\n{one}") == NO_NETWORK
    assert nccl_transport(f"{socket}\n{one}\n{two}") == SOCKET  # a tensor-parallel group and a pipeline
    assert nccl_transport(f"{socket}\n{one}\n{one.replace('host', 'other')}") == SOCKET  # two hosts
    # In a job of two nodes, each node's tensor-parallel group says nothing of the network between them.
    assert transports_by_node({"a": f"{socket}\n{one}", "b": f"{socket}\n{one}"}) == {
        "a": SOCKET,
        "b": SOCKET,
    }
    assert transports_by_node({"a": f"{socket}\n{one}"}) == {"a": NO_NETWORK}
