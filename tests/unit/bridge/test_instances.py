"""BridgeInstances: several simulator processes as one BridgeEnv (rows joined, ids unique, actions split
back, stepped in parallel), a dead instance restarted with its agents' episodes interrupted, and a
death reported with the exit code or signal (checklist A15) with one instance or several."""

from __future__ import annotations

import logging
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from relayrl.bridge import BridgeEnv, PeerDied
from relayrl.bridge.instances import ID_BITS, BridgeInstances
from relayrl.bridge.sidechannel import EnvironmentParametersChannel, SideChannel

from test_lifecycle import gone  # same folder

ECHO = [sys.executable, "-m", "relayrl.bridge.examples.echo_sim"]
BALL3D = [sys.executable, "-m", "relayrl.bridge.examples.ball3d", "--agents", "3"]


def test_two_instances_join_their_agents_as_rows_with_unique_ids_and_get_their_own_actions(tmp_path):
    with BridgeInstances(ECHO, 2, timeout_s=30, directory=tmp_path) as env:
        assert len({p for p in env.memory_paths}) == 2, "each instance has its own channel"
        assert env.behaviours["echo"].max_agents == 16  # 8 agents each
        env.reset()
        decisions, _ = env.get_steps("echo")
        local = np.arange(100, 108)
        deciding = local[(local - 100) % 3 != 0]  # echo_sim: agent i decides at turn 0 when i % 3 != 0
        assert decisions.agent_id.tolist() == [*deciding, *(deciding + (1 << ID_BITS))]
        assert len(set(decisions.agent_id.tolist())) == len(decisions)
        # row r's continuous action sums to the instance it belongs to, plus 1
        instance = decisions.agent_id >> ID_BITS
        actions = np.stack([instance + 1.0, np.zeros(len(decisions))], axis=1)
        env.set_actions("echo", continuous=actions)  # (discrete: the lowest allowed option, by default)
        env.step()
        decisions, _ = env.get_steps("echo")
        seen = decisions.obs[0][:, 2]  # echo_sim: the sum of the agent's last continuous action
        acted = np.isin(decisions.agent_id & ((1 << ID_BITS) - 1), deciding)
        assert acted.any()
        assert np.array_equal(seen[acted], (decisions.agent_id[acted] >> ID_BITS) + 1.0)


def test_side_channel_settings_reach_every_instance_and_their_answers_come_back(tmp_path):
    answers = []
    channel = SideChannel("9b9c3a4e-1111-4222-8333-444455556666", answers.append)
    with BridgeInstances(ECHO, 2, timeout_s=30, directory=tmp_path, side_channels=[channel]) as env:
        channel.queue(b"abc")
        env.reset()
    assert answers == [b"cba", b"cba"], "echo_sim answers each record reversed: one answer per instance"


def test_the_c_simulator_runs_as_two_instances(tmp_path):
    from relayrl.bridge.cbuild import build, have_compiler

    if not have_compiler():
        pytest.skip("no C compiler ($CC or cc)")
    exe = build("ball3d", tmp_path / "build")
    with BridgeInstances([str(exe), "--agents", "4"], 2, timeout_s=30, directory=tmp_path / "bridge") as env:
        env.reset()
        for _ in range(5):
            decisions, _ = env.get_steps("ball3d")
            assert sorted(decisions.agent_id.tolist()) == [*range(4), *range(1 << ID_BITS, (1 << ID_BITS) + 4)]
            env.set_actions("ball3d", continuous=np.zeros((8, 2), np.float32))
            env.step()
    assert list((tmp_path / "bridge").iterdir()) == []


def test_a_killed_instance_is_restarted_and_its_agents_episodes_end_interrupted(tmp_path, caplog):
    params = EnvironmentParametersChannel()
    params.set_float_parameter("gravity", -3.0)
    with BridgeInstances(BALL3D, 2, timeout_s=30, directory=tmp_path, side_channels=[params]) as env:
        env.reset()
        env.step()
        survivor, victim = env.instances[0].proc.pid, env.instances[1].proc.pid
        before, _ = env.get_steps("ball3d")
        os.kill(victim, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="relayrl.bridge.instances"):
            env.step()
        decisions, ends = env.get_steps("ball3d")
        victims = before.agent_id[before.agent_id >> ID_BITS == 1]
        cut = ends.agent_id >> ID_BITS == 1
        assert sorted(ends.agent_id[cut].tolist()) == sorted(victims.tolist())
        assert ends.interrupted[cut].all() and (ends.reward[cut] == 0).all()
        rows = {int(i): r for r, i in enumerate(before.agent_id)}
        for k in np.flatnonzero(cut):  # the last observation the trainer saw of each
            assert np.array_equal(ends.obs[0][k], before.obs[0][rows[int(ends.agent_id[k])]])
        assert sorted(decisions.agent_id.tolist()) == sorted(before.agent_id.tolist()), "the new copy's agents decide"
        assert env.stats == {"bridge_restarts": 1}
        assert env.instances[0].proc.pid == survivor and env.instances[1].proc.pid != victim
        assert env.instances[1].side_channels.by_id[params.channel_id].outgoing == [], "its settings were sent"
        assert any("killed by signal 9 (SIGKILL)" in r.getMessage() and "instance 1" in r.getMessage()
                   for r in caplog.records), caplog.text
        env.set_actions("ball3d", continuous=np.zeros((len(decisions), 2)))
        env.step()  # and the run goes on
    assert gone(survivor) and list(tmp_path.iterdir()) == []


def test_restarts_past_max_restarts_stop_with_the_signal_named(tmp_path):
    env = BridgeInstances(BALL3D, 2, timeout_s=30, directory=tmp_path, max_restarts=1)
    try:
        env.reset()
        os.kill(env.instances[0].proc.pid, signal.SIGKILL)
        env.step()
        os.kill(env.instances[0].proc.pid, signal.SIGKILL)
        with pytest.raises(PeerDied, match=r"instance 0 of 2: .*killed by signal 9 \(SIGKILL\).*env.max_restarts"):
            env.step()
    finally:
        env.close()
    assert list(tmp_path.iterdir()) == []


FAILS_UNLESS_FIRST = textwrap.dedent("""
    import os, sys, time
    try:
        os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        print("this simulator cannot start", file=sys.stderr)
        sys.exit(2)
    from relayrl.bridge.examples.echo_sim import main
    sys.exit(main(sys.argv[2:]))
""")


def test_an_instance_that_fails_to_start_closes_the_others_and_names_its_exit_code(tmp_path):
    script = tmp_path / "sim.py"
    script.write_text(FAILS_UNLESS_FIRST)
    bridge = tmp_path / "bridge"
    with pytest.raises(PeerDied, match=r"simulator instance \d of 3: .*exited with code 2") as caught:
        BridgeInstances([sys.executable, str(script), str(tmp_path / "first")], 3, timeout_s=30, directory=bridge)
    assert caught.value.exit_code == 3
    assert list(bridge.iterdir()) == [], "no channel files left behind"
    # the one that did start was closed, not orphaned
    deadline = time.monotonic() + 10
    ours = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _runs(p, str(tmp_path / "first"))]
    while ours and time.monotonic() < deadline:
        time.sleep(0.05)
        ours = [p for p in ours if not gone(int(p.name))]
    assert not ours, "a simulator instance outlived the failed start"


def _runs(proc: Path, marker: str) -> bool:
    try:
        return marker in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@pytest.mark.parametrize("how, words", [("os._exit(3)", "exited with code 3"),
                                        ("os.kill(os.getpid(), 9)", "was killed by signal 9 (SIGKILL)")])
def test_one_simulator_that_dies_is_reported_with_its_exit_code_or_signal(tmp_path, how, words):
    sim = textwrap.dedent(f"""
        import os
        from relayrl.bridge.world import World
        with World(behaviours=[dict(name="b", max_agents=1, observations=[(1,)], continuous=1)]) as world:
            world.request_decision("b", 0).set_observation(0, [0.0])
            world.step()
            {how}
    """)
    env = BridgeEnv([sys.executable, "-c", sim], timeout_s=30, directory=tmp_path)
    try:
        with pytest.raises(PeerDied, match=rf"simulator died \(pid \d+\): it {words.replace('(', '[(]').replace(')', '[)]')}"):
            env.step()
    finally:
        env.close()


def test_a_part_of_the_actions_left_unset_gets_the_default_answer_not_last_turns(tmp_path):
    """protocol §3.3: a behaviour given only its continuous actions gets the lowest allowed option in each branch
    (not the discrete actions its agents were sent the turn before)."""
    with BridgeEnv(ECHO, timeout_s=30, directory=tmp_path) as env:
        env.reset()
        for turn in range(2):
            decisions, _ = env.get_steps("echo")
            n = len(decisions)
            if turn == 0:  # every agent: option 2 of branch 0 where allowed (echo_sim forbids option i % 3), 1 of branch 1
                chosen = np.where(decisions.action_mask[0][:, 2], 1, 2)
                env.set_actions("echo", continuous=np.zeros((n, 2)), discrete=np.stack([chosen, np.ones(n)], 1))
            else:
                env.set_actions("echo", continuous=np.ones((n, 2)))  # no discrete actions this turn
                sent = dict(zip(decisions.agent_id.tolist(), decisions.action_mask[0].argmin(axis=1).tolist()))
            env.step()
        decisions, _ = env.get_steps("echo")
        echoed = decisions.obs[1][:, 1, :]  # echo_sim: each agent's last discrete actions
        for agent, last in zip(decisions.agent_id.tolist(), echoed.tolist()):
            if agent in sent:
                assert last == [sent[agent], 0], agent
