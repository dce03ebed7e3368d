import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos.redq import REDQ
from relayrl.algos.sac import TwinQ
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.errors import EnvError

OBS = gym.spaces.Box(-5, 5, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def make(*sets):
    torch.manual_seed(0)
    return REDQ(build_config("redq", None, ["redq.hidden_sizes=[16, 16]", *sets]).redq, OBS, ACT, 1)


def batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, 3)).astype(np.float32), "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "reward": rng.normal(size=n).astype(np.float32), "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
            "terminated": rng.random(n) < 0.2, "discount": np.full(n, 0.99, np.float32)}


def test_the_ensemble_is_n_independent_critics_in_one_network():
    torch.manual_seed(0)
    net = TwinQ(5, [16, 16], critics=10)
    obs, act = torch.randn(7, 3), torch.randn(7, 2)
    q = net(obs, act)
    assert q.shape == (10, 7)
    x = torch.cat([obs, act], -1)
    for k in range(10):
        h = x
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            h = h @ w[k] + b[k]
            if i < len(net.weights) - 1:
                h = torch.relu(h)
        torch.testing.assert_close(q[k], h.squeeze(-1))
    assert len({round(v, 6) for v in q[:, 0].tolist()}) == 10  # separately initialised
    assert make().critic(obs[:, :3], act).shape == (10, 7)  # the default N


def test_the_target_is_the_min_of_a_random_subset_of_m_target_critics():
    """The critic loss of one update recomputed by hand with the same random draws (the actor's sample at s',
    then the subset)."""
    b = batch()
    algo, ref = make("redq.num_min=3"), make("redq.num_min=3")
    torch.manual_seed(11)
    obs, next_obs, action = (torch.from_numpy(b[k]) for k in ("obs", "next_obs", "action"))
    with torch.no_grad():
        next_action, next_logp = ref.policy.actor.sample(next_obs)
        subset = torch.randperm(10)[:3]
        all_q = ref.target(next_obs, next_action)
        next_q = all_q[subset].min(0).values - next_logp  # (alpha starts at 1)
        y = torch.from_numpy(b["reward"]) + 0.99 * (1 - torch.from_numpy(b["terminated"]).float()) * next_q
        want = 0.5 * (ref.critic(obs, action) - y).pow(2).sum(0).mean().item()
    assert not torch.equal(all_q[subset].min(0).values, all_q.min(0).values)  # (a subset, not all ten)
    torch.manual_seed(11)
    assert algo.learn(dict(b))["loss/critic"] == pytest.approx(want, rel=1e-5)


def test_actor_and_temperature_learn_every_policy_delay_updates_the_critics_and_target_every_update():
    algo = make("redq.policy_delay=4")

    def snapshot():
        return [[p.detach().clone() for p in net.parameters()] for net in (algo.policy.actor, algo.critic, algo.target)]

    for update in range(1, 9):
        before, alpha = snapshot(), algo.log_alpha.item()
        algo.learn(batch(seed=update))
        moved = [any(not torch.equal(a, b) for a, b in zip(old, net.parameters()))
                 for old, net in zip(before, (algo.policy.actor, algo.critic, algo.target))]
        delayed = update % 4 == 0
        assert moved == [delayed, True, True] and (algo.log_alpha.item() != alpha) == delayed, update
    assert algo.policy.version == 8


def test_defaults_are_the_papers_ensemble_and_one_actor_update_per_env_step():
    cfg = build_config("redq").redq
    assert (cfg.num_critics, cfg.num_min) == (10, 2) and cfg.policy_delay == cfg.updates_per_step


def test_state_dict_round_trip_continues_identically():
    algo, clone = make("redq.policy_delay=2"), make("redq.policy_delay=2")
    for k in range(3):
        algo.learn(batch(seed=k))
    clone.load_state_dict(copy.deepcopy(algo.state_dict()))  # (as from a file: no tensor shared)
    for net in (algo, clone):
        torch.manual_seed(5)
        net.learn(batch(seed=9))
    for part in ("actor", "critic", "target"):
        for a, b in zip(algo.state_dict()[part].values(), clone.state_dict()[part].values()):
            torch.testing.assert_close(a, b)
    assert clone.log_alpha.item() == algo.log_alpha.item() and clone.updates == 4


def test_discrete_actions_are_refused_naming_redq():
    with pytest.raises(EnvError, match="REDQ needs a Box"):
        REDQ(build_config("redq").redq, OBS, gym.spaces.Discrete(3), 1)


def test_more_critics_in_the_min_than_the_ensemble_holds_exits_2(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["train", "redq", "--set", "redq.num_min=11", "--total-steps", "100", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "redq.num_min=11" in err and "redq.num_critics=10" in err and not run_dir.exists()
