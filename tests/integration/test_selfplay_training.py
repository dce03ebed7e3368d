"""Self-play (relayrl/training/selfplay.py) with real processes: the two-team example simulator and a PettingZoo
board game, one policy learning against its own snapshots; the refusals of a bad self-play config."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

import relayrl

DUEL = f"bridge:{shlex.quote(sys.executable)} -m relayrl.bridge.examples.duel"
FAST = ["--set", "selfplay.enabled=true", "--set", "selfplay.save_steps=3000", "--set", "selfplay.swap_steps=1500",
        "--set", "selfplay.team_change=6000"]


def relayrl_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "relayrl", *args, "--quiet", "--no-tensorboard"],
                          capture_output=True, text=True, timeout=timeout)


def scripted_win_rate(run_dir, games: int = 96) -> float:
    from relayrl.bridge.agent_env import BridgeAgents
    from relayrl.training.agent_collectors import AgentEvaluator

    env = BridgeAgents(f"{shlex.quote(sys.executable)} -m relayrl.bridge.examples.duel --opponent scripted --seed 7")
    try:
        result = AgentEvaluator(env, games, seed=0).evaluate(relayrl.load(run_dir))
    finally:
        env.close()
    return float((result.returns > 0).mean())


def test_self_play_on_two_teams_rates_both_sides_and_beats_a_scripted_opponent_it_never_met(tmp_path):
    run_dir = tmp_path / "run"
    run = relayrl_cli("train", "ppo", "--env", DUEL, "--total-steps", "30000", "--run-dir", str(run_dir), *FAST)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["event"] == "train"]
    assert {r["selfplay/learning_side"] for r in rows} == {0, 1}  # the learning side changed
    assert rows[-1]["selfplay/snapshots"] == 10  # the window is full
    assert rows[-1]["selfplay/elo_blue"] > 1300 and rows[-1]["selfplay/elo_red"] > 1300  # both beat older selves
    # the initial policy wins 0.0-0.52 against the half-pace scripted runner, seeds 0-4 0.965-0.99 after 30,000
    # self-play steps (benchmarks/selfplay_duel.py, docs/benchmarks.md "Self-play")
    assert scripted_win_rate(run_dir) > 0.8
    evaluated = subprocess.run([sys.executable, "-m", "relayrl", "eval", str(run_dir), "--episodes", "4"],
                               capture_output=True, text=True, timeout=120)  # blue against itself on red
    assert evaluated.returncode == 0 and "over 4 episodes" in evaluated.stdout, evaluated.stderr


def test_a_resumed_self_play_run_goes_on_with_its_snapshots_ratings_and_schedule(tmp_path):
    run_dir = tmp_path / "run"
    first = relayrl_cli("train", "ppo", "--env", DUEL, "--total-steps", "8192", "--run-dir", str(run_dir), *FAST,
                        "--set", "selfplay.team_change=5000")
    assert first.returncode == 0, first.stderr[-3000:]
    before = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    again = relayrl_cli("train", "--resume", str(run_dir), "--total-steps", "12288")
    assert again.returncode == 0, again.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last, resumed = [r for r in before if r["event"] == "train"][-1], [r for r in rows[len(before):] if r["event"] == "train"]
    assert last["selfplay/learning_side"] == 1  # changed at 5000 steps
    assert resumed[0]["selfplay/learning_side"] == 1 and resumed[-1]["selfplay/learning_side"] == 0  # at 10000
    assert resumed[0]["selfplay/snapshots"] >= last["selfplay/snapshots"] == 3  # 1 + saves at 3000 and 6000
    # blue's rating is not touched while red learns: it carries over the resume exactly
    assert resumed[0]["selfplay/elo_blue"] == last["selfplay/elo_blue"] != 1200


def test_a_board_game_trains_by_self_play_with_one_policy(tmp_path):
    run_dir = tmp_path / "run"
    run = relayrl_cli("train", "ppo", "--env", "pettingzoo:pettingzoo.classic.tictactoe_v3:env", "--total-steps",
                      "4000", "--run-dir", str(run_dir), "--set", "env.num_envs=8", *FAST[:2],
                      "--set", "selfplay.team_change=2000", "--set", "selfplay.save_steps=1000")
    assert run.returncode == 0, run.stderr[-3000:]
    assert not (run_dir / "behaviours").exists()  # one policy, one run directory
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "selfplay/elo_player_1" in r][-1]
    assert last["selfplay/elo_player_1"] != 1200 and last["selfplay/elo_player_2"] != 1200  # each side played
    assert relayrl.load(run_dir).action_space.n == 9


@pytest.mark.parametrize("env, sets, says", [
    (f"bridge:{shlex.quote(sys.executable)} -m relayrl.bridge.examples.two_behaviours", ["selfplay.enabled=true"],
     r"sides 'ball' and 'reach' need the same spaces"),
    (DUEL, ["selfplay.sides=[blue, green]"], r"selfplay.sides names \['green'\].*\['blue', 'red'\]"),
    (DUEL, ["selfplay.sides=[blue]"], r"self-play needs two sides"),
    (DUEL, ["selfplay.enabled=true", "behaviours={blue: {total_steps: 10}}"], r"drop the behaviours section"),
])
def test_a_bad_self_play_config_is_one_message_and_writes_nothing(tmp_path, env, sets, says):
    args = [item for s in sets for item in ("--set", s)]
    run = relayrl_cli("train", "ppo", "--env", env, "--total-steps", "256", "--run-dir", str(tmp_path / "run"), *args)
    assert run.returncode == 2, run.stderr[-2000:]
    assert re.search(says, run.stderr) and "Traceback" not in run.stderr
    assert not (tmp_path / "run").exists()
