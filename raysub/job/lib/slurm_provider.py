"""The node provider of Ray's autoscaler for a raysub job (--autoscale), run by Ray's monitor on the head.

Ray's autoscaler (v1, StandardAutoscaler: the default of Ray 2.49 to 2.60) asks it to list, create and end
nodes. A node it creates is a grow job of one node: LOG_DIR/grow.sub through sbatch, whose Ray node carries
the resource NODE_ID_AS_RESOURCE = its job id (grow.sub sets RAY_OVERRIDE_RESOURCES), by which the
autoscaler (use_node_id_as_ip) tells it apart. Ending one is scancel: the autoscaler has drained an idle node
in Ray before. The job's own nodes and those of raysub grow are listed as Ray has them, the head as the head
and the others as unmanaged: the autoscaler counts what they hold, and never starts or ends one.

Ray's GCS is asked at each of the autoscaler's updates (every 5 s, on the head); Slurm at most every
--slurm-look seconds, one squeue for all the job's grow jobs (by their job name). What it does is said in
LOG_DIR/autoscale.log.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.autoscaler.node_launch_exception import NodeLaunchException
from ray.autoscaler.node_provider import NodeProvider
from ray.autoscaler.tags import (
    NODE_KIND_HEAD,
    NODE_KIND_UNMANAGED,
    NODE_KIND_WORKER,
    STATUS_SETTING_UP,
    STATUS_UP_TO_DATE,
    TAG_RAY_NODE_KIND,
    TAG_RAY_NODE_NAME,
    TAG_RAY_NODE_STATUS,
    TAG_RAY_USER_NODE_TYPE,
)

from raysub import protocol
from raysub.job.lib import gcs
from raysub.protocol import grow_jobs
from raysub.protocol.grow_jobs import GrowMark

HEAD_TYPE = protocol.AUTOSCALE_HEAD_TYPE
JOB_TYPE = protocol.AUTOSCALE_JOB_TYPE
GROW_TYPE = protocol.AUTOSCALE_GROW_TYPE
SLURM_TIMEOUT_S = 60  # a slow controller: an autoscaler update waits this long at most
# What a grow job's environment holds besides the job's --env values and step_env: sbatch run here would
# otherwise hand it the head step's SLURM_* (another job's sizes and ids) and Ray's own variables.
# SLURM_CONF is where Slurm's commands find the cluster, no job's property.
KEPT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "SLURM_CONF")

logger = logging.getLogger(__name__)


@dataclass
class _Grow:
    mark: GrowMark
    tags: dict[str, str]
    reason: str = ""  # Slurm's pending reason, as last said


def _worker_tags(job_id: str, tags: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **(tags or {}),
        TAG_RAY_NODE_KIND: NODE_KIND_WORKER,
        TAG_RAY_USER_NODE_TYPE: GROW_TYPE,
        TAG_RAY_NODE_NAME: job_id,
        TAG_RAY_NODE_STATUS: STATUS_SETTING_UP,
    }


class SlurmNodeProvider(NodeProvider):
    """Nodes as grow jobs of one node each (the provider's node id: the job id)."""

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self.log_dir = Path(provider_config["log_dir"])
        self.job_name = str(provider_config["job_name"])
        self.partitions = [str(p) for p in provider_config.get("partitions", [])]
        self.queue_timeout = float(provider_config["queue_timeout"])
        self.slurm_look = float(provider_config["slurm_look"])
        self.env_names = [str(name) for name in provider_config.get("env_names", [])]
        self.exclusive = bool(provider_config.get("exclusive"))
        self.hosts: set[str] = set()  # the nodes in Ray, by Slurm's name (ray start --node-name)
        self.client = gcs.connect(str(provider_config["address"]))
        self.lock = threading.RLock()
        self.grows = {
            mark.job_id: _Grow(mark, _worker_tags(mark.job_id))
            for mark in grow_jobs.read_all(self.log_dir)
            if mark.by == "autoscale"
        }
        self.queue: dict[str, tuple[str, str]] = {}  # job id: Slurm's state and reason, from the last look
        self.looked = 0.0  # when Slurm was last asked (0: never)
        self.nodes: dict[str, dict[str, str]] = {}

    # --- what Ray's autoscaler calls ---

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        with self.lock:
            self._refresh()
            return [
                node_id
                for node_id, tags in self.nodes.items()
                if all(tags.get(key) == value for key, value in tag_filters.items())
            ]

    def is_running(self, node_id: str) -> bool:
        with self.lock:
            return self.nodes.get(node_id, {}).get(TAG_RAY_NODE_STATUS) == STATUS_UP_TO_DATE

    def is_terminated(self, node_id: str) -> bool:
        with self.lock:
            return node_id not in self.nodes and node_id not in self.grows

    def node_tags(self, node_id: str) -> dict[str, str]:
        with self.lock:
            grow = self.grows.get(node_id)
            return dict(grow.tags if grow else self.nodes.get(node_id, {}))

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        with self.lock:
            if node_id in self.grows:
                self.grows[node_id].tags.update(tags)

    def internal_ip(self, node_id: str) -> str:
        # use_node_id_as_ip: Ray's monitor keys a node by its NODE_ID_AS_RESOURCE, else by its node id.
        return node_id

    def external_ip(self, node_id: str) -> str:
        return node_id

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        for _ in range(count):
            job_id = self._submit()
            with self.lock:
                mark = GrowMark(job_id, 1, "autoscale", time.time())
                grow_jobs.write(self.log_dir, mark)
                self.grows[job_id] = _Grow(mark, _worker_tags(job_id, tags))
            self._say(f"grow job {job_id} submitted: Ray's autoscaler asked for a node")

    def terminate_node(self, node_id: str) -> None:
        with self.lock:
            if node_id not in self.grows:
                logger.warning("raysub: node %s is not a grow job of the autoscaler's; left alone", node_id)
                return
            self._cancel(node_id, "released by Ray's autoscaler (idle, or past its most nodes)")

    # --- Slurm and Ray ---

    def _refresh(self) -> None:
        """self.nodes anew: Ray's nodes, and the grow jobs still in Slurm's queue or in Ray."""
        now = time.time()
        try:
            infos = list(self.client.get_all_node_info(timeout=gcs.GCS_TIMEOUT_S).values())
        except Exception as error:  # the GCS's own errors: keep what was known, look again next update
            logger.warning("raysub: Ray's node table could not be read: %s", error)
            return
        in_ray: set[str] = set()
        nodes: dict[str, dict[str, str]] = {}
        alive = [info for info in infos if info.state == gcs.ALIVE]
        self.hosts = {info.node_name for info in alive}
        for info in alive:
            grown = info.resources_total.get(protocol.NODE_ID_RESOURCE)
            if grown is not None:
                in_ray.add(str(int(grown)))
                continue
            head = bool(info.is_head_node)
            nodes[info.node_id.hex()] = {
                TAG_RAY_NODE_KIND: NODE_KIND_HEAD if head else NODE_KIND_UNMANAGED,
                TAG_RAY_USER_NODE_TYPE: HEAD_TYPE if head else JOB_TYPE,
                TAG_RAY_NODE_STATUS: STATUS_UP_TO_DATE,
                TAG_RAY_NODE_NAME: info.node_name,
            }
        if self.grows and now - self.looked >= self.slurm_look:
            self._look_at_slurm(now)
        for job_id, grow in list(self.grows.items()):
            if self._keep(job_id, grow, job_id in in_ray, now):
                nodes[job_id] = grow.tags
        self.nodes = nodes

    def _keep(self, job_id: str, grow: _Grow, in_ray: bool, now: float) -> bool:
        """Whether grow job ``job_id`` is still a node of the cluster (waiting, starting or in Ray)."""
        state, reason = self.queue.get(job_id, ("", ""))
        if not in_ray and not state and grow.mark.submitted < self.looked:
            self._forget(job_id, "has left Slurm's queue")
            return False
        if in_ray and grow.tags[TAG_RAY_NODE_STATUS] != STATUS_UP_TO_DATE:
            self._say(f"grow job {job_id} is in Ray")
        grow.tags[TAG_RAY_NODE_STATUS] = STATUS_UP_TO_DATE if in_ray else STATUS_SETTING_UP
        if state == "PENDING" and reason != grow.reason:
            grow.reason = reason
            self._say(f"grow job {job_id} waits in Slurm's queue: {reason}")
        if state == "PENDING" and now - grow.mark.submitted > self.queue_timeout:
            self._cancel(job_id, f"waited in the queue past --autoscale-queue-timeout ({grow.reason})")
            return False
        return True

    def _look_at_slurm(self, now: float) -> None:
        argv = [
            "squeue",
            "--noheader",
            f"--name={self.job_name}",
            f"--user={os.getuid()}",
            "--format=%i|%T|%r",
        ]
        try:
            said = subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, check=True)
        except (OSError, subprocess.SubprocessError) as error:
            logger.warning("raysub: squeue failed (%s); grow jobs are looked at again later", error)
            return
        queue = {}
        for line in said.stdout.splitlines():
            job_id, _, rest = line.strip().partition("|")
            state, _, reason = rest.partition("|")
            if state and state != "COMPLETING":  # a completing job's node is leaving
                queue[job_id] = (state, reason)
        self.queue, self.looked = queue, now

    def _submit(self) -> str:
        """Submits one grow job; its job id. NodeLaunchException when sbatch says no."""
        grow_dir = grow_jobs.grow_directory(self.log_dir)
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={self.job_name}",
            "--nodes=1",
            f"--output={grow_dir}/%j.out",
        ]
        if self.partitions:
            argv.append(f"--partition={','.join(self.partitions)}")
        # Whole nodes as the job has them; on shared nodes, none that is in the cluster already (two of its
        # Ray nodes on one host would share the host's name).
        if self.exclusive:
            argv.append("--exclusive")
        elif self.hosts:
            argv.append(f"--exclude={','.join(sorted(self.hosts))}")
        argv.append(str(self.log_dir / protocol.GROW_SCRIPT))
        env = {name: os.environ[name] for name in (*KEPT_ENV, *self.env_names) if name in os.environ}
        env[protocol.ENV_GROWN_LOG_DIR] = str(self.log_dir)
        try:
            said = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as error:
            said = subprocess.CompletedProcess(argv, 1, "", str(error))
        job_id = said.stdout.strip().split(";")[0]
        if said.returncode or not job_id.isdigit():
            why = (said.stderr.strip().splitlines() or [f"status {said.returncode}"])[-1]
            self._say(f"a grow job could not be submitted: {why}")
            raise NodeLaunchException("sbatch refused a grow job", why, None)
        return job_id

    def _cancel(self, job_id: str, why: str) -> None:
        try:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=SLURM_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError) as error:
            logger.warning("raysub: scancel %s failed: %s", job_id, error)
        self._forget(job_id, f"cancelled: {why}")

    def _forget(self, job_id: str, why: str) -> None:
        self.grows.pop(job_id, None)
        self.nodes.pop(job_id, None)
        self._say(f"grow job {job_id} {why}")

    def _say(self, text: str) -> None:
        logger.info("raysub: %s", text)
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n"
        try:
            path = self.log_dir / protocol.AUTOSCALE_LOG
            with protocol.create(path, protocol.log_file_mode(self.log_dir)) as out:
                out.write(line)
        except OSError as error:
            logger.warning("raysub: %s could not be written: %s", protocol.AUTOSCALE_LOG, error)
