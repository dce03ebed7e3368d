"""A rich progress bar: env steps toward ``total_steps``, steps/s, the last eval return toward the stop
value, and an ETA that is an upper bound when a stop value may end the run sooner. Silent when quiet."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class ProgressDisplay:
    def __init__(self, total_steps: int, title: str, quiet: bool, start: int = 0, stop_value: float | None = None,
                 console: Console | None = None):
        self._progress = None
        self._stop_value = stop_value
        if quiet:
            return
        eta = "ETA ≤" if stop_value is not None else "ETA"  # the stop value may end the run before total_steps
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TextColumn("steps"), TextColumn("{task.fields[sps]:>7.0f} steps/s"),
            TextColumn("eval {task.fields[eval]}"), TimeElapsedColumn(), TextColumn(eta),
            TimeRemainingColumn(), console=console or Console(stderr=True), refresh_per_second=4)
        self._task = self._progress.add_task(title, total=total_steps, completed=start, sps=0.0,
                                             eval=self._eval_text(None))
        self._progress.start()

    def _eval_text(self, last_eval: float | None) -> str:
        text = "-" if last_eval is None else f"{last_eval:.1f}"
        return text if self._stop_value is None else f"{text} → {self._stop_value:g}"

    def update(self, env_steps: int, sps: float, last_eval: float | None) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=env_steps, sps=sps, eval=self._eval_text(last_eval))

    def print(self, message: str) -> None:
        if self._progress is not None:
            self._progress.console.print(message)

    def close(self, env_steps: int | None = None, last_eval: float | None = None, solved: bool = False) -> None:
        """Draw the final frame (the last steps and eval; a full bar when the stop value was reached), then stop."""
        if self._progress is None:
            return
        if env_steps is not None:
            fields = {"eval": self._eval_text(last_eval) + (" reached" if solved else "")}
            if solved:
                fields["total"] = env_steps
            self._progress.update(self._task, completed=env_steps, **fields)
        self._progress.refresh()
        self._progress.stop()
