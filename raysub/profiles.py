"""Profiles: named option defaults in raysub.toml, so a lab sets partition, account and container once.

    # ./raysub.toml, or ~/.config/raysub/raysub.toml ($XDG_CONFIG_HOME)
    [profiles.mylab]
    partition = "batch"
    account = "ml-infra"
    container-image = "nvcr.io/nvidia/pytorch:25.01-py3"
    env = ["HF_HOME=/lustre/hf"]

The first file that defines the profile wins. Keys are option names, with - or _.
"""

import os
import tomllib
from pathlib import Path
from typing import Any

FILE_NAME = "raysub.toml"


class ProfileError(ValueError):
    pass


def search_path() -> list[Path]:
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return [Path.cwd() / FILE_NAME, config_home / "raysub" / FILE_NAME]


def load_profile(name: str, paths: list[Path] | None = None) -> tuple[dict[str, Any], Path]:
    """The profile's option values keyed by option name with underscores, and the file it came from."""
    paths = search_path() if paths is None else paths
    for path in paths:
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as error:
            raise ProfileError(f"{path}: {error}") from error
        profile = data.get("profiles", {}).get(name)
        if profile is None:
            continue
        if not isinstance(profile, dict):
            raise ProfileError(f"{path}: profiles.{name} must be a table")
        return {key.replace("-", "_"): value for key, value in profile.items()}, path
    raise ProfileError(f"no profile {name!r} in {' or '.join(str(p) for p in paths)}")
