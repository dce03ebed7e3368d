"""Privileged critic inputs for SAC (and REDQ, which acts with SAC's policy): ``sac.critic_only_keys`` keeps the
named Dict keys from the actor, the critics read them; predict works without them; a wrong key is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs import make
from relayrl.errors import ConfigError, EnvError

NOISY = "relayrl.testing.envs:relayrl-test/NoisyPendulum-v0"  # {"obs": noisy, "state": clean}


def build(algo: str, *sets: str):
    env = make(NOISY)
    torch.manual_seed(0)
    cfg = getattr(build_config(algo, None, list(sets)), algo)
    return get_algo(algo).algo_cls(cfg, env.observation_space, env.action_space, 1), env.observation_space


@pytest.mark.parametrize("algo", ["sac", "redq"])
def test_the_actor_ignores_the_privileged_key_and_the_critics_read_it(algo):
    learner, space = build(algo, f"{algo}.critic_only_keys=[state]")
    rng = np.random.default_rng(0)
    first = {"obs": rng.normal(size=(6, 3)).astype(np.float32), "state": rng.normal(size=(6, 3)).astype(np.float32)}
    other = {"obs": first["obs"], "state": first["state"] + 3.0}
    rows = [torch.as_tensor(space.pack(o), dtype=torch.float32) for o in (first, other)]
    action = torch.zeros(6, 1)
    with torch.no_grad():
        for a, b in zip(learner.policy.actor(rows[0]), learner.policy.actor(rows[1])):
            torch.testing.assert_close(a, b, rtol=0, atol=0)  # (mean, log std)
        assert not torch.allclose(learner.critic(rows[0], action), learner.critic(rows[1], action))
    assert [f.name for f in learner.policy.actor.encoder.fields] == ["obs"]
    full = learner.policy.predict(first)
    np.testing.assert_array_equal(learner.policy.predict({"obs": first["obs"]}), full)


def test_sac_refuses_a_key_the_observation_does_not_have_and_hiding_every_key():
    with pytest.raises(EnvError, match=r"sac.critic_only_keys=\['velocity'\].*'obs', 'state'"):
        build("sac", "sac.critic_only_keys=[velocity]")
    with pytest.raises(ConfigError, match="would then see nothing"):
        build("sac", "sac.critic_only_keys=[obs,state]")
