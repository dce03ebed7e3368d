"""The progress bar shows progress toward the stop value as well as total_steps, its last frame is final, and its
numbers are never cut short at any terminal width (the bar shrinks first)."""

import io
import re

import pytest
from rich.console import Console

from relayrl.training.progress import ProgressDisplay

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ETA = re.compile(r"ETA ≤ \d+:\d\d:\d\d")


def last_frame(out: io.StringIO) -> list[str]:
    """The lines of the last frame drawn, without the terminal's control codes."""
    frame = ANSI.sub("", out.getvalue().split("\r")[-1])
    return [line.rstrip() for line in frame.splitlines() if line.strip()]


def frames(stop_value, solved, width=200):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=width, color_system=None)
    display = ProgressDisplay(1_000_000, "ppo CartPole-v1", quiet=False, stop_value=stop_value, console=console)
    display.update(12_288, 5000.0, 270.7)
    display.close(15_360, 500.0, solved=solved)
    return "\n".join(last_frame(out))


def run_to(width, final):
    """The frame drawn at ``width`` columns mid-run (a run interrupted at 409600 of 1000000 steps), or after the
    stop value was reached at 415360 steps."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=width, color_system=None)
    display = ProgressDisplay(1_000_000, "ppo CartPole-v1", quiet=False, stop_value=475.0, console=console)
    display.update(12_288, 24682.0, 270.7)  # two updates: rich's speed estimate, hence the ETA, needs both
    display.update(409_600, 24682.0, 343.0)
    if final:
        display.close(415_360, 500.0, solved=True)
    else:
        display.close()
    return last_frame(out)


def test_the_last_frame_shows_the_final_steps_and_eval_toward_the_stop_value():
    last = frames(475.0, solved=True)
    assert "eval 500.0 → 475 reached" in last
    assert "15360/15360" in last  # the bar is full: the stop value ended the run, not total_steps
    assert "ETA ≤" in last  # with a stop value, the ETA is an upper bound


def test_without_a_stop_value_the_bar_counts_total_steps():
    last = frames(None, solved=False)
    assert "eval 500.0" in last and "→" not in last and "reached" not in last
    assert "15360/1000000" in last and "ETA ≤" not in last


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("final", [False, True], ids=["mid-run", "final"])
def test_the_numbers_stay_whole_at_any_width(width, final):
    lines = run_to(width, final)
    frame = "\n".join(lines)
    assert "…" not in frame, frame
    assert all(len(line) <= width for line in lines), frame
    steps, evaluation = ("415360/415360 steps", "eval 500.0 → 475 reached") if final else \
        ("409600/1000000 steps", "eval 343.0 → 475")
    for number in (steps, "24682 steps/s", evaluation):
        assert number in frame, frame
    assert ETA.search(frame), frame
    assert "ppo CartPole-v1 " in lines[0] and "━" in lines[0]  # the title and the bar lead


def test_the_layout_follows_the_width():
    # 120 columns: one line; 80: the title, the bar and the elapsed time, then every number on one line
    assert len(run_to(120, final=False)) == 1
    title, numbers = run_to(80, final=False)
    assert re.search(r"━.* \d+:\d\d:\d\d$", title)
    assert "409600/1000000 steps" in numbers and ETA.search(numbers)


def test_quiet_draws_nothing(capsys):
    display = ProgressDisplay(100, "x", quiet=True, stop_value=1.0)
    display.update(1, 1.0, None)
    display.close(2, 1.0, solved=True)
    assert capsys.readouterr() == ("", "")
