"""Programs and helpers that run on the job's nodes, with the Python that has Ray.

The batch script ships these modules into LOG_DIR (with raysub/__init__.py, raysub/protocol.py and
raysub/monitor.py, which they use) and the node scripts run them as ``python -m raysub.node.<program>``
with LOG_DIR's copy first on PYTHONPATH: a node needs Ray, not raysub. So every module shipped imports
only the standard library, ray, prometheus_client (which ray[default] brings) and the other shipped
modules, and keeps to the oldest Python Ray supports (3.9); tests/unit/test_node_package.py checks both.
The one exception is torch, which the smoke test's all-reduce (smoke.py) imports inside the function
that uses it, where it is installed; without it that part is skipped.
"""
