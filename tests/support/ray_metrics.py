"""Ray's metrics endpoint text for tests and benchmarks, in the exact format Ray 2.60 serves.

tests/fixtures/ray_node_metrics.txt is one CPU node's endpoint as recorded from Ray 2.60 (861 lines,
~230 KB). No GPU exists here, so GPU families are written the way Ray's reporter agent exports them:
the same label set as the node's own metrics plus GpuDeviceName, GpuIndex and GpuUuid; 1 per GPU in
ray_node_gpus_available; utilisation in percent (-1 when the device does not report it); memory in MiB
under a gauge declared as bytes.

tests/fixtures/ray_2.49_h200_node_metrics.txt is an 8-GPU H200 node's endpoint in the format of Ray 2.49
(its reporter agent's labels: no RayNodeType, no GpuUuid; exported through OpenCensus, so no otel_scope
labels), shortened, with what such nodes were seen to serve: ray_node_gpus_available for every GPU and no
utilisation or GPU memory sample at all.
"""

import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "ray_node_metrics.txt"
H200_RAY_2_49 = RECORDED.with_name("ray_2.49_h200_node_metrics.txt")
RECORDED_IP = "192.0.2.2"
OTEL = (
    'otel_scope_name="ray._private.telemetry.open_telemetry_metric_recorder",'
    'otel_scope_schema_url="",otel_scope_version=""'
)


@dataclass(frozen=True)
class Gpu:
    """One GPU's samples; None leaves a sample out (its ray_node_gpus_available is always there)."""

    index: str
    name: str
    util: float | None
    used_mib: float | None
    available_mib: float | None


def labels(ip: str, extra: str = "") -> str:
    head = 'IsHeadNode="false",RayNodeType="worker",SessionName="session_2026-11-22_07-39-12_887434_32255"'
    return f'{{{extra}{head},Version="2.60.0",ip="{ip}",{OTEL}}}'


def gauge(name: str, help_text: str, lines: list[str]) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n" + "".join(f"{line}\n" for line in lines)


def exposition(
    ip: str, cpu: float, mem_used: float, mem_total: float, gpus: tuple[Gpu, ...] = (), padding: bool = True
) -> str:
    """One node's endpoint: the recorded text (with ``ip``) minus its own readings, plus these."""
    text = ""
    if padding:
        ours = ("ray_node_cpu_utilization", "ray_node_mem_used{", "ray_node_mem_total{")
        recorded = RECORDED.read_text().replace(f'ip="{RECORDED_IP}"', f'ip="{ip}"')
        text = "".join(line for line in recorded.splitlines(keepends=True) if not line.startswith(ours))
    text += gauge(
        "ray_node_cpu_utilization",
        "Total CPU usage on a ray node",
        [f"ray_node_cpu_utilization{labels(ip)} {cpu}"],
    )
    text += gauge(
        "ray_node_mem_used", "Memory usage on a ray node", [f"ray_node_mem_used{labels(ip)} {mem_used}"]
    )
    text += gauge(
        "ray_node_mem_total", "Total memory on a ray node", [f"ray_node_mem_total{labels(ip)} {mem_total}"]
    )

    def gpu_labels(gpu: Gpu) -> str:
        uuid = f"GPU-{int(gpu.index):08x}-0000-0000-0000-000000000000"
        return labels(ip, f'GpuDeviceName="{gpu.name}",GpuIndex="{gpu.index}",GpuUuid="{uuid}",')

    for name, help_text, value in (
        ("ray_node_gpus_available", "Total GPUs available on a ray node", None),
        ("ray_node_gpus_utilization", "Total GPUs usage on a ray node", "util"),
        ("ray_node_gram_used", "Total GPU RAM usage on a ray node", "used_mib"),
        ("ray_node_gram_available", "Total GPU RAM available on a ray node", "available_mib"),
    ):
        values = [(g, 1 if value is None else getattr(g, value)) for g in gpus]
        if samples := [f"{name}{gpu_labels(g)} {v}" for g, v in values if v is not None]:
            text += gauge(name, help_text, samples)
    return text


@contextmanager
def serve(pages: dict[str, Callable[[], str]]) -> Iterator[dict[str, str]]:
    """One local HTTP server per page on 127.0.0.1; yields page name -> its /metrics URL."""
    servers = []

    def handler_for(page: Callable[[], str]) -> type[http.server.BaseHTTPRequestHandler]:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = page().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        return Handler

    urls = {}
    for name, page in pages.items():
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(page))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        urls[name] = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        yield urls
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
