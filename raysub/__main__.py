"""``python -m raysub``: the same as the ``raysub`` command."""

from raysub.cli import main

main()
