"""A rich progress bar: env steps toward ``total_steps``, steps/s, the last eval return toward the stop
value, and an ETA that is an upper bound when a stop value may end the run sooner. Silent when quiet.

The frame is laid out for the terminal's width, so that no number is ever cut short: on one line
when everything fits with a bar of at least ``MIN_BAR`` cells; otherwise the title, the bar and the
elapsed time on one line and the numbers on the next (wrapped between, never inside, the numbers on
a very narrow terminal). Only the bar shrinks, and the title is shortened last.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Iterable

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.progress import Progress, Task
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

MIN_BAR, MAX_BAR = 10, 24  # cells of the bar on the one-line layout


class ProgressDisplay:
    def __init__(self, total_steps: int, title: str, quiet: bool, start: int = 0, stop_value: float | None = None,
                 console: Console | None = None):
        self._progress = None
        self._stop_value = stop_value
        if quiet:
            return
        self._progress = _FramedProgress(stop_value is not None, console=console or Console(stderr=True),
                                         refresh_per_second=4)
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


class _FramedProgress(Progress):
    """rich's Progress (its refresh thread, its speed estimate) drawing each task as a ``_Frame``."""

    def __init__(self, eta_is_bound: bool, **kwargs):
        super().__init__(**kwargs)
        self._eta_label = "ETA ≤" if eta_is_bound else "ETA"  # the stop value may end the run before total_steps

    def get_renderables(self) -> Iterable[_Frame]:
        return [_Frame(task, self._eta_label) for task in self.tasks if task.visible]


class _Frame:
    """One task's frame, laid out when rich knows the width it is drawn in (see the module docstring)."""

    def __init__(self, task: Task, eta_label: str):
        self.task = task
        self.eta_label = eta_label

    def numbers(self) -> list[Text]:
        """Steps, rate, eval and ETA: the pieces that are never cut."""
        task = self.task
        total = int(task.total or 0)
        steps = f"{int(task.completed):>{len(str(total))}}/{total} steps"  # a steady width as the count grows
        return [Text(steps), Text(f"{task.fields['sps']:.0f} steps/s"), Text(f"eval {task.fields['eval']}"),
                Text(f"{self.eta_label} {_clock(task.time_remaining)}", style="progress.remaining")]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        task = self.task
        title = Text(task.description, style="bold")
        elapsed = Text(_clock(task.finished_time if task.finished else task.elapsed), style="progress.elapsed")
        numbers = self.numbers()
        one_line = [*numbers[:3], elapsed, numbers[3]]
        room = width - title.cell_len - _span(one_line) - 2  # the bar's share of a single line
        if room >= MIN_BAR:
            yield _line(title, self._bar(min(room, MAX_BAR)), *one_line)
            return
        title.truncate(max(1, width - elapsed.cell_len - MIN_BAR - 2), overflow="ellipsis")
        lines = [_line(title, self._bar(max(1, width - title.cell_len - elapsed.cell_len - 2)), elapsed)]
        row: list[Text] = []
        for piece in numbers:  # greedy: a piece that does not fit starts the next line
            if row and _span([*row, piece]) > width:
                lines.append(_line(*row))
                row = []
            row.append(piece)
        lines.append(_line(*row))
        yield Group(*lines)

    def _bar(self, width: int) -> ProgressBar:
        task = self.task
        return ProgressBar(total=max(0.0, task.total or 0.0), completed=max(0.0, task.completed), width=width,
                           pulse=not task.started, animation_time=task.get_time())


def _span(pieces: list[Text]) -> int:
    return sum(piece.cell_len for piece in pieces) + len(pieces) - 1


def _line(*cells: Text | ProgressBar) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_row(*cells)
    return table


def _clock(seconds: float | None) -> str:
    return "-:--:--" if seconds is None else str(timedelta(seconds=max(0, int(seconds))))
