"""A rich progress bar: env steps, steps/s, last eval return, ETA. Silent when quiet."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class ProgressDisplay:
    def __init__(self, total_steps: int, title: str, quiet: bool, start: int = 0):
        self._progress = None
        if quiet:
            return
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TextColumn("steps"), TextColumn("{task.fields[sps]:>7.0f} steps/s"),
            TextColumn("eval {task.fields[eval]}"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=Console(stderr=True), refresh_per_second=4)
        self._task = self._progress.add_task(title, total=total_steps, completed=start, sps=0.0, eval="-")
        self._progress.start()

    def update(self, env_steps: int, sps: float, last_eval: float | None) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=env_steps, sps=sps,
                                  eval="-" if last_eval is None else f"{last_eval:.1f}")

    def print(self, message: str) -> None:
        if self._progress is not None:
            self._progress.console.print(message)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
