"""Knocks on a job's Ray head from outside the job, as another user on the cluster network would.

Usage: probe_ray.py HEAD_IP CLIENT_PORT DASHBOARD_PORT. With RAY_AUTH_TOKEN_PATH set it knocks with that
token (Ray's client reads it there; the Jobs API request gets it as a Bearer header), else with none.
Prints one JSON object: "dashboard" is the HTTP status of a Jobs API request, "client" is "ran" when a
Ray client ran a task on the cluster, else the error it got.
"""

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import ray

head, client_port, dashboard_port = sys.argv[1:4]
token_path = os.environ.get("RAY_AUTH_TOKEN_PATH")
result: dict[str, object] = {}

request = urllib.request.Request(f"http://{head}:{dashboard_port}/api/jobs/")
if token_path:
    request.add_header("Authorization", f"Bearer {Path(token_path).read_text().strip()}")
try:
    with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310 (an http:// URL built above)
        result["dashboard"] = response.status
except urllib.error.HTTPError as error:
    result["dashboard"] = error.code

try:
    # One connection attempt: a refused client otherwise retries for half a minute.
    ray.util.connect(f"{head}:{client_port}", connection_retries=1)
    result["client"] = ray.get(ray.remote(lambda: "ran").remote(), timeout=60)
except Exception as error:  # what a refused client sees depends on where Ray notices
    result["client"] = f"{type(error).__name__}: {error}"[:500]
print(json.dumps(result), flush=True)
