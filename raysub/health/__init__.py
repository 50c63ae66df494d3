"""Pure text parsers behind ``raysub health``: the latest training step a log shows
(:func:`progress`), the network NCCL uses between nodes (:func:`nccl_transport`) and the lines that
report a failure (:func:`fatal_lines`). The standard library only, so importing them stays cheap.
"""

from raysub.health.fatal import Fatal, fatal_lines
from raysub.health.nccl import nccl_transport
from raysub.health.progress import Progress, progress

__all__ = ["Fatal", "Progress", "fatal_lines", "nccl_transport", "progress"]
