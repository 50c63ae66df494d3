"""Waits for 4 alive Ray nodes, runs one task on each and prints their hostnames."""

import socket
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()
deadline = time.monotonic() + 90
while len(alive := [n for n in ray.nodes() if n["Alive"]]) < 4:
    assert time.monotonic() < deadline, f"only {len(alive)} nodes alive"
    time.sleep(0.2)


@ray.remote(num_cpus=1)
def where() -> str:
    return socket.gethostname()


refs = [
    where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
    for n in alive
]
print("alive", len(alive))
print("hosts", " ".join(sorted(ray.get(refs))))
