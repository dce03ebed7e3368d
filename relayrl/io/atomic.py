"""Atomic file writes: write a temp file in the same directory, fsync, then rename over the target.

A process killed mid-write leaves its temp file (``.NAME.XXXXXXXX.tmp``) and never a half-written
target; ``remove_stale_temps`` clears those once no process is writing the folder. The target gets the
mode a plain ``open(path, "w")`` would give it (0666 less the umask), not mkstemp's private 0600.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # mkstemp(prefix=".NAME.", suffix=".tmp") below


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process's umask, read without changing it (``os.umask`` can only set it, which would briefly
    give files other threads create mode 0666)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # no /proc (not Linux): set and restore
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def remove_stale_temps(folder: Path) -> list[Path]:
    """Delete the temp files an interrupted ``atomic_write_bytes`` left in ``folder``; return their paths.

    Only call it when no process is writing the folder (a run's lock is free): a live writer's temp
    file has the same name pattern.
    """
    folder = Path(folder)
    removed = []
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if _TEMP.match(path.name) and path.is_file():
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
