"""Drive scripts/minicluster from tests: bring it up, submit jobs, wait for them, count their steps."""

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.prereq import REPO

SCRIPT = REPO / "scripts" / "minicluster"
NETNS_PREFIX = "rsmc-node"


@dataclass(frozen=True)
class JobResult:
    job_id: int | str
    state: str
    exit_code: int
    signal: int


@dataclass(frozen=True)
class Leftover:
    netns: str
    pid: int
    cmdline: str


def unavailable_reason() -> str | None:
    """Why the minicluster cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, slurmd)"
    if sys.platform != "linux":
        return "needs Linux network namespaces"
    return None


class MiniCluster:
    """A running minicluster and the Slurm client environment that talks to it."""

    def __init__(self, run_dir: Path, nodes: int = 4, pin: bool = False) -> None:
        self.run_dir = run_dir
        self.nodes = nodes
        self.pin = pin  # each node on a CPU of its own (scripts/minicluster up --pin)
        self.env = dict(os.environ)
        self.env["MINICLUSTER_DIR"] = str(run_dir)
        self.env["SLURM_CONF"] = str(run_dir / "etc" / "slurm.conf")
        # Jobs inherit this environment: put this interpreter's ray and python first on PATH.
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 120,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with the cluster's environment, plus ``env``, in ``cwd`` (default: this one)."""
        return subprocess.run(
            args,
            env={**self.env, **(env or {})},
            check=check,
            text=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            cwd=cwd,
        )

    def script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = self.run(str(SCRIPT), *args, check=False, timeout=300)
        if check and done.returncode != 0:  # what went wrong is on its stderr: say it
            raise RuntimeError(f"scripts/minicluster {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done

    def up(self) -> None:
        self.script("up", "--nodes", str(self.nodes), *(["--pin"] if self.pin else []))

    def down(self) -> None:
        self.script("down")

    def sbatch(
        self, script: Path, *options: str, script_args: tuple[str, ...] = (), cwd: Path | None = None
    ) -> int:
        """Submit ``script`` with sbatch ``options``; returns the job id."""
        out = subprocess.run(
            ["sbatch", "--parsable", *options, str(script), *script_args],
            env=self.env,
            check=True,
            text=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            cwd=cwd or script.parent,
            timeout=60,
        ).stdout
        return int(out.strip().split(";")[0])

    def is_queued(self, job_id: int | str) -> bool:
        """True while squeue lists the job in any state, COMPLETING included."""
        return bool(self.run("squeue", "-h", "-j", str(job_id), check=False).stdout.strip())

    def wait(self, job_id: int | str, timeout: float = 180) -> JobResult:
        """Wait until the job has left squeue, then read its final state; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        delay = 0.1
        while self.is_queued(job_id):
            if time.monotonic() > deadline:
                self.run("scancel", str(job_id), check=False)
                raise TimeoutError(f"job {job_id} still queued or running after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        return self.job(job_id)

    def cancel_all(self, timeout: float = 120) -> None:
        """Cancel every job in the queue and wait until none is left (a heterogeneous job's
        components, listed as ID+N, go with ID)."""
        listed = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if listed:
            self.run("scancel", *sorted({job.split("+")[0] for job in listed}), check=False)
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still queued {timeout} s after scancel: {listed}")
            time.sleep(0.5)

    def job(self, job_id: int | str) -> JobResult:
        text = self.run("scontrol", "-o", "show", "job", str(job_id)).stdout
        state = re.search(r"\bJobState=(\S+)", text)
        code = re.search(r"\bExitCode=(\d+):(\d+)", text)
        if not state or not code:
            raise ValueError(f"cannot read JobState/ExitCode of job {job_id}: {text!r}")
        return JobResult(job_id, state.group(1), int(code.group(1)), int(code.group(2)))

    def steps(self, job_id: int | str) -> int:
        return int(self.script("steps", str(job_id)).stdout.strip())

    def netns(self) -> list[str]:
        names = self.run("ip", "netns", "list").stdout.split()
        return sorted(n for n in names if n.startswith(NETNS_PREFIX))

    def daemon_pids(self) -> set[int]:
        pids = set()
        for pidfile in (self.run_dir / "run").glob("*.pid"):
            text = pidfile.read_text().strip()
            if text.isdigit():
                pids.add(int(text))
        return pids

    def leftovers(self) -> list[Leftover]:
        """Live processes in the node namespaces other than the slurmd daemons themselves."""
        daemons = self.daemon_pids()
        found = []
        for ns in self.netns():
            for word in self.run("ip", "netns", "pids", ns).stdout.split():
                pid = int(word)
                if pid in daemons:
                    continue
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                except OSError:
                    continue
                if stat.rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # already dead, waiting for its parent (or init) to reap it
                found.append(Leftover(ns, pid, cmd))
        return found

    def wait_no_leftovers(self, timeout: float = 15) -> list[Leftover]:
        """Give exiting processes a moment; return whatever is still there after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def processes(self, node: str) -> dict[int, str]:
        """PID -> command line of every live process on ``node`` (e.g. "node3")."""
        found = {}
        netns = f"{NETNS_PREFIX}{node.removeprefix('node')}"
        for word in self.run("ip", "netns", "pids", netns).stdout.split():
            try:
                cmd = Path(f"/proc/{word}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue
            found[int(word)] = cmd
        return found

    def slurmd_pid(self, node: str) -> int:
        return int((self.run_dir / "run" / f"slurmd-{node}.pid").read_text())

    @staticmethod
    def enter_node_netns(node: str) -> list[str]:
        """The command prefix that runs a command in ``node``'s network namespace (and nothing else)."""
        return ["nsenter", f"--net=/run/netns/{NETNS_PREFIX}{node.removeprefix('node')}"]

    def run_in_node_netns(
        self, node: str, *command: str, env: dict[str, str], timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``command`` to its end in ``node``'s network namespace, with exactly ``env``."""
        return subprocess.run(
            [*self.enter_node_netns(node), *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
            stdin=subprocess.DEVNULL,
        )

    @contextmanager
    def node_netns_process(self, node: str, *command: str) -> Iterator[subprocess.Popen[bytes]]:
        """Runs ``command`` inside ``node``'s network namespace for the duration of the block."""
        proc = subprocess.Popen([*self.enter_node_netns(node), *command], stdin=subprocess.DEVNULL)
        try:
            yield proc
        finally:
            proc.kill()
            proc.wait()

    @contextmanager
    def private_mount(self, node: str, path: Path) -> Iterator[None]:
        """An empty tmpfs over ``path`` that only jobs on ``node`` see (they share its slurmd's mounts)."""
        enter = ["nsenter", f"--target={self.slurmd_pid(node)}", "--mount"]
        self.run(*enter, "mount", "-t", "tmpfs", "raysub-test", str(path))
        try:
            yield
        finally:
            self.run(*enter, "umount", "-l", str(path), check=False)
