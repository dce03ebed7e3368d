"""CrossQ: batch renormalisation, the joint critic pass with no target network, the policy delay, acting and
exporting with the running statistics, and checkpoints that carry them."""

import copy
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos.crossq import EPS, BatchNormalise, BatchRenorm, CrossQ
from relayrl.config import build_config
from relayrl.errors import EnvError
from relayrl.export import export_policy
from relayrl.io.checkpoint import load_checkpoint, save_checkpoint

OBS = gym.spaces.Box(-5, 5, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
SMALL = ["crossq.hidden_sizes=[32, 32]", "crossq.critic_hidden_sizes=[32, 32]", "crossq.start_training=0"]


def make(*sets):
    torch.manual_seed(0)
    return CrossQ(build_config("crossq", None, [*SMALL, *sets]).crossq, OBS, ACT, 1)


def batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(2.0, 3.0, (n, 3)).astype(np.float32),
            "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32), "reward": rng.normal(size=n).astype(np.float32),
            "next_obs": rng.normal(2.0, 3.0, (n, 3)).astype(np.float32), "terminated": rng.random(n) < 0.2,
            "discount": np.full(n, 0.99, np.float32)}


def test_batch_renorm_normalises_with_the_batch_then_acts_with_running_statistics():
    norm = BatchRenorm(4, momentum=0.9, warmup=10)
    x = torch.randn(64, 4) * 3 + 5
    y = norm(x, train=True)
    torch.testing.assert_close(y.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(0, correction=0), torch.ones(4), atol=1e-3, rtol=0)
    torch.testing.assert_close(norm.running_mean, 0.1 * x.mean(0, keepdim=True))
    torch.testing.assert_close(norm.running_var, 0.9 + 0.1 * x.var(0, keepdim=True, correction=0))
    expected = (x - norm.running_mean) / torch.sqrt(norm.running_var + 1e-3)
    torch.testing.assert_close(norm(x, train=False), expected)
    norm.eval()
    torch.testing.assert_close(norm(x[:1]), expected[:1])  # one row: running statistics, not its own


def test_the_closed_form_backward_of_batch_normalisation_is_autograds():
    """BatchNormalise's hand-written backward against autograd through the plain formula, per [lead, n, F] slice."""
    x = torch.randn(2, 16, 3, dtype=torch.float64) * 4 + 1
    assert torch.autograd.gradcheck(lambda t: BatchNormalise.apply(t)[0], (x.clone().requires_grad_(),))
    grad = torch.randn_like(x)
    ours, plain = x.clone().requires_grad_(), x.clone().requires_grad_()
    BatchNormalise.apply(ours)[0].backward(grad)
    var, mean = torch.var_mean(plain, -2, keepdim=True, correction=0)
    ((plain - mean) / torch.sqrt(var + EPS)).backward(grad)
    torch.testing.assert_close(ours.grad, plain.grad)


def test_batch_renorm_corrects_toward_the_running_statistics_after_warmup():
    norm = BatchRenorm(3, lead=(2,), warmup=1)
    with torch.no_grad():
        norm.running_mean.fill_(1.0)
        norm.running_var.fill_(4.0)
    x = torch.randn(2, 50, 3) * 0.5
    first = norm(x, train=True)  # warm-up step: plain batch normalisation
    mean, var = x.mean(1, keepdim=True), x.var(1, keepdim=True, correction=0)
    torch.testing.assert_close(first, (x - mean) / torch.sqrt(var + 1e-3))
    running_mean, running_var = norm.running_mean.clone(), norm.running_var.clone()
    second = norm(x, train=True)
    std, running_std = torch.sqrt(var + 1e-3), torch.sqrt(running_var + 1e-3)
    r = (std / running_std).clamp(1 / 3, 3)
    d = ((mean - running_mean) / running_std).clamp(-5, 5)
    torch.testing.assert_close(second, (x - mean) / std * r + d)
    assert not torch.allclose(second, first)


def test_the_critics_learn_from_one_joint_pass_with_no_target_network():
    algo = make("crossq.autotune=false")
    data = batch()
    before = copy.deepcopy(algo)
    torch.manual_seed(5)
    metrics = algo.learn(dict(data))
    # the same update by hand: next actions with the actor's running statistics, both halves through one pass
    torch.manual_seed(5)
    obs, next_obs = torch.from_numpy(data["obs"]), torch.from_numpy(data["next_obs"])
    with torch.no_grad():
        next_action, next_logp = before.policy.actor.sample(next_obs)
        q_both = before.critic(torch.cat([obs, next_obs]), torch.cat([torch.from_numpy(data["action"]), next_action]),
                               train=True)
    q, next_q = q_both[:, :32], q_both[:, 32:].min(0).values - next_logp
    y = torch.from_numpy(data["reward"]) + 0.99 * torch.from_numpy(~data["terminated"]).float() * next_q
    assert metrics["loss/critic"] == pytest.approx((0.5 * (q - y).pow(2).sum(0).mean()).item(), rel=1e-5)
    # the statistics of the critics' input normalisation are those of [s; s'] together
    torch.testing.assert_close(algo.critic.norms[0].running_mean[0, 0, :3], 0.01 * torch.cat([obs, next_obs]).mean(0))
    assert not algo.policy.actor.training  # the actor acts with running statistics again


def test_the_actor_and_temperature_step_every_policy_delay_updates():
    algo = make("crossq.policy_delay=3")
    data = batch()
    changed = []
    for _ in range(4):
        actor, log_alpha = [p.clone() for p in algo.policy.actor.parameters()], algo.log_alpha.item()
        critic = [p.clone() for p in algo.critic.parameters()]
        algo.learn(dict(data))
        changed.append((any(not torch.equal(a, b) for a, b in zip(actor, algo.policy.actor.parameters())),
                        algo.log_alpha.item() != log_alpha,
                        all(not torch.equal(a, b) for a, b in zip(critic, algo.critic.parameters()))))
    assert changed == [(True, True, True), (False, False, True), (False, False, True), (True, True, True)]


def test_acting_uses_the_running_statistics_in_both_modes():
    algo = make()
    for seed in range(3):
        algo.learn(batch(seed=seed))
    obs = batch(n=20, seed=9)["obs"]
    rows = np.concatenate([algo.policy.act(obs[i:i + 1], "eval").action for i in range(20)])
    np.testing.assert_allclose(algo.policy.act(obs, "eval").action, rows, rtol=1e-5, atol=1e-6)
    assert np.isfinite(algo.policy.act(obs[:1], "collect").action).all()


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_the_exported_graph_acts_as_predict_after_learning(tmp_path, fmt):
    if fmt == "onnx":
        onnxruntime = pytest.importorskip("onnxruntime")
    algo = make()
    for seed in range(3):
        algo.learn(batch(seed=seed))
    assert algo.policy.actor.trunk[0].running_mean.abs().min() > 0.01  # statistics far from the identity
    obs = batch(n=50, seed=9)["obs"]
    exported = export_policy(algo.policy, tmp_path / f"policy.{fmt}", fmt)
    if fmt == "onnx":
        got = onnxruntime.InferenceSession(str(exported.path)).run(None, {"obs": obs})[0]
    else:
        got = torch.jit.load(str(exported.path))(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(got, algo.policy.predict(obs), rtol=1e-5, atol=1e-5)


def test_a_checkpoint_restores_the_running_statistics_and_resumes_the_same(tmp_path):
    algo = make("crossq.bn_warmup=2")
    for seed in range(3):
        algo.learn(batch(seed=seed))
    path = save_checkpoint(tmp_path / "c", algo.state_dict(), {})
    resumed = make("crossq.bn_warmup=2")
    resumed.load_state_dict(load_checkpoint(path).state)
    for a, b in ((algo.policy.actor, resumed.policy.actor), (algo.critic, resumed.critic)):
        for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
            torch.testing.assert_close(x, y, msg=name)
    assert resumed.critic.norms[1].counted == 3 and resumed.policy.actor.trunk[0].counted == 1
    for run in (algo, resumed):  # the next update (renormalised: past the warm-up) is the same on both
        torch.manual_seed(1)
        run.learn(batch(seed=7))
    for x, y in zip(algo.critic.parameters(), resumed.critic.parameters(), strict=True):
        torch.testing.assert_close(x, y)
    obs = batch(n=5, seed=9)["obs"]
    np.testing.assert_array_equal(algo.policy.act(obs, "eval").action, resumed.policy.act(obs, "eval").action)


def test_discrete_actions_and_unbounded_boxes_are_refused():
    cfg = build_config("crossq").crossq
    with pytest.raises(EnvError, match="CrossQ needs a Box"):
        CrossQ(cfg, OBS, gym.spaces.Discrete(3), 1)
    with pytest.raises(EnvError, match="finite"):
        CrossQ(cfg, OBS, gym.spaces.Box(-np.inf, np.inf, (2,)), 1)


def test_train_on_a_discrete_env_exits_2_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "relayrl", "train", "crossq", "--env", "CartPole-v1",
                           "--total-steps", "100", "--run-dir", str(run_dir)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "CrossQ needs a Box (continuous) action space" in done.stderr and "Traceback" not in done.stderr
    assert not run_dir.exists()
