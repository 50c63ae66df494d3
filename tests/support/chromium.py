"""Render a local HTML page with Debian's headless Chromium: a screenshot, and the URLs it fetched."""

import json
import re
import subprocess
from pathlib import Path

from PIL import Image

from tests.support.prereq import tool


def render_page(page: Path, out: Path, width: int = 1000, height: int = 2000) -> tuple[Image.Image, set[str]]:
    """Screenshot of ``page`` and the http(s)/ws URLs Chromium's net log shows it requesting."""
    chromium = tool("chromium-headless-shell")
    shot, netlog = out / f"{page.stem}.png", out / f"{page.stem}.netlog.json"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},{height}", f"--screenshot={shot}", f"--log-net-log={netlog}", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    requested = set()
    for event in json.loads(netlog.read_text()).get("events", []):
        for value in event.get("params", {}).values():
            if isinstance(value, str) and re.match(r"(https?|wss?)://", value):
                requested.add(value)
    return Image.open(shot).convert("RGB"), requested


def dump_dom(page: Path) -> str:
    """The DOM of ``page`` as Chromium built it, serialized (what it parsed, not the file's text)."""
    chromium = tool("chromium-headless-shell")
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


def pixels_of(image: Image.Image, color: str) -> int:
    """How many pixels are exactly ``color`` (#rrggbb)."""
    rgb = tuple(int(color[k : k + 2], 16) for k in (1, 3, 5))
    return sum(count for count, pixel in image.getcolors(maxcolors=1 << 24) or [] if pixel == rgb)
