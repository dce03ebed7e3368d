"""The checkout itself: no file left with a merge's conflict markers (a half-resolved merge once reached main
with docs/bridge.md split in two)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)
TEXT = {".py", ".md", ".c", ".h", ".toml", ".txt", ".yaml", ".yml", ".cfg", ".sh"}


def test_no_file_holds_merge_conflict_markers():
    places = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if path.suffix not in TEXT or not path.is_file() or parts[0].startswith(".") or "runs" in parts[:1]:
            continue
        text = path.read_text(errors="replace")
        places += [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}" for m in MARKER.finditer(text)]
    assert not places, f"merge conflict markers left in {places}"
