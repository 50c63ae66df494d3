"""All that becomes a job: the templates, the node programs (programs/, none imports another), what they
share (lib/), the manifest of who runs which program with which arguments, and render, which makes the batch
script of a JobSpec.

The batch script ships the programs a job runs into LOG_DIR, with this file, raysub/__init__.py, the lib/
modules they import and the raysub.protocol package (LOG_DIR's names and formats), and the node scripts run
them as ``python -m raysub.job.programs.<program>`` with LOG_DIR's copy first on PYTHONPATH: a node needs
Ray, not raysub. So every module shipped imports only the standard library, ray, prometheus_client (which
ray[default] brings), raysub.job.lib and raysub.protocol, and keeps to the oldest Python Ray supports (3.9);
tests/unit/test_node_package.py and tests/unit/test_house.py check both. The one exception to the imports is
torch, which the smoke test's all-reduce imports inside the function that uses it, where it is installed.
"""
