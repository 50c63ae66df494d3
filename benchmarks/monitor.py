"""Monitor benchmark: one scrape-and-parse cycle of RayGpuMonitor over many nodes' metrics endpoints.

A separate process serves N endpoints on 127.0.0.1, each ~250 KB of text in Ray's format (a recorded
Ray 2.60 node's endpoint plus 8 GPUs); this process times RayGpuMonitor.collect_once() over all of them,
and, for comparison, prometheus_client's parser over a whole page, which the monitor avoids by handing
it only the lines of the metrics it reads. Target: 128 endpoints in < 1 s on 2 cores.

    python benchmarks/monitor.py [--endpoints 128] [--repeats 5]
"""

import argparse
import multiprocessing
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from raysub.gpu_monitor import RayGpuMonitor  # noqa: E402
from raysub.protocol.readings import GIB, parse_node_metrics  # noqa: E402
from tests.support.ray_metrics import Gpu, exposition, serve  # noqa: E402

TARGET_BYTES = 250_000


def page(node: int) -> bytes:
    gpus = tuple(Gpu(str(i), "NVIDIA H100 80GB HBM3", 50.0 + i, 40960, 40960) for i in range(8))
    text = exposition(f"10.0.{node // 256}.{node % 256}", 12.5, 64 * GIB, 2048 * GIB, gpus)
    # Pad with the recorded families repeated, as a busier node's endpoint would be, to ~250 KB.
    filler = [line for line in text.splitlines(keepends=True) if not line.startswith("ray_node_")]
    while len(text) < TARGET_BYTES:
        text += "".join(filler)[: TARGET_BYTES - len(text)].rsplit("\n", 1)[0] + "\n"
    return text.encode()


def serve_endpoints(count: int, urls: "multiprocessing.Queue[list[str]]") -> None:
    """In a process of its own, so serving does not share this one's interpreter lock."""
    body = page(0).decode()
    with serve({f"node{k:04d}": lambda: body for k in range(count)}) as served:
        urls.put(list(served.values()))
        threading.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--endpoints", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    queue: multiprocessing.Queue[list[str]] = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve_endpoints, args=(args.endpoints, queue), daemon=True)
    server.start()
    urls = {f"node{k:04d}": url for k, url in enumerate(queue.get(timeout=60))}
    text = page(0).decode()

    parse = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        node = parse_node_metrics(text)
        parse.append(time.perf_counter() - started)
    assert len(node.gpus) == 8
    whole = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        list(text_string_to_metric_families(text))
        whole.append(time.perf_counter() - started)

    monitor = RayGpuMonitor(timeout=10.0, endpoints=lambda: urls)
    cycles = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        nodes = monitor.collect_once()
        cycles.append(time.perf_counter() - started)
        assert len(nodes) == args.endpoints and not monitor.failed, monitor.failed
    monitor.stop()
    server.terminate()

    rows = [
        (f"parse one endpoint ({len(text) // 1000} KB)", parse),
        ("prometheus_client, whole endpoint unfiltered", whole),
        (f"one cycle, {args.endpoints} endpoints", cycles),
    ]
    print(f"{'what':<48} {'median s':>9} {'max s':>7}")
    for title, times in rows:
        print(f"{title:<48} {statistics.median(times):>9.4f} {max(times):>7.4f}")
    cores = multiprocessing.cpu_count()
    print(f"target: one cycle over 128 endpoints < 1 s on 2 cores (this machine: {cores} cores)")


if __name__ == "__main__":
    main()
