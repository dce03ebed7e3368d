"""Process deaths at chosen instants, for tests that check a run survives them (importable by a fork server).

``train_until_write(config, run_dir, k)`` trains and SIGKILLs its own process just before the k-th
atomic rename of the run (the temp file written and synced, the rename not done): every instant at
which a run directory changes is one of these.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any


def train_until_write(config_tree: dict[str, Any], run_dir: str, k: int) -> None:
    from relayrl.config import validate
    from relayrl.training.trainer import train

    config = validate(config_tree["algo"], config_tree)
    renames = {"count": 0}
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        renames["count"] += 1
        if renames["count"] == k:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)

    os.replace = replace  # this process only: it dies at the k-th rename
    train(config, run_dir=Path(run_dir), quiet=True, tensorboard=False)
