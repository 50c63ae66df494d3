"""raysub.health.fatal on failure lines in the formats PyTorch, NCCL, Ray and Python print
(tests/fixtures/logs/ holds longer samples, hand-written in those formats)."""

from pathlib import Path

import pytest

from raysub import health
from raysub.health.fatal import (
    ACTOR_DIED,
    CRASH,
    CUDA_OOM,
    KILLED,
    NCCL_ERROR,
    NCCL_TIMEOUT,
    NODE_DIED,
    TRACEBACK,
    Fatal,
    fatal_lines,
)

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def kinds(text: str) -> list[tuple[str, int]]:
    return [(fatal.kind, fatal.line_number) for fatal in fatal_lines(text)]


TIMEOUT = (
    "[rank3]:[E120 10:11:12.426415540 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective"
    " operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,"
    " Timeout(ms)=600000) ran for 600000 milliseconds before timing out."
)
NCCL_SYSTEM = (
    "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details),"
    " NCCL version 2.19.3"
)
NODE_DEAD = (
    "2025-01-20 10:11:12,741\tWARNING worker.py:1829 -- The node with node id: 5ad7fa5d and address:"
    " 10.0.0.3 and node name: 10.0.0.3 has been marked dead because the detector has missed too many"
    " heartbeats from it."
)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (TIMEOUT, NCCL_TIMEOUT),
        (NCCL_SYSTEM, NCCL_ERROR),
        (
            "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, internal error",
            NCCL_ERROR,
        ),
        ("ncclInternalError: Internal check failed.", NCCL_ERROR),
        ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed", NCCL_ERROR),
        (
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting",
            NCCL_ERROR,
        ),
        ("torch.distributed.DistBackendError: [3] is setting up NCCL communicator", NCCL_ERROR),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total",
            CUDA_OOM,
        ),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", CUDA_OOM),
        ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total)", CUDA_OOM),
        (NODE_DEAD, NODE_DIED),
        (
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
            ACTOR_DIED,
        ),
        ("The actor died because its node has died. Node Id: 5ad7fa5dd64fc1fec7a82cceecabed8e5", NODE_DIED),
        ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.", ACTOR_DIED),
        ("ray.exceptions.NodeDiedError: Task failed because the node it ran on died.", NODE_DIED),
        (
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0",
            KILLED,
        ),
        (
            "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down",
            KILLED,
        ),
        (
            "subprocess.CalledProcessError: Command '['python', 't.py']' died with <Signals.SIGKILL: 9>.",
            KILLED,
        ),
        ("  traceback : Signal 9 (SIGKILL) received by PID 14750", KILLED),  # torchrun's table, indented
        ("Fatal Python error: Segmentation fault", CRASH),
        (
            "/var/spool/slurmd/job12/slurm_script: line 9: 4711 Segmentation fault (core dumped) python t.py",
            CRASH,
        ),
        (
            "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::W.f() (pid=1, ip=10.0.0.2",
            TRACEBACK,
        ),
    ],
)
def test_each_kind(line: str, kind: str) -> None:
    assert fatal_lines(f"starting\n{line}\ndone\n") == [Fatal(kind, line, 2)]


@pytest.mark.parametrize(
    "text",
    [
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",  # host
        "    except torch.OutOfMemoryError:",  # code in a traceback frame, or any indented line
        "NCCL_DEBUG=INFO is set; NCCL version 2.21.5+cuda12.4",
        "Traceback (most recent call last):",  # cut off before its exception
        "x4512c5s2b0n0: rank 11 died from signal 15",  # mpiexec tearing the other ranks down
        # a rank that failed on its own error: its traceback says why
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0",
        "  exitcode  : -9 (pid: 14750)",  # the table's other line: its signal line is the one reported
        "",
    ],
)
def test_not_fatal(text: str) -> None:
    assert fatal_lines(text) == []


def test_a_traceback_reports_the_exception_that_ends_it() -> None:
    text = (
        'Traceback (most recent call last):\n  File "a.py", line 3, in <module>\n    f()\nValueError: bad\n'
    )
    text += "bye\n"
    assert fatal_lines(text) == [Fatal(TRACEBACK, "ValueError: bad", 4)]


def test_python_3_11_carets_and_an_exception_message_on_several_lines() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in <module>\n'
        "    x = table[key]\n"
        "        ~~~~~^^^^^\n"
        "KeyError: 'answer'\n"
        "  which the reward function needs\n"
        "Traceback (most recent call last):\n"
        '  File "b.py", line 1, in <module>\n'
        "AssertionError\n"
    )
    assert kinds(text) == [(TRACEBACK, 5), (TRACEBACK, 9)]


def test_ray_remote_frames_and_chained_exceptions_end_at_the_last_exception() -> None:
    assert kinds((LOGS / "fatal_oom_and_tracebacks.log").read_text()) == [
        (CUDA_OOM, 10),  # the driver's RayTaskError traceback ends here, and is not reported twice
        (CUDA_OOM, 11),  # the worker's own traceback, interleaved with the driver's
        (TRACEBACK, 22),  # KeyError, during whose handling ValueError
    ]


def test_interleaved_ranks_each_end_their_own_traceback() -> None:
    found = fatal_lines((LOGS / "fatal_nccl_timeout.log").read_text())
    assert [(f.kind, f.line_number) for f in found] == [
        (NCCL_TIMEOUT, 1),
        (NCCL_ERROR, 9),  # rank 3's traceback ends with the DistBackendError
        (TRACEBACK, 10),  # rank 1's
        (NCCL_ERROR, 11),
    ]
    assert found[2].line == "[rank1]:RuntimeError: the other rank failed"


def test_ray_node_death_and_its_actor_error_once_each() -> None:
    found = fatal_lines((LOGS / "fatal_ray.log").read_text())
    # The actor error is a node death because its message goes on to say so (line 11).
    assert [(f.kind, f.line_number) for f in found] == [(NODE_DIED, 1), (NODE_DIED, 8)]
    assert found[1].line.startswith("ray.exceptions.ActorDiedError: ")


def test_an_actor_error_is_no_node_death_unless_ray_says_its_node_died() -> None:
    text = (
        "ray.exceptions.RayActorError: The actor died because of an error raised in its creation task\n"
        '  File "w.py", line 3, in __init__\n'
        "ValueError: no such model\n"
        "    The actor died because its node has died.\n"  # another message's, after the error ended
    )
    assert kinds(text) == [(ACTOR_DIED, 1)]  # no "Traceback" header: ValueError ends no traceback


def test_a_bar_glued_before_the_failure_and_blanks_before_a_rank_prefix() -> None:
    text = (
        "Loading checkpoint shards:  57% 4/7 [00:37<00:28,  9.42s/it]ERROR:torch.distributed.elastic."
        "multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 8180) of binary: /usr/bin/python3\n"
        "      [rank0]: Traceback (most recent call last):\n"
        '      [rank0]:   File "train.py", line 5, in <module>\n'
        "      [rank0]: AssertionError: Torch not compiled with CUDA enabled\n"
    )
    found = fatal_lines(text)
    assert [(f.kind, f.line_number) for f in found] == [(KILLED, 1), (TRACEBACK, 4)]
    assert found[1].line == "      [rank0]: AssertionError: Torch not compiled with CUDA enabled"


def test_prefixes_ansi_and_carriage_returns() -> None:
    text = (
        "\x1b[36m(WorkerDict pid=3301, ip=10.0.0.3)\x1b[0m "
        "\x1b[31mtorch.OutOfMemoryError: CUDA out of memory.\x1b[0m\n"
        "\r 12%|█▏        | 120/1000 [01:23<10:00,  1.45it/s]\r[rank0]:RuntimeError: CUDA out of memory.\n"
    )
    assert fatal_lines(text) == [
        Fatal(CUDA_OOM, "(WorkerDict pid=3301, ip=10.0.0.3) torch.OutOfMemoryError: CUDA out of memory.", 1),
        Fatal(CUDA_OOM, "[rank0]:RuntimeError: CUDA out of memory.", 2),
    ]


def test_the_package_re_exports_fatal_lines() -> None:
    assert health.fatal_lines is fatal_lines
    assert health.Fatal is Fatal
