"""The progress bar shows progress toward the stop value as well as total_steps, and its last frame is final."""

import io

from rich.console import Console

from relayrl.training.progress import ProgressDisplay


def frames(stop_value, solved):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    display = ProgressDisplay(1_000_000, "ppo CartPole-v1", quiet=False, stop_value=stop_value, console=console)
    display.update(12_288, 5000.0, 270.7)
    display.close(15_360, 500.0, solved=solved)
    return out.getvalue().split("\r")[-1]  # the last frame drawn


def test_the_last_frame_shows_the_final_steps_and_eval_toward_the_stop_value():
    last = frames(475.0, solved=True)
    assert "eval 500.0 → 475 reached" in last
    assert "15360/15360" in last  # the bar is full: the stop value ended the run, not total_steps
    assert "ETA ≤" in last  # with a stop value, the ETA is an upper bound


def test_without_a_stop_value_the_bar_counts_total_steps():
    last = frames(None, solved=False)
    assert "eval 500.0" in last and "→" not in last and "reached" not in last
    assert "15360/1000000" in last and "ETA ≤" not in last


def test_quiet_draws_nothing(capsys):
    display = ProgressDisplay(100, "x", quiet=True, stop_value=1.0)
    display.update(1, 1.0, None)
    display.close(2, 1.0, solved=True)
    assert capsys.readouterr() == ("", "")
