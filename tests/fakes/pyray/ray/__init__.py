"""A stand-in for the ray package in bats tests: what raysub's node programs import (ray._raylet), and an
``init`` for drivers, which says that it connected and returns."""

from typing import Any


def init(*args: Any, **kwargs: Any) -> None:
    print("ray.init connected", flush=True)
