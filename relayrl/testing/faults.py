"""Process deaths at chosen instants, for tests that check a run survives them (importable by a fork server).

``train_until_write(config, run_dir, k)`` trains and SIGKILLs its own process just before the k-th
atomic rename of the run (the temp file written and synced, the rename not done): every instant at
which a run directory changes is one of these. ``writing(pid)`` says whether a process is blocked inside
a write to a full pipe (the moment to kill a sender mid-message).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any


def train_until_write(config_tree: dict[str, Any], run_dir: str, k: int) -> None:
    from relayrl.config import validate
    from relayrl.training.trainer import run_trainer

    config = validate(config_tree["algo"], config_tree)
    renames = {"count": 0}
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        renames["count"] += 1
        if renames["count"] == k:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)

    os.replace = replace  # this process only: it dies at the k-th rename
    run_trainer(config, run_dir=Path(run_dir), quiet=True, tensorboard=False)


def writing(pid: int) -> bool:
    """Some thread of ``pid`` waits inside a write to a full pipe (from /proc: its kernel wait channel)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            wchan = Path(f"/proc/{pid}/task/{tid}/wchan").read_text()
        except OSError:
            continue
        if "pipe_write" in wchan or "pipe_wait" in wchan:
            return True
    return False
