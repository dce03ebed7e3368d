"""The files of bridge channels (docs/bridge-protocol.md §1): the private directory, mapping and
removing a channel's files, its FIFO doorbells, and clearing the channels of dead trainers."""

from __future__ import annotations

import mmap
import os
import stat
import struct
import tempfile
from pathlib import Path

from relayrl.bridge import layout as L
from relayrl.bridge.errors import BridgeError


def bridge_dir(directory: str | os.PathLike | None = None) -> Path:
    """The user-only directory for channels (§1), created 0700 if missing, refused if unsafe."""
    if directory is None:
        directory = os.environ.get("RELAYRL_BRIDGE_DIR")
    if directory is None:
        root = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
        directory = root / f"relayrl-{os.getuid()}"
    path = Path(directory)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise BridgeError(f"bridge directory {path} is owned by uid {info.st_uid} with mode "
                          f"{stat.filemode(info.st_mode)}: it must be yours and 0700 (chmod 700 {path}, or set "
                          "RELAYRL_BRIDGE_DIR to a private directory)")
    return path


def open_fifo(path: Path, flags: int) -> int:
    """A doorbell end, non-blocking and close-on-exec (a child must not keep a dead peer's FIFO open)."""
    return os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # unknown: rely on the doorbell's hang-up and the timeout
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def create_mapped(path: Path, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def release(mapping: mmap.mmap | None) -> None:
    """Unmap now, or when the last numpy view of it is gone (views handed to users keep it alive)."""
    if mapping is None:
        return
    try:
        mapping.close()
    except BufferError:
        pass


def unlink_channel(header_path: Path) -> None:
    """Remove every file of the channel whose header is ``header_path`` (best effort)."""
    folder, name = header_path.parent, header_path.name
    for path in folder.glob(f"{name}*"):
        rest = path.name[len(name):]
        if rest in ("", ".ts", ".st", ".tmp") or (rest[:1] == "." and rest[1:].isdigit()):
            path.unlink(missing_ok=True)


def remove_stale(folder: Path) -> int:
    """Remove the channels in ``folder`` whose trainer process is gone (§1, DOTS checklist A15)."""
    removed = 0
    for header in folder.iterdir():
        if not header.is_file() or "." in header.name:
            continue
        try:
            with open(header, "rb") as f:
                raw = f.read(L.HEADER_SIZE)
        except OSError:
            continue
        if len(raw) != L.HEADER_SIZE or raw[:8] != L.MAGIC:
            continue
        (pid,) = struct.unpack_from("<i", raw, L.OFF_TRAINER_PID)
        if pid > 0 and pid != os.getpid() and not pid_alive(pid):
            unlink_channel(header)
            removed += 1
    return removed


__all__ = ["bridge_dir", "open_fifo", "pid_alive", "create_mapped", "release", "unlink_channel", "remove_stale"]
