"""Adapters that report a trainer's step to raysub (raysub.trainer) from the hooks the stacks have; each
imports only its own stack, so any one works without the others installed."""
