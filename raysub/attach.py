"""Which node of a running job to open a shell on, and the srun that does it."""

from raysub import protocol
from raysub.jobs import Job, JobNotFound
from raysub.slurm import attach_command


def target_node(job: Job, node: str | None, worker: int | None) -> str:
    """``node`` itself, else the node of worker ``worker`` (from nodes.tsv), else the head's."""
    if node is not None:
        return node
    role, index = (protocol.ROLE_WORKER, worker) if worker is not None else (protocol.ROLE_HEAD, 0)
    for entry in job.logs.node_map():
        if (entry.role, entry.index) == (role, index):
            return entry.node
    name = f"worker {worker}" if worker is not None else "head"
    raise JobNotFound(f"job {job.job_id} has no {name} in {job.logs.file(protocol.NODE_MAP)}")


def command(job: Job, node: str | None, worker: int | None, argv: list[str]) -> list[str]:
    """The srun command line that attaches to the chosen node, in the job's container if it has one."""
    return attach_command(job.job_id, target_node(job, node, worker), job.logs.container_args(), argv)
