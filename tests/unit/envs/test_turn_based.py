"""PettingZoo turn-based (AEC) games as a BehaviourEnv (relayrl/envs/turn_based.py), on the real classic games:
only the player to move decides, rewards reach both players at a game's end (the loser through the winner's
move), masks come with every decision, a forbidden action is refused, and copies play their own games."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo import AECEnv  # noqa: E402
from pettingzoo.classic import connect_four_v3, tictactoe_v3  # noqa: E402

from relayrl.config import build_config  # noqa: E402
from relayrl.core import Policy  # noqa: E402
from relayrl.envs.agents import OneBehaviour  # noqa: E402
from relayrl.envs.multiagent import pettingzoo_factory  # noqa: E402
from relayrl.envs.packed import PackedDict  # noqa: E402
from relayrl.envs.turn_based import TurnBasedEnv, is_turn_based, turn_based_envs  # noqa: E402
from relayrl.errors import ConfigError, EnvError  # noqa: E402
from relayrl.training.agent_collectors import AgentEvaluator  # noqa: E402
from relayrl.types import PolicyOutput  # noqa: E402

P1, P2 = "player_1", "player_2"
TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3:env"
PARALLELIZABLE = "pettingzoo:relayrl.testing.multiagent_envs:relay_team_aec"  # an AEC env whose agents act together


def play(env: TurnBasedEnv, turns: dict, moves: list[dict[str, list[int]]]) -> dict:
    for move in moves:
        turns = env.step({name: np.array(actions, np.int64) for name, actions in move.items()})
    return turns


def board(turn, row: int) -> np.ndarray:
    return turn.obs[row].reshape(3, 3, 2)  # tictactoe's planes: the mover's marks, the opponent's


def test_only_the_player_to_move_decides_with_its_board_and_mask():
    with TurnBasedEnv([tictactoe_v3.env] * 3) as env:
        assert env.behaviours[P1].observation_space == gym.spaces.Box(0, 1, (18,), np.float32)
        assert env.behaviours[P2].action_space == gym.spaces.Discrete(9) and env.behaviours[P2].num_envs == 3
        turns = env.reset(seed=0)
        assert turns[P1].ids.tolist() == [0, 1, 2] and turns[P2].ids.tolist() == []
        assert turns[P1].obs.shape == (3, 18) and turns[P1].obs.dtype == np.float32 and turns[P2].obs.shape == (0, 18)
        assert turns[P1].action_mask.all() and turns[P2].action_mask.shape == (0, 9)
        turns = play(env, turns, [{P1: [4, 0, 8]}])
        assert turns[P1].ids.tolist() == [] and turns[P2].ids.tolist() == [0, 1, 2]
        np.testing.assert_array_equal(turns[P2].action_mask, ~np.eye(9, dtype=bool)[[4, 0, 8]])
        assert board(turns[P2], 0)[1, 1].tolist() == [0, 1]  # player_2 sees player_1's mark in the centre
        assert (turns[P2].reward == 0).all() and not len(turns[P2].end_ids)
        turns = play(env, turns, [{P2: [0, 4, 4]}])
        assert turns[P1].ids.tolist() == [0, 1, 2] and turns[P2].ids.tolist() == []
        assert board(turns[P1], 0)[1, 1].tolist() == [1, 0] and board(turns[P1], 0)[0, 0].tolist() == [0, 1]


def test_a_win_reaches_the_winner_and_the_loser_and_the_next_game_starts_in_the_same_turn():
    """player_1 takes the top row with its third move: that move ends the game, and player_2's -1 (it made no move
    since) comes with it; the copy resets and player_1 opens the next game in the same turn."""
    with TurnBasedEnv([tictactoe_v3.env]) as env:
        turns = play(env, env.reset(seed=0), [{P1: [0]}, {P2: [3]}, {P1: [1]}, {P2: [4]}])
        assert not len(turns[P1].end_ids) and not len(turns[P2].end_ids)
        turns = play(env, turns, [{P1: [2]}])
        for name, reward in ((P1, 1.0), (P2, -1.0)):
            assert turns[name].end_ids.tolist() == [0], name
            assert turns[name].end_reward.tolist() == [reward], name
            assert turns[name].interrupted.tolist() == [False], name  # a finished game: terminated
        assert turns[P2].end_obs.reshape(3, 3, 2)[0, :, 1].tolist() == [1, 1, 1]  # the loser sees the lost row
        assert turns[P1].ids.tolist() == [0] and turns[P1].reward.tolist() == [0.0]  # the next game's first move
        assert not turns[P1].obs.any() and turns[P1].action_mask.all() and env.stats == {"games": 1}
        turns = play(env, turns, [{P1: [8]}])  # and it goes on: player_2 answers on the new board
        assert turns[P2].ids.tolist() == [0] and turns[P2].action_mask[0].sum() == 8


def test_a_win_of_the_second_player_and_a_draw():
    with TurnBasedEnv([tictactoe_v3.env] * 2) as env:  # copy 0: player_2 takes the middle column; copy 1: a draw
        turns = play(env, env.reset(seed=0), [{P1: [0, 0]}, {P2: [1, 1]}, {P1: [2, 2]}, {P2: [4, 4]},
                                               {P1: [3, 3]}])
        turns = play(env, turns, [{P2: [7, 5]}])
        assert turns[P1].end_ids.tolist() == [0] and turns[P1].end_reward.tolist() == [-1.0]
        assert turns[P2].end_ids.tolist() == [0] and turns[P2].end_reward.tolist() == [1.0]
        assert turns[P1].ids.tolist() == [0, 1]  # copy 0's new game and copy 1's game, both player_1's move
        turns = play(env, turns, [{P1: [4, 7]}, {P2: [0, 6]}, {P1: [8, 8]}])  # copy 1: X O X / X O O / O X X
        assert turns[P1].end_ids.tolist() == [1] and turns[P1].end_reward.tolist() == [0.0]
        assert turns[P2].end_ids.tolist() == [1] and turns[P2].end_reward.tolist() == [0.0]
        assert turns[P2].ids.tolist() == [0] and turns[P1].ids.tolist() == [1]  # copy 0 goes on: copies are apart


def test_a_player_left_out_plays_its_lowest_allowed_action():
    with TurnBasedEnv([tictactoe_v3.env] * 2) as env:
        turns = play(env, env.reset(seed=0), [{}, {}, {}])  # player_1 takes 0, player_2 1, player_1 2
        marks = board(turns[P2], 0)
        assert marks[0, :, 1].tolist() == [1, 0, 1] and marks[0, :, 0].tolist() == [0, 1, 0]
        np.testing.assert_array_equal(turns[P2].action_mask[0], np.arange(9) > 2)


def test_a_forbidden_or_misshapen_action_is_refused_naming_the_player_and_copy():
    with TurnBasedEnv([tictactoe_v3.env] * 2) as env:
        turns = play(env, env.reset(seed=0), [{P1: [4, 0]}])
        with pytest.raises(EnvError, match=r"player 'player_2' of env copy 0 chose action 4, which its action mask "
                                           r"forbids \(allowed: \[0, 1, 2, 3, 5, 6, 7, 8\]\)"):
            env.step({P2: np.array([4, 1])})
        with pytest.raises(EnvError, match="actions have shape"):
            env.step({P2: np.array([1])})
        with pytest.raises(EnvError, match=r"actions for \['player_3'\], which are not players"):
            env.step({"player_3": np.array([0])})
        turns = env.step({P2: np.array([1, 1])})  # nothing was played by the refused steps
        assert turns[P1].action_mask.sum(1).tolist() == [7, 7]


class CountGame(AECEnv):
    """Two players take turns adding 1 or 2 to a count (a real AECEnv): reaching 5 wins; after ``max_moves`` moves
    the game is truncated, each player getting -0.5 with the move that cut it."""

    metadata = {"name": "count_v0", "is_parallelizable": False}

    def __init__(self, max_moves: int = 100, dict_obs: bool = False):
        self.possible_agents = ["a", "b"]
        self.max_moves, self.dict_obs = max_moves, dict_obs

    def observation_space(self, agent: str) -> gym.Space:
        count = gym.spaces.Box(0, 10, (1,), np.float32)
        return gym.spaces.Dict({"count": count, "moves": gym.spaces.Discrete(100)}) if self.dict_obs else count

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        self.agents = list(self.possible_agents)
        self.count, self.moves, self.agent_selection = 0, 0, "a"
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}

    def observe(self, agent: str) -> Any:
        count = np.array([self.count], np.float32)
        return {"count": count, "moves": self.moves} if self.dict_obs else count

    def step(self, action: Any) -> None:
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            return self._was_dead_step(action)
        mover = self.agent_selection
        self._cumulative_rewards[mover] = 0.0
        self._clear_rewards()
        self.count, self.moves = self.count + 1 + int(action), self.moves + 1
        if self.count >= 5:
            other = "b" if mover == "a" else "a"
            self.rewards.update({mover: 1.0, other: -1.0})
            self.terminations = {a: True for a in self.agents}
        elif self.moves >= self.max_moves:
            self.rewards = {a: -0.5 for a in self.agents}
            self.truncations = {a: True for a in self.agents}
        self._accumulate_rewards()
        self.agent_selection = "b" if mover == "a" else "a"


def test_a_truncated_game_interrupts_both_players_and_rewards_between_moves_add_up():
    with TurnBasedEnv([lambda: CountGame(max_moves=3), CountGame]) as env:
        assert env.behaviours["a"].observation_space.shape == (1,)
        assert env.reset(seed=0)["a"].action_mask is None  # the game gives no masks
        turns = play(env, env.reset(seed=0), [{"a": [0, 1]}, {"b": [0, 1]}, {"a": [0, 0]}])
        # copy 0 cut after 3 moves (count 3); copy 1: 2 + 2 + 1 = 5, player a wins
        assert turns["a"].end_ids.tolist() == [0, 1] and turns["b"].end_ids.tolist() == [0, 1]
        assert turns["a"].interrupted.tolist() == [True, False] and turns["b"].interrupted.tolist() == [True, False]
        assert turns["a"].end_reward.tolist() == [-0.5, 1.0] and turns["b"].end_reward.tolist() == [-0.5, -1.0]
        np.testing.assert_array_equal(turns["b"].end_obs, [[3.0], [5.0]])


def test_a_dict_observation_is_packed_into_one_row():
    with TurnBasedEnv([lambda: CountGame(dict_obs=True)] * 2) as env:
        space = env.behaviours["b"].observation_space
        assert isinstance(space, PackedDict)
        turns = play(env, env.reset(seed=0), [{"a": [1, 0]}])
        unpacked = space.unpack(turns["b"].obs)
        np.testing.assert_array_equal(unpacked["count"], [[2.0], [1.0]])
        np.testing.assert_array_equal(unpacked["moves"], [1, 1])


class FirstAllowed(Policy):
    """Plays the lowest allowed action (deterministically, in every mode)."""

    masks_actions = True

    def __init__(self):
        self.action_shape, self.action_dtype = (), np.dtype(np.int64)

    def act(self, obs: np.ndarray, mode: str = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        action = np.argmax(action_mask, 1).astype(np.int64)
        return PolicyOutput(action=action, env_action=action)

    def get_weights(self) -> dict[str, Any]:
        return {}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        pass


def test_the_second_player_is_evaluated_over_its_moves():
    """player_2 decides first in the second turn, and skips every other turn: its evaluation waits for it and
    counts each of its moves. Both play their lowest allowed action: player_1 wins with 0, 2, 4, 6 (the
    anti-diagonal) after player_2's 1, 3, 5."""
    with TurnBasedEnv([tictactoe_v3.env] * 2) as env:
        result = AgentEvaluator(OneBehaviour(env, P2), episodes=4, seed=0).evaluate(FirstAllowed())
    assert result.returns.tolist() == [-1.0] * 4 and result.lengths.tolist() == [3] * 4


def test_connect_four_and_the_game_id_detection():
    with TurnBasedEnv([connect_four_v3.env]) as env:  # (its players: player_0, player_1)
        assert env.behaviours["player_0"].observation_space.shape == (84,)
        turns = play(env, env.reset(seed=0), [{"player_0": [3]}] + [{"player_1": [0]}, {"player_0": [0]}] * 3)
        np.testing.assert_array_equal(turns["player_1"].action_mask[0], np.arange(7) != 0)  # column 0 is full
    assert is_turn_based(TICTACTOE, {}) and not is_turn_based(PARALLELIZABLE, {})
    with pytest.raises(EnvError, match="returned a turn-based AEC env .* relayrl.envs.turn_based.TurnBasedEnv"):
        pettingzoo_factory(TICTACTOE)()
    with pytest.raises(EnvError, match="not a turn-based PettingZoo AEC env"):
        TurnBasedEnv([pettingzoo_factory(PARALLELIZABLE)])


@pytest.mark.parametrize("setting, key", [("env.resize=[8,8]", "env.resize"),
                                          ("env.kwargs={behaviour: player_1}", "env.kwargs.behaviour")])
def test_settings_a_game_cannot_take_are_refused(setting, key):
    config = build_config("ppo", None, [setting], {"env.id": TICTACTOE})
    with pytest.raises(ConfigError, match=f"{key} do not apply to a turn-based PettingZoo game"):
        turn_based_envs(config)
    config = build_config("ppo", None, ["env.num_envs=3", "eval.episodes=2"], {"env.id": TICTACTOE})
    train, evaluation = turn_based_envs(config)
    with train, evaluation:
        assert len(train.envs) == 3 and len(evaluation.envs) == 2 and list(train.behaviours) == [P1, P2]
