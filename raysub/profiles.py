"""Profiles: named option defaults in raysub.toml, so a lab sets partition, account and container once.

    # ./raysub.toml, or ~/.config/raysub/raysub.toml ($XDG_CONFIG_HOME)
    [profiles.mylab]
    partition = "batch"
    account = "ml-infra"
    container-image = "nvcr.io/nvidia/pytorch:25.01-py3"
    env = ["HF_HOME=/lustre/hf"]

The first file that defines the profile wins. Keys are the options' names as on the command line
(sbatch-arg, repeated ones as a list), with - or _; a value starting with ~ is taken from the home
directory, as the shell would on the command line.
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


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at ``path``; every way it can be unreadable is one ProfileError naming it."""
    try:
        text = path.read_bytes().decode()
    except OSError as error:
        raise ProfileError(f"{path}: cannot read it: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise ProfileError(
            f"{path}: not UTF-8 text, as TOML must be (byte {error.object[error.start]:#04x} at offset "
            f"{error.start})"
        ) from error
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ProfileError(f"{path}: {error}") from error


def load_profile(name: str, paths: list[Path] | None = None) -> tuple[dict[str, Any], Path]:
    """The profile's option values keyed by option name with underscores, and the file it came from."""
    paths = search_path() if paths is None else paths
    for path in paths:
        if not path.is_file():
            continue
        data = read_toml(path)
        profiles = data.get("profiles", {})
        if not isinstance(profiles, dict):
            raise ProfileError(f"{path}: profiles must be a table of profiles ([profiles.NAME])")
        profile = profiles.get(name)
        if profile is None:
            continue
        if not isinstance(profile, dict):
            raise ProfileError(f"{path}: profiles.{name} must be a table")
        return {key.replace("-", "_"): value for key, value in profile.items()}, path
    raise ProfileError(f"no profile {name!r} in {' or '.join(str(p) for p in paths)}")


def profile_names(paths: list[Path] | None = None) -> list[str]:
    """The names of the profiles in the files of ``paths`` (default: the search path), for shell
    completion; a file that cannot be read adds none."""
    names: list[str] = []
    for path in search_path() if paths is None else paths:
        try:
            profiles = read_toml(path).get("profiles", {}) if path.is_file() else {}
        except ProfileError:
            continue
        if isinstance(profiles, dict):  # else not a table of profiles: load_profile says so
            names += [name for name in profiles if name not in names]
    return names
