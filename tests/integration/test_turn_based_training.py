"""Turn-based PettingZoo games from the command line: ``relayrl train ppo --env
pettingzoo:pettingzoo.classic.tictactoe_v3:env`` trains a policy per player (RUN/behaviours/<player>/), and
``relayrl eval --behaviour`` and ``relayrl.load(RUN, behaviour=...)`` work on the run; a player learns to beat a
random opponent; DQN (off-policy) trains connect_four's players too."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

pytest.importorskip("pettingzoo")

from pettingzoo.classic import tictactoe_v3  # noqa: E402

import relayrl  # noqa: E402
from relayrl.cli import main  # noqa: E402
from relayrl.envs.turn_based import TurnBasedEnv  # noqa: E402

TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3:env"
QUICK = ["--set", "env.num_envs=4", "--set", "eval.episodes=4", "--set", "eval.num_envs=2", "--set", "eval.freq=256",
         "--quiet", "--no-tensorboard"]


def test_tictactoe_trains_both_players_and_each_evaluates_and_loads(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", "ppo", "--env", TICTACTOE, "--total-steps", "512", "--set", "ppo.num_steps=32", "--set",
                 "ppo.batch_size=64", "--run-dir", str(run), *QUICK])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads((run / "summary.json").read_text())
    assert sorted(summary["behaviours"]) == ["player_1", "player_2"]
    for player in ("player_1", "player_2"):
        part = summary["behaviours"][player]
        assert part["env_steps"] >= 512 and part["last_eval_return"] in (-1.0, 0.0, 1.0), part
        assert (run / "behaviours" / player / "checkpoints" / "last.safetensors").is_file()
        saved = yaml.safe_load((run / "behaviours" / player / "config.yaml").read_text())
        assert saved["env"]["kwargs"] == {"behaviour": player}

    for player in ("player_1", "player_2"):  # each against the other's policy: a deterministic game's result
        assert main(["eval", str(run), "--behaviour", player, "--episodes", "3"]) == 0
        line = capsys.readouterr().out
        assert f"{TICTACTOE}: return" in line and "over 3 episodes" in line and f"behaviours/{player}/" in line, line
    assert main(["eval", str(run), "--episodes", "3"]) == 2
    assert "choose one with --behaviour NAME" in capsys.readouterr().err
    assert main(["eval", str(run / "behaviours" / "player_1"), "--episodes", "2"]) == 0  # alone: player_2 plays
    assert "over 2 episodes" in capsys.readouterr().out                                # its lowest allowed moves

    game = tictactoe_v3.env()
    game.reset(seed=0)
    game.step(4)  # player_1 takes the centre: player_2's board and mask
    obs = game.last()[0]
    policy = relayrl.load(run, behaviour="player_2")
    board = obs["observation"].reshape(-1).astype(np.float32)  # the flattened board the policy was trained on
    for _ in range(5):
        action = int(policy.predict(board, deterministic=False, action_mask=obs["action_mask"]))
        assert action != 4 and 0 <= action < 9


def win_rate_against_random(policy, player: str, games: int = 600) -> float:
    """The share of ``games`` tictactoe games ``player`` wins playing ``policy`` (deterministic) against uniformly
    random allowed moves."""
    rng = np.random.default_rng(0)
    results: list[float] = []
    with TurnBasedEnv([tictactoe_v3.env] * 50) as env:
        turns = env.reset(seed=0)
        while len(results) < games:
            turns = env.step({name: policy.predict(turn.obs, action_mask=turn.action_mask) if name == player else
                              np.array([rng.choice(np.flatnonzero(m)) for m in turn.action_mask], np.int64)
                              for name, turn in turns.items() if len(turn.ids)})
            results += turns[player].end_reward.tolist()
    return float(np.mean(np.array(results[:games]) > 0))


@pytest.mark.parametrize("learner, frozen, least", [
    ("player_1", "player_2", 0.8),
    pytest.param("player_2", "player_1", 0.45, marks=pytest.mark.extended),  # (the same path, the other player)
])
def test_a_player_learns_to_beat_a_random_opponent(tmp_path, learner, frozen, least):
    """The other player's policy barely moves from its initial, near-uniform one (actor_lr 1e-12): the learner's
    rewards (its wins, and its losses through the other's winning moves) teach it to beat random play. Random against
    random, player_1 wins about 59% of the games, player_2 about 28%; after 16k steps (seeds 0-2) measured:
    0.92-0.94 and 0.59-0.70."""
    run = tmp_path / "run"
    code = main(["train", "ppo", "--env", TICTACTOE, "--total-steps", "16000", "--set", "env.num_envs=16",
                 "--set", f"behaviours.{frozen}.ppo.actor_lr=1e-12", "--set", "eval.freq=0", "--set", "eval.episodes=2",
                 "--run-dir", str(run), "--quiet", "--no-tensorboard"])
    assert code == 0
    rate = win_rate_against_random(relayrl.load(run, behaviour=learner), learner)
    assert rate >= least, rate


def test_connect_four_players_train_with_dqn(tmp_path, capsys):
    """Off-policy transitions over turns each player skips; connect_four's players are player_0 and player_1."""
    run = tmp_path / "run"
    code = main(["train", "dqn", "--env", "pettingzoo:pettingzoo.classic.connect_four_v3:env", "--total-steps",
                 "400", "--set", "dqn.start_training=100", "--run-dir", str(run), *QUICK])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert sorted(summary["behaviours"]) == ["player_0", "player_1"]
    assert all(part["updates"] > 0 for part in summary["behaviours"].values()), summary
    assert main(["eval", str(run), "--behaviour", "player_1", "--episodes", "2"]) == 0


@pytest.mark.parametrize("args, text", [
    (["--set", "env.resize=[8,8]"], "env.resize do not apply to a turn-based PettingZoo game"),
    (["--workers", "2"], "PettingZoo envs train in this process"),
])
def test_settings_a_turn_based_game_cannot_take_are_refused_before_anything_is_written(tmp_path, capsys, args, text):
    code = main(["train", "ppo", "--env", TICTACTOE, *args, "--run-dir", str(tmp_path / "run"), "--quiet",
                 "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 2 and text in err and err.count("relayrl: error:") == 1, err
    assert not (tmp_path / "run").exists()
