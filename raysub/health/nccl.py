"""Which network NCCL moves data over between nodes, from its ``NCCL_DEBUG=INFO`` lines.

The decision, on the lines :mod:`raysub.health.text` cleans:

1. NCCL's own choice, the latest ``NCCL INFO Using network X`` line; without one, the network of the
   latest channel that crosses nodes, ``Channel 00/0 : 0[0] -> 1[0] [send] via NET/X/0``.
2. X names the transport: ``IB`` (and the SHARP plugin's ``IBext``...) is "IB", or "RoCE" when the IB
   devices NCCL lists (``NET/IB : Using [0]mlx5_0:1/RoCE ...``) are all RoCE ports; ``Socket`` is
   "Socket"; ``AWS Libfabric``, ``Libfabric`` and ``OFI`` (the aws-ofi-nccl plugin) are "EFA" when the
   plugin's ``NET/OFI Selected provider is efa`` line (any case, with or without ``, fabric is ...`` and
   ``(found N nics)``) says so, "Socket" for its tcp provider, and unclassified for any other provider
   (HPE Slingshot's cxi) or none named.
3. Without either kind of line (releases before 2.4 print no channels, 2.4 to 2.6 print ``Ring 00 : ...
   via NET/X/0`` instead, and a log may end before the channels), the lines NCCL prints when it loads
   its network: the provider line alone (efa means "EFA"); IB devices listed (``NET/IB : Using
   [0]mlx5_0:1/IB ...``, or ``NET/IB: [0] mlx5_1:1/IB`` before 2.4) mean "IB" or "RoCE" as in 2; ``NET/IB
   : No device found.`` with ``NET/Socket : Using [0]eth0:...`` means "Socket".

``NET/Socket : Using [0]ib0:...`` alone only lists the interfaces NCCL could fall back to; it appears on
healthy IB runs and decides nothing. A network plugin that loads and then fails to initialise
(aws-ofi-nccl's ``NET/OFI aws-ofi-nccl initialization failed`` and ``Initializing plugin failed``) is not
used: its provider line decides nothing, and NCCL goes on with what it says next (its sockets, usually).

A log of one host (its lines' ``host:pid:tid`` prefix names one) in a job of one node, whose communicators
all span one node (``comm 0x... nRanks 4 nNodes 1 ...``, NCCL 2.19 and later), moves nothing between
nodes, whatever network NCCL loaded: it is named :data:`NO_NETWORK` ("none"; its GPUs talk over NVLink,
PCIe peer-to-peer or shared memory). In a job of several nodes, a node's communicators within itself (a
tensor-parallel group) say nothing of the network its other communicators use. A log whose communicators
all have one rank (``nranks 1``), or whose only socket is the loopback, says no network either way (None):
nothing shows what the job would use between nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from raysub.health.text import lines

IB, ROCE, EFA, SOCKET = "IB", "RoCE", "EFA", "Socket"
NO_NETWORK = "none"  # every communicator within one node
FAST = (IB, ROCE, EFA)

_USING = re.compile(r"NCCL INFO Using network (?P<name>\S.*)")  # cleaned lines end without blanks
_CHANNEL = re.compile(r"NCCL INFO (?:Channel|Ring) \d+")
_VIA_NET = re.compile(r" via NET/(?P<name>[^/]+)/\d")
_IB_DEVICES = re.compile(r"NET/IB\w* ?:")
_PORT = re.compile(r":\d+/(?P<kind>IB|RoCE)\b")
_NO_IB = "NET/IB : No device found"
_SOCKET_USING = re.compile(r"NET/Socket : Using \[0\](?P<interface>[^:\s]+):")
_NRANKS = re.compile(r"\bnranks (?P<nranks>\d+)\b")
_LOOPBACK = "lo"
_PROVIDER = re.compile(r"NET/OFI Selected provider is (?P<provider>[\w;.-]+)", re.IGNORECASE)
_TCP_PROVIDERS = ("tcp", "sockets", "udp")
_NNODES = re.compile(r"\bnNodes (?P<nodes>\d+)\b")
_HOST = re.compile(r"^(?P<host>[^\s:]+):\d+:\d+ \[\d+\]")  # NCCL's "host:pid:tid [device]"
_PLUGIN_FAILED = re.compile(r"NET/\w+ .*(?:initialization failed|Initializing plugin failed)", re.IGNORECASE)


class _Seen:
    """What a log's NCCL lines said, the latest of each kind."""

    def __init__(self, messages: Iterable[str]) -> None:
        self.using: str | None = None
        self.channel: str | None = None
        self.provider: str | None = None
        self.ports: set[str] = set()
        self.no_ib = False
        self.sockets: set[str] = set()  # the interfaces NET/Socket lists
        self.nranks: set[int] = set()
        self.nodes: set[int] = set()  # the nNodes of each communicator
        self.hosts: set[str] = set()
        for message in messages:
            self._read(message)

    def _read(self, message: str) -> None:
        if "NCCL" not in message and "NET/" not in message:
            return
        if match := _HOST.match(message):
            self.hosts.add(match["host"])
        if match := _USING.search(message):
            self.using = match["name"]
        elif _CHANNEL.search(message) and (match := _VIA_NET.search(message)):
            self.channel = match["name"].strip()
        elif match := _PROVIDER.search(message):
            self.provider = match["provider"].lower().split(";")[0]
        elif _PLUGIN_FAILED.search(message):
            self.provider = None  # loaded, then failed: not used
        elif _IB_DEVICES.search(message):
            self.ports |= {port["kind"] for port in _PORT.finditer(message)}
            self.no_ib |= _NO_IB in message
        elif match := _SOCKET_USING.search(message):
            self.sockets.add(match["interface"])
        if match := _NRANKS.search(message):
            self.nranks.add(int(match["nranks"]))
        if match := _NNODES.search(message):
            self.nodes.add(int(match["nodes"]))

    def libfabric(self) -> str | None:
        if self.provider == "efa":
            return EFA
        return SOCKET if self.provider in _TCP_PROVIDERS else None

    def ib(self) -> str:
        return ROCE if self.ports == {"RoCE"} else IB

    def loaded(self) -> str | None:
        """The network the lines NCCL prints when it loads one point to."""
        if self.provider == "efa":
            return EFA
        if self.ports:
            return self.ib()
        if self.no_ib and self.sockets - {_LOOPBACK}:
            return SOCKET
        return None

    def transport(self, one_node_job: bool = True) -> str | None:
        if self.nodes == {1} and one_node_job and len(self.hosts) == 1:
            return NO_NETWORK
        if self.nranks == {1} or (self.sockets == {_LOOPBACK} and not self.ports):
            return None  # nothing goes between nodes
        name = self.using or self.channel
        if name is None:
            return self.loaded()
        if name.startswith("IB"):
            return self.ib()
        if name == "Socket":
            return SOCKET
        if "Libfabric" in name or "OFI" in name:
            return self.libfabric()
        return None


def nccl_transport(text: str) -> str | None:
    """ "IB", "RoCE", "EFA" or "Socket" as NCCL's lines in ``text`` show it, "none" when every communicator
    spans one node, or None when they show no network (no NCCL lines, or a network this module does not
    classify)."""
    return _Seen(line.message for line in lines(text)).transport()


def transports_by_node(texts: Mapping[str, str]) -> dict[str, str | None]:
    """Each node's transport, from its log text (the texts of all the job's nodes)."""
    one_node_job = len(texts) == 1
    return {
        node: _Seen(line.message for line in lines(text)).transport(one_node_job)
        for node, text in texts.items()
    }


def _names(nodes: Iterable[str]) -> str:
    return ", ".join(sorted(nodes))


def transport_findings(by_node: Mapping[str, str | None], multi_node_gpu_job: bool) -> list[str]:
    """Warnings about ``by_node`` (node → transport, None where unknown): some nodes on sockets while
    others use IB, RoCE or EFA; every node on sockets in a job with GPUs on several nodes."""
    sockets = [node for node, transport in by_node.items() if transport == SOCKET]
    fast = {node: transport for node, transport in by_node.items() if transport in FAST}
    if sockets and fast:
        kinds = "/".join(sorted(set(fast.values())))
        return [
            f"NCCL fell back to sockets (TCP) on {_names(sockets)} while {_names(fast)} use {kinds}: "
            "collectives run at the slowest node's speed; check the IB/EFA devices and NCCL_* settings there"
        ]
    if sockets and multi_node_gpu_job:
        return [
            f"NCCL uses sockets (TCP) between nodes on {_names(sockets)} and IB, RoCE or EFA nowhere: a "
            "multi-node GPU job at TCP speed; check that the job sees the RDMA devices (NCCL_IB_HCA, "
            "the container's devices, the EFA plugin)"
        ]
    return []
