"""raysub: Ray on Slurm that comes up in seconds, fails loudly, and shows what the GPUs are doing."""

__version__ = "0.1.0"
