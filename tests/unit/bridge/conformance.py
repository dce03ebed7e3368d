"""The conformance scenario: a trainer (``BridgeEnv``) drives a simulator that implements the echo
world (``relayrl/bridge/examples/echo_sim.py``, and its C twin) and checks every value it receives.

``check_conformance(command)`` covers: the handshake and behaviour spec; fewer deciding agents than
the maximum with two observations (the DOTS prefix-copy bug); action masks; terminations with the
interrupted flag, in the same turn as a new decision; actions flowing back into observations; a
behaviour registered mid-run; side-channel round trips, a 1 MB message that grows the body to a new
generation (the old file removed); a query that does not advance; reset; the stats channel (1.2:
"echo/turn", most recent, and "echo/deciders", summed, every turn); a normal close (exit 0, no files
left).
"""

from __future__ import annotations

import stat
import uuid

import numpy as np

from relayrl.bridge import BridgeEnv, SideChannel
from relayrl.bridge.sidechannel import StatsChannel

CHANNEL = uuid.UUID("6f1d7c39-3e0b-4c53-9b1e-2f6a9b0c1d2e")


def expected_turn(t: int, cont: np.ndarray, disc: np.ndarray) -> dict:
    """What the echo world reports at turn t, given each agent's last actions."""
    rows = [i for i in range(8) if (i + t) % 3]
    out = {"ids": np.array([100 + i for i in rows]),
           "obs0": np.array([[i, t, cont[i]] for i in rows], np.float32),
           "obs1": np.array([[[i, t % 256], disc[i]] for i in rows], np.uint8),
           "reward": np.array([0.5 * i + t for i in rows], np.float32),
           "mask0": np.array([[k == i % 3 for k in range(3)] for i in rows]),
           "terminated": None}
    if t % 4 == 3:
        j = (t // 4) % 8
        out["terminated"] = (100 + j, np.array([j, t, cont[j]], np.float32),
                             np.array([[j, t % 256], disc[j]], np.uint8), (t // 4) % 2 == 1)
    return out


def check_turn(env: BridgeEnv, t: int, cont: np.ndarray, disc: np.ndarray) -> None:
    want = expected_turn(t, cont, disc)
    decisions, terminations = env.get_steps("echo")
    np.testing.assert_array_equal(decisions.agent_id, want["ids"], err_msg=f"turn {t}: deciding agents")
    np.testing.assert_allclose(decisions.obs[0], want["obs0"], err_msg=f"turn {t}: obs0")
    np.testing.assert_array_equal(decisions.obs[1], want["obs1"], err_msg=f"turn {t}: obs1 (second observation)")
    np.testing.assert_allclose(decisions.reward, want["reward"], err_msg=f"turn {t}: reward")
    np.testing.assert_array_equal(decisions.action_mask[0], want["mask0"], err_msg=f"turn {t}: masks")
    assert not decisions.action_mask[1].any()
    if want["terminated"] is None:
        assert len(terminations) == 0, f"turn {t}: unexpected terminations {terminations.agent_id}"
    else:
        agent, obs0, obs1, interrupted = want["terminated"]
        assert list(terminations.agent_id) == [agent], f"turn {t}"
        np.testing.assert_allclose(terminations.obs[0][0], obs0)
        np.testing.assert_array_equal(terminations.obs[1][0], obs1)
        assert terminations.reward[0] == -1.0 and bool(terminations.interrupted[0]) == interrupted
    if t >= 5:
        late, _ = env.get_steps("late")
        np.testing.assert_array_equal(late.agent_id, [0, 1, 2, 3])
        np.testing.assert_allclose(late.obs[0], [[a, t] for a in range(4)])


def act(env: BridgeEnv, t: int, cont: np.ndarray, disc: np.ndarray) -> None:
    """Send actions that are a function of (agent, turn) and remember them as the echo world will."""
    decisions, _ = env.get_steps("echo")
    rows = decisions.agent_id - 100
    continuous = np.stack([rows * 0.25, np.full(len(rows), t * 0.5)], axis=1)
    discrete = np.stack([(rows + 1 + t % 2) % 3, rows % 2], axis=1)  # never option i % 3: the mask forbids it
    env.set_actions("echo", continuous=continuous, discrete=discrete)
    cont[rows] = continuous.astype(np.float32).sum(axis=1)
    disc[rows] = discrete
    if "late" in env.behaviours:
        env.set_actions("late", continuous=np.ones((4, 1)))


def deciders(t: int) -> int:
    return len(expected_turn(t, np.zeros(8), np.zeros((8, 2)))["ids"])


def check_conformance(command: list[str], timeout_s: float = 30.0) -> None:
    channel, stats = SideChannel(CHANNEL), StatsChannel()
    env = BridgeEnv(command, timeout_s=timeout_s, side_channels=[channel, stats])
    folder, name = env.memory_path.parent, env.memory_path.name
    try:
        spec = env.behaviours["echo"]
        assert list(env.behaviours) == ["echo"]
        assert spec.max_agents == 8 and spec.continuous == 2 and spec.branches == (3, 2)
        assert [(o.shape, o.dtype.name) for o in spec.observations] == [((3,), "float32"), ((2, 2), "uint8")]
        files = [p for p in folder.iterdir() if p.name.startswith(name)]
        assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files), files
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700

        cont, disc = np.zeros(8, np.float32), np.zeros((8, 2), np.int64)
        for t in range(12):
            check_turn(env, t, cont, disc)
            act(env, t, cont, disc)
            if t == 2:
                channel.queue(b"hello")
            if t == 3:
                assert channel.received == [b"olleh"]
            env.step()
        assert list(env.behaviours) == ["echo", "late"] and env.behaviours["late"].continuous == 1
        # the stats of turns 0..12 (12: the turn just received), aggregated as the simulator asked
        assert stats.drain() == {"echo/turn": 12.0, "echo/deciders": float(sum(deciders(t) for t in range(13)))}

        # a query: side channel only, the world does not advance
        channel.received.clear()
        channel.queue(b"abc")
        env.query()
        assert channel.received == [b"cba"]
        check_turn(env, 12, cont, disc)

        # a 1 MB message: the body grows to a new generation, the old file is removed
        generation = env.channel.generation
        big = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
        channel.queue(big)
        act(env, 12, cont, disc)
        env.step()
        check_turn(env, 13, cont, disc)
        assert channel.received[-1] == big[::-1]
        assert env.channel.generation > generation
        bodies = sorted(p.name for p in folder.iterdir() if p.name.startswith(name + ".") and p.name[-1].isdigit())
        assert bodies == [f"{name}.{env.channel.generation}"], bodies

        # reset: fresh decisions from t = 0, last actions forgotten, "late" still registered
        env.reset()
        cont[:], disc[:] = 0, 0
        check_turn(env, 0, cont, disc)
        assert "late" in env.behaviours
        act(env, 0, cont, disc)
        env.step()
        check_turn(env, 1, cont, disc)
        # since the last drain: turns 13, 0 (the reset's answer) and 1; the query's answer sent no stats
        assert stats.drain() == {"echo/turn": 1.0, "echo/deciders": float(deciders(13) + deciders(0) + deciders(1))}
    finally:
        env.close()
    assert env.returncode == 0, f"the simulator exited with {env.returncode} after a normal close"
    assert not [p for p in folder.iterdir() if p.name.startswith(name)], "channel files left after close"
