"""A stand-in for the ray package in bats tests: only what raysub's node programs import (ray._raylet)."""
