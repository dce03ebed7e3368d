"""PPO's recurrent updates (padded sequences, masks) and mirror loss, on synthetic rollouts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from relayrl.algos.ppo import PPO, NormalizedMirror
from relayrl.config import build_config
from relayrl.data.sequences import chunk, split_trajectories
from relayrl.errors import ConfigError
from relayrl.policy.actor_critic import logp_entropy
from relayrl.policy.mirror import MirrorSpec, mirror_loss
from relayrl.policy.normalizer import RunningMeanStd

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


def make_algo(*sets, act_space=None, obs_space=OBS, num_envs=3):
    cfg = build_config("ppo", None, list(sets)).ppo
    torch.manual_seed(0)
    return PPO(cfg, obs_space, act_space or gym.spaces.Discrete(2), num_envs)


def recurrent_algo(*sets, kind="gru", **kwargs):
    return make_algo(f"ppo.recurrent={kind}", "ppo.recurrent_hidden=8", "ppo.hidden_sizes=[8]", *sets, **kwargs)


def fake_rollout(algo, T=10, N=3, obs_dim=3, seed=0):
    """Random steps with episodes ending inside the rollout and arbitrary stored states."""
    rng = np.random.default_rng(seed)
    policy = algo.policy
    if policy.discrete:
        action = rng.integers(0, policy.act_dim, (T, N))
    else:
        action = rng.normal(size=(T, N, policy.act_dim)).astype(np.float32)
    rollout = {
        "obs": rng.normal(size=(T, N, obs_dim)).astype(np.float32),
        "action": action,
        "logp": rng.normal(-0.7, 0.1, (T, N)).astype(np.float32),
        "value": rng.normal(size=(T, N)).astype(np.float32),
        "reward": rng.normal(size=(T, N)).astype(np.float32),
        "terminated": np.zeros((T, N), bool),
        "truncated": np.zeros((T, N), bool),
        "next_value": rng.normal(size=(T, N)).astype(np.float32),
    }
    rollout["terminated"][[2, 6], 0] = True
    rollout["truncated"][4, 2] = True
    if policy.recurrent:
        rollout["hidden"] = rng.normal(0, 0.3, (T, N, policy.state_size)).astype(np.float32)
    return rollout


def one_minibatch(algo, rollout):
    """Every sequence of the rollout in one padded minibatch (batch_trajectories is large)."""
    steps = algo.device_steps(rollout)
    adv, ret = algo.targets(rollout, rollout["reward"], steps)
    steps["advantage"], steps["return"] = torch.from_numpy(adv), torch.from_numpy(ret)
    batches = list(algo.minibatches(steps, rollout)())
    assert len(batches) == 1
    return batches[0], adv, ret


def spec_file(tmp_path, obs, act):
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump({"obs": obs, "act": act}))
    return str(path)


@pytest.mark.parametrize("kind, shared", [("gru", False), ("lstm", False), ("gru", True), ("lstm", True)])
def test_a_padded_batch_gives_the_loss_of_the_sequences_run_one_by_one(kind, shared):
    algo = recurrent_algo("ppo.seq_len=4", "ppo.batch_trajectories=100", "ppo.value_clip=0.5",
                          "ppo.entropy_coef=0.01", f"ppo.shared_trunk={str(shared).lower()}", kind=kind)
    rollout = fake_rollout(algo)
    mb, adv, ret = one_minibatch(algo, rollout)
    assert not mb["mask"].all()  # the pieces have different lengths: there is padding
    loss, terms = algo.loss(mb, clip=0.2)

    # the reference: each piece alone, without padding, from its stored state
    model, clip = algo.policy.model, 0.2
    segments = chunk(split_trajectories(rollout["terminated"] | rollout["truncated"]), 4)
    logps, entropies, values, keys = [], [], [], []
    for col, start, length in zip(segments.column, segments.start, segments.length):
        steps = slice(start, start + length)
        out, value, _ = model(torch.from_numpy(rollout["obs"][steps, col])[None],
                              torch.from_numpy(rollout["hidden"][start, col])[None])
        logp, entropy = logp_entropy(out[0], torch.from_numpy(rollout["action"][steps, col]), None)
        logps.append(logp), entropies.append(entropy), values.append(value[0])
        keys += [(t, col) for t in range(start, start + length)]
    t, c = (np.array(k) for k in zip(*keys))
    logp, entropy, value = torch.cat(logps), torch.cat(entropies), torch.cat(values)
    old_logp, a = torch.from_numpy(rollout["logp"][t, c]), torch.from_numpy(adv[t, c])
    r, old_v = torch.from_numpy(ret[t, c]), torch.from_numpy(rollout["value"][t, c])
    a = (a - a.mean()) / (a.std() + 1e-8)
    ratio = (logp - old_logp).exp()
    policy_loss = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
    clipped = old_v + (value - old_v).clamp(-0.5, 0.5)
    value_loss = 0.5 * torch.max((value - r).pow(2), (clipped - r).pow(2)).mean()
    expected = policy_loss - 0.01 * entropy.mean() + value_loss
    assert len(logp) == 30 and int(mb["mask"].sum()) == 30
    torch.testing.assert_close(terms["loss/policy"], policy_loss)
    torch.testing.assert_close(terms["loss/value"], value_loss)
    torch.testing.assert_close(terms["loss/entropy"], entropy.mean())
    torch.testing.assert_close(terms["approx_kl"], ((ratio - 1) - (logp - old_logp)).mean())
    torch.testing.assert_close(loss, expected)


def test_whatever_fills_the_padding_no_term_and_no_gradient_changes(tmp_path):
    algo = recurrent_algo("ppo.seq_len=0", "ppo.batch_trajectories=100", "ppo.mirror=1.0",
                          "ppo.mirror_critic=true", f"ppo.mirror_spec={spec_file(tmp_path, [0.1, 2, 1], [1, 0.1])}",
                          kind="lstm")
    algo.bind_env("Whatever-v0")
    mb, _, _ = one_minibatch(algo, fake_rollout(algo))
    garbage = dict(mb, obs=mb["obs"].clone())
    garbage["obs"][~mb["mask"]] = 1e4

    def run(batch):
        model = algo.policy.model
        model.zero_grad()
        loss, terms = algo.loss(batch, clip=0.2, reflect=algo.mirror)
        loss.backward()
        return terms, [p.grad.clone() for p in model.parameters()]

    (terms, grads), (terms_g, grads_g) = run(mb), run(garbage)
    assert set(terms) == {"loss/policy", "loss/value", "loss/entropy", "approx_kl", "clip_frac", "loss/mirror",
                          "loss/mirror_critic"}
    for key in terms:
        torch.testing.assert_close(terms[key], terms_g[key], msg=key)
    for a, b in zip(grads, grads_g):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("seq_len, batch, expected_batches", [(0, 2, 3), (3, 4, 3), (3, 5, 3), (3, 100, 1)])
def test_learn_runs_epochs_of_sequence_minibatches(seq_len, batch, expected_batches):
    algo = recurrent_algo(f"ppo.seq_len={seq_len}", f"ppo.batch_trajectories={batch}", "ppo.epochs=3")
    rollout = fake_rollout(algo)
    # 6 whole pieces of 3, 4, 3 | 10 | 5, 5 steps; with seq_len 3: 1 + 2 + 1 + 4 + 2 + 2 = 12 chunks
    count = len(chunk(split_trajectories(rollout["terminated"] | rollout["truncated"]), seq_len))
    assert count == (6 if seq_len == 0 else 12)
    before = [p.detach().clone() for p in algo.policy.model.parameters()]
    metrics = algo.learn(rollout)
    assert metrics["updates"] == 3 * expected_batches
    assert all(np.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.policy.model.parameters()))


def test_recurrent_learning_moves_the_policy_toward_rewarded_actions():
    algo = recurrent_algo("ppo.epochs=20", "ppo.normalize_advantage=false", "ppo.seq_len=4")
    rollout = fake_rollout(algo)
    rollout.update(action=np.ones((10, 3), np.int64), logp=np.full((10, 3), np.log(0.5), np.float32),
                   value=np.zeros((10, 3), np.float32), next_value=np.zeros((10, 3), np.float32),
                   reward=np.ones((10, 3), np.float32))

    def p_one():
        with torch.no_grad():
            out, _, _ = algo.policy.model(torch.from_numpy(rollout["obs"]).transpose(0, 1),
                                          torch.from_numpy(rollout["hidden"][0]))
        return out.softmax(-1)[..., 1].mean().item()

    before = p_one()
    algo.learn(rollout)
    assert p_one() > before + 0.05


def test_with_a_shared_trunk_learn_fits_the_value_through_the_actors_optimiser():
    # the critic's optimiser is frozen (lr 1e-12): with a shared trunk the value loss still falls, since its
    # gradient reaches the trunk, which the actor's optimiser trains; with separate trunks it cannot move
    results = {}
    for shared in (True, False):
        algo = recurrent_algo("ppo.seq_len=4", "ppo.batch_trajectories=100", "ppo.epochs=30", "ppo.actor_lr=0.01",
                              "ppo.critic_lr=1e-12", "ppo.normalize_reward=false", "ppo.anneal_lr=false",
                              f"ppo.shared_trunk={str(shared).lower()}")
        rollout = fake_rollout(algo)
        mb, _, _ = one_minibatch(algo, rollout)  # the same steps and targets learn uses

        def value_loss():
            with torch.no_grad():
                return algo.loss(mb, clip=0.2)[1]["loss/value"].item()
        before = value_loss()
        metrics = algo.learn(rollout)
        results[shared] = (before, value_loss(), metrics)
    (before, after, metrics), (sep_before, sep_after, _) = results[True], results[False]
    assert metrics["updates"] == 30 and np.isfinite(metrics["loss/value"])
    # over 8 seeds the value loss ended at 0.63-0.78 of its start; with the critic head's input detached
    # from the trunk (the property broken) at 0.94-1.06: the policy loss alone moves it either way
    assert after < 0.85 * before
    assert sep_after == pytest.approx(sep_before, rel=1e-4)


# ---------------------------------------------------------------- mirror


def continuous_algo(*sets, obs_dim=2, act_dim=2):
    return make_algo(*sets, obs_space=gym.spaces.Box(-1, 1, (obs_dim,), np.float32),
                     act_space=gym.spaces.Box(-1, 1, (act_dim,), np.float32))


def test_mirror_loss_is_zero_for_an_exactly_symmetric_policy(tmp_path):
    # a swap of two inputs and two outputs commutes with a linear map [[a, b], [b, a]] plus equal biases
    algo = continuous_algo("ppo.mirror=1.0", "ppo.hidden_sizes=[]",
                           f"ppo.mirror_spec={spec_file(tmp_path, [1, 0.1], [1, 0.1])}")
    algo.bind_env("Toy-v0")
    with torch.no_grad():
        algo.policy.model.actor[0].weight.copy_(torch.tensor([[0.7, -0.3], [-0.3, 0.7]]))
        algo.policy.model.actor[0].bias.fill_(0.2)
    obs = torch.randn(64, 2)
    mb = {"obs": obs}
    out = algo.policy.model.actor(obs)
    terms = algo.mirror_terms(mb, out, out[:, 0], algo.mirror)
    assert terms["loss/mirror"].item() < 1e-12
    # an asymmetric policy is penalised, by the same amount as relayrl.policy.mirror.mirror_loss says
    with torch.no_grad():
        algo.policy.model.actor[0].weight[0, 1] = 0.5
    out = algo.policy.model.actor(obs)
    terms = algo.mirror_terms(mb, out, out[:, 0], algo.mirror)
    reference = mirror_loss(algo.policy.model.actor, obs, algo.mirror)
    assert terms["loss/mirror"].item() > 1e-3
    torch.testing.assert_close(terms["loss/mirror"], reference)


def test_mirror_loss_is_zero_for_an_odd_policy_under_negation(tmp_path):
    # negating every input and output: a tanh network without biases is odd, so exactly symmetric
    algo = continuous_algo("ppo.mirror=1.0", "ppo.hidden_sizes=[8]", "ppo.mirror_critic=false",
                           f"ppo.mirror_spec={spec_file(tmp_path, [-0.1, -1], [-0.1, -1])}")
    algo.bind_env("Toy-v0")
    with torch.no_grad():
        for layer in algo.policy.model.actor:
            if isinstance(layer, torch.nn.Linear):
                layer.bias.zero_()
                layer.weight.mul_(30.0)
    obs = torch.randn(64, 2)
    out = algo.policy.model.actor(obs)
    assert out.abs().mean() > 0.1
    assert algo.mirror_terms({"obs": obs}, out, out[:, 0], algo.mirror)["loss/mirror"].item() < 1e-10


def asymmetry(algo, obs):
    with torch.no_grad():
        return mirror_loss(algo.policy.model.actor, obs, algo.mirror).item()


@pytest.mark.parametrize("recurrent", [False, True])
def test_the_mirror_term_is_logged_and_makes_the_policy_symmetric(tmp_path, recurrent):
    spec = spec_file(tmp_path, [1, 0.1, -2], [1, 0.1])
    extra = ["ppo.recurrent=gru", "ppo.recurrent_hidden=8", "ppo.seq_len=4"] if recurrent else []
    runs = {}
    for weight in (0.0, 1.0):
        algo = make_algo(f"ppo.mirror={weight}", f"ppo.mirror_spec={spec}", "ppo.hidden_sizes=[16]",
                         "ppo.batch_size=10", "ppo.actor_lr=0.01", *extra,
                         act_space=gym.spaces.Box(-1, 1, (2,), np.float32))
        algo.bind_env("Toy-v0")
        algo.mirror = MirrorSpec.load(spec, "Toy-v0", 3, 2).torch()  # to measure asymmetry with mirror=0 too
        with torch.no_grad():  # start clearly asymmetric: outputs of order 1
            head = algo.policy.model.actor_head if recurrent else algo.policy.model.actor
            head[-1].weight.mul_(100.0)
        rollout = fake_rollout(algo)
        obs = torch.from_numpy(rollout["obs"].reshape(-1, 3))
        measure = (lambda: _recurrent_asymmetry(algo, rollout)) if recurrent else (lambda: asymmetry(algo, obs))
        before, logged = measure(), []
        for _ in range(5):
            metrics = algo.learn(rollout)
            logged.append(metrics.get("loss/mirror"))
        runs[weight] = (before, measure(), logged)
    (before0, after0, logged0), (before1, after1, logged1) = runs[0.0], runs[1.0]
    assert logged0 == [None] * 5 and all(v is not None for v in logged1)
    assert logged1[-1] < logged1[0]
    # the same start; with the mirror term the asymmetry falls, without it it grows as the policy learns
    assert before1 == pytest.approx(before0) and after1 < 0.3 * before1 and after1 < 0.1 * after0


def _recurrent_asymmetry(algo, rollout):
    """The mirror loss over whole columns run from zero states (the mirrored history is exact then)."""
    model = algo.policy.model
    obs = torch.from_numpy(rollout["obs"]).transpose(0, 1)
    zeros = model.initial_state(len(obs))
    with torch.no_grad():
        out = model(obs, zeros, critic=False)[0]
        mirrored = model(algo.mirror.obs(obs), zeros, critic=False)[0]
    return (out - algo.mirror.act(mirrored)).pow(2).mean().item()


def signed_permutation(spec: list[float]) -> torch.Tensor:
    """The matrix M of a signed-index spec: mirror(x) = M @ x."""
    parsed = MirrorSpec.from_config(spec, [0.1])
    m = torch.zeros(len(spec), len(spec))
    m[torch.arange(len(spec)), torch.from_numpy(parsed.obs_index)] = torch.from_numpy(parsed.obs_sign).float()
    return m


def make_symmetric(model, m_obs: torch.Tensor, m_act: torch.Tensor) -> None:
    """Average the recurrent model's weights with their reflection so that it commutes with it exactly.

    The hidden units come in two halves that swap (P); every gate is elementwise, so a layer with
    W_ih M_obs = P W_ih, W_hh P = P W_hh and P b = b maps a mirrored history to the swapped state; the
    actor head then needs W P = M_act W, and the critic head W P = W (the value is invariant).
    """
    hidden = model.hidden
    half = hidden // 2
    p = torch.eye(hidden)[torch.cat([torch.arange(half, hidden), torch.arange(half)])]  # P h swaps the halves
    with torch.no_grad():
        for rnn in (model.actor_rnn, model.critic_rnn):
            if rnn is None:
                continue
            gates = rnn.weight_ih_l0.shape[0] // hidden
            pg = torch.block_diag(*[p] * gates)
            rnn.weight_ih_l0.copy_((rnn.weight_ih_l0 + pg @ rnn.weight_ih_l0 @ m_obs) / 2)
            rnn.weight_hh_l0.copy_((rnn.weight_hh_l0 + pg @ rnn.weight_hh_l0 @ p) / 2)
            for bias in (rnn.bias_ih_l0, rnn.bias_hh_l0):
                bias.copy_((bias + pg @ bias) / 2)
        actor, critic = model.actor_head[-1], model.critic_head[-1]
        actor.weight.copy_((actor.weight + m_act @ actor.weight @ p) / 2)
        actor.bias.copy_((actor.bias + m_act @ actor.bias) / 2)
        critic.weight.copy_((critic.weight + critic.weight @ p) / 2)


@pytest.mark.parametrize("kind, shared", [("gru", False), ("lstm", False), ("gru", True), ("lstm", True)])
def test_recurrent_mirror_loss_is_zero_for_a_symmetric_policy_wherever_a_chunk_starts(tmp_path, kind, shared):
    obs_spec, act_spec = [1, 0.1, -2], [1, 0.1]  # swap the first two observations, negate the third
    algo = recurrent_algo("ppo.seq_len=4", "ppo.batch_trajectories=100", "ppo.mirror=1.0", "ppo.mirror_critic=true",
                          "ppo.hidden_sizes=[]", f"ppo.shared_trunk={str(shared).lower()}",
                          f"ppo.mirror_spec={spec_file(tmp_path, obs_spec, act_spec)}", kind=kind,
                          act_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    algo.bind_env("Toy-v0")
    model = algo.policy.model
    with torch.no_grad():
        model.actor_head[-1].weight.mul_(1000.0)  # actions of order 1, so any asymmetry would show
    make_symmetric(model, signed_permutation(obs_spec), signed_permutation(act_spec))
    rollout = fake_rollout(algo)
    mb, _, _ = one_minibatch(algo, rollout)
    # chunks that start mid-episode, from non-zero stored states (every stored state is random here)
    segments = chunk(split_trajectories(rollout["terminated"] | rollout["truncated"]), 4)
    done = rollout["terminated"] | rollout["truncated"]
    mid_episode = (segments.start > 0) & ~done[np.maximum(segments.start - 1, 0), segments.column]
    assert mid_episode.sum() >= 3 and (mb["hidden"].abs().sum(-1) > 0).all()

    with torch.no_grad():
        out, value = algo.forward(mb)
        terms = algo.mirror_terms(mb, out, value, algo.mirror)
        assert terms["loss/mirror"].item() < 1e-10 and terms["loss/mirror_critic"].item() < 1e-10
        # the policy is exactly symmetric, yet its actions from the stored states are not the mirror of
        # the mirrored chunks' actions from zero states: comparing those two would penalise it
        mirrored = model(algo.mirror.obs(mb["obs"]), torch.zeros_like(mb["hidden"]), critic=False)[0][mb["mask"]]
        assert (out - algo.mirror.act(mirrored)).pow(2).mean().item() > 1e-3
        # and the term does see asymmetry: perturb one weight
        model.actor_head[-1].weight[0, 0] += 1.0
        out, value = algo.forward(mb)
        assert algo.mirror_terms(mb, out, value, algo.mirror)["loss/mirror"].item() > 1e-3


def test_normalised_observations_are_mirrored_through_their_raw_values():
    spec = MirrorSpec.from_config(obs=[2, -1, 0.1], act=[0.1]).torch()
    rms = RunningMeanStd((3,))
    rms.update(np.random.default_rng(0).normal([1.0, 2.0, -3.0], [1.0, 0.5, 2.0], size=(1000, 3)))
    raw = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)
    reflect = NormalizedMirror(spec, rms)
    expected = rms.normalize(spec.obs(torch.from_numpy(raw)).numpy())
    np.testing.assert_allclose(reflect.obs(torch.from_numpy(rms.normalize(raw))).numpy(), expected, atol=1e-5)
    # mirroring the normalised values directly would be wrong: the statistics are not symmetric
    direct = spec.obs(torch.from_numpy(rms.normalize(raw))).numpy()
    assert np.abs(direct - expected).max() > 0.5


def test_mirror_spec_problems_are_clear_errors(tmp_path):
    algo = continuous_algo("ppo.mirror=1.0", f"ppo.mirror_spec={spec_file(tmp_path, [0.1, 2, 1], [1, 0.1])}")
    with pytest.raises(ConfigError, match="3 entries but the observation has 2 elements"):
        algo.bind_env("Toy-v0")
    with pytest.raises(ConfigError, match="no built-in mirror spec for 'Pendulum-v1'"):
        continuous_algo("ppo.mirror=0.5").bind_env("Pendulum-v1")
    with pytest.raises(ConfigError, match="bind_env"):
        continuous_algo("ppo.mirror=0.5").learn(fake_rollout(continuous_algo(), obs_dim=2))
    negated = make_algo("ppo.mirror=1.0", f"ppo.mirror_spec={spec_file(tmp_path, [0.1, 2, 1], [-1, -0.1])}")
    with pytest.raises(ConfigError, match="discrete actions can only be swapped"):
        negated.bind_env("Toy-v0")
    make_algo(f"ppo.mirror_spec={tmp_path / 'missing.yaml'}").bind_env("Toy-v0")  # mirror=0: never read


def test_walker2d_built_in_spec_fits_its_spaces():
    """The built-in spec against the real Walker2d-v5: its sizes, and its indices against the joint order the
    env's MuJoCo model gives (observation = qpos without rootx, then qvel; actions = the actuated joints)."""
    try:
        env = gym.make("Walker2d-v5")
    except (ImportError, gym.error.DependencyNotInstalled) as exc:
        pytest.skip(f"gymnasium[mujoco] is not installed ({exc}): pip install -c constraints.txt -e '.[mujoco]' "
                    "to check the built-in Walker2d mirror spec against the real env")
    try:
        obs, _ = env.reset(seed=0)
        model, data = env.unwrapped.model, env.unwrapped.data
        names = [model.joint(j).name for j in range(model.njnt)]
        pos, vel = {}, {}
        for j, name in enumerate(names):
            pos[int(model.jnt_qposadr[j])], vel[int(model.jnt_dofadr[j])] = name, name
        np.testing.assert_allclose(obs, np.concatenate([data.qpos[1:], data.qvel]), atol=1e-6)  # the layout
        obs_labels = [("pos", pos[k]) for k in range(1, model.nq)] + [("vel", vel[d]) for d in range(model.nv)]
        act_labels = [names[j] for j in model.actuator_trnid[:, 0]]
        assert act_labels == ["thigh_joint", "leg_joint", "foot_joint", "thigh_left_joint", "leg_left_joint",
                              "foot_left_joint"]

        def other_leg(name):  # the planar walker's reflection swaps the legs and leaves the torso alone
            if "_left" in name:
                return name.replace("_left", "")
            return name.replace("_joint", "_left_joint") if name.replace("_joint", "_left_joint") in names else name
        expected_obs = [obs_labels.index((kind, other_leg(name))) for kind, name in obs_labels]
        expected_act = [act_labels.index(other_leg(name)) for name in act_labels]

        spec = MirrorSpec.load("auto", "Walker2d-v5", len(obs), env.action_space.shape[0])
        assert spec.obs_index.tolist() == expected_obs and spec.act_index.tolist() == expected_act
        assert (spec.obs_sign == 1).all() and (spec.act_sign == 1).all()  # all in the sagittal plane: no negation
        algo = make_algo("ppo.mirror=1.0", obs_space=env.observation_space, act_space=env.action_space)
        algo.bind_env("Walker2d-v5")
        assert algo.mirror is not None
    finally:
        env.close()


def test_appo_refuses_recurrent_policies():
    from relayrl.algos.appo import APPO

    cfg = build_config("appo", None, ["appo.recurrent=gru"]).appo
    with pytest.raises(ConfigError, match="train recurrent policies with ppo, or set appo.recurrent=null"):
        APPO(cfg, OBS, gym.spaces.Discrete(2), 2)
