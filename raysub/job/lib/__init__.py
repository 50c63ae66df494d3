"""What the node programs share (the nvidia-smi parser, Ray's node tables, waits, bounded runs, the unit
counter, the metrics scraper, the checkpoint finder); the submit host may use them too. Imports nothing of
raysub but raysub.protocol.
"""
