"""Metrics sinks: one JSON object per line in metrics.jsonl, and TensorBoard event files.

Every event carries ``event`` (its kind), ``env_steps`` and ``wall_time_s``; other keys are
``group/name`` scalars that become TensorBoard tags as they are.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class MetricsLogger:
    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = open(self.path, "a", buffering=1)  # line-buffered: a crash loses no logged line
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(logdir=str(run_dir), flush_secs=10)

    def log(self, event: str, env_steps: int, wall_time_s: float, values: dict[str, Any]) -> None:
        record = {"event": event, "env_steps": int(env_steps), "wall_time_s": round(wall_time_s, 4)}
        values = {key: _jsonable(value) for key, value in values.items()}
        record.update(values)
        self._file.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):  # None: non-finite
                    self._tb.add_scalar(key, value, env_steps)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All events of a run, skipping a torn last line (a run killed mid-write)."""
    path = Path(run_dir) / "metrics.jsonl"
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events
