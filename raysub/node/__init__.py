"""The programs that run on the job's nodes, with the Python that has Ray.

The batch script ships these modules into LOG_DIR, with raysub/__init__.py and the raysub.protocol package
they import (LOG_DIR's names and formats, and the readers of Ray's own), and the node scripts run them as
``python -m raysub.node.<program>`` with LOG_DIR's copy first on PYTHONPATH: a node needs Ray, not raysub.
So every module shipped imports only the standard library, ray, prometheus_client (which ray[default]
brings), raysub.protocol and the other node programs, and keeps to the oldest Python Ray supports (3.9);
tests/unit/test_node_package.py checks both. Nothing outside this package imports it: the submit host only
ships it (tests/unit/test_house.py). The one exception to the imports is torch, which the smoke test's
all-reduce (smoke.py) imports inside the function that uses it, where it is installed; without it that part
is skipped.
"""
