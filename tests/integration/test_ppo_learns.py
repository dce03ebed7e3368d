"""PPO trains for real on Gymnasium environments."""

import json

import numpy as np
import pytest

from relayrl.config import build_config
from relayrl.errors import NonFiniteError
from relayrl.io.checkpoint import load_checkpoint
from relayrl.io.metrics import read_metrics
from relayrl.training.trainer import run_trainer

TIME_KEYS = ("wall_time_s", "time/")


def test_ppo_learns_cartpole_on_a_small_budget(tmp_path):
    config = build_config("ppo", None, [], {"total_steps": 30_000, "stop_value": 300, "seed": 0})
    summary = run_trainer(config, run_dir=tmp_path / "run")
    assert summary["solved"] and summary["best_eval_return"] >= 300
    assert summary["env_steps_to_stop_value"] <= 30_000
    events = read_metrics(tmp_path / "run")
    train_events = [e for e in events if e["event"] == "train"]
    for key in ("train/return_mean", "train/loss/policy", "train/loss/value", "train/approx_kl",
                "train/clip_frac", "train/loss/entropy", "train/explained_variance", "train/lr/actor",
                "time/steps_per_s", "time/collect_s", "time/learn_s"):
        assert any(key in e for e in train_events), key
    # the best checkpoint holds the policy that reached the stop value
    best = load_checkpoint(tmp_path / "run")
    assert best.path.name == "best.safetensors" and best.meta["run"]["best_eval_return"] >= 300


def test_same_seed_gives_identical_metrics(tmp_path, tiny_config):
    def run(name):
        run_trainer(tiny_config(total_steps=320, seed=5), run_dir=tmp_path / name, tensorboard=False)
        return [{k: v for k, v in e.items() if not k.startswith(TIME_KEYS)} for e in read_metrics(tmp_path / name)]

    first, second = run("a"), run("b")
    assert first == second and len(first) > 5
    third = run_trainer(tiny_config(total_steps=320, seed=6), run_dir=tmp_path / "c", tensorboard=False)
    assert [e for e in read_metrics(tmp_path / "c") if e["event"] == "train"] != [
        e for e in first if e["event"] == "train"] or third["env_steps"] != 320


def test_resume_matches_the_counters_of_an_uninterrupted_run(tmp_path, tiny_config):
    run_trainer(tiny_config(total_steps=160, seed=1), run_dir=tmp_path / "r", tensorboard=False)
    summary = run_trainer(tiny_config(total_steps=320, seed=1), run_dir=tmp_path / "r", resume=True, tensorboard=False)
    straight = run_trainer(tiny_config(total_steps=320, seed=1), run_dir=tmp_path / "s", tensorboard=False)
    assert summary["env_steps"] == straight["env_steps"] == 320
    assert summary["updates"] == straight["updates"]
    last = load_checkpoint(tmp_path / "r" / "checkpoints" / "last.safetensors")
    assert last.meta["run"]["resumes"] == 1 and last.meta["run"]["env_steps"] == 320


def test_checkpoint_weights_round_trip_bit_identical(tmp_path, tiny_config):
    from relayrl.training.saved_policy import load_policy

    run_trainer(tiny_config(total_steps=128), run_dir=tmp_path / "r", tensorboard=False)
    ckpt = load_checkpoint(tmp_path / "r" / "checkpoints" / "last.safetensors")
    policy, _, _ = load_policy(ckpt)
    for name, tensor in policy.model.state_dict().items():
        assert tensor.equal(ckpt.state["algo"]["model"][name])
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    again, _, _ = load_policy(load_checkpoint(ckpt.path))
    np.testing.assert_array_equal(policy.act(obs, "eval").action, again.act(obs, "eval").action)


def test_periodic_checkpoints_every_save_freq_updates(tmp_path, tiny_config):
    summary = run_trainer(tiny_config(total_steps=256, save_freq=8), run_dir=tmp_path / "r", tensorboard=False)
    periodic = sorted(p.name for p in (tmp_path / "r" / "checkpoints").glob("update_*.safetensors"))
    # 8 iterations x (2 epochs x 2 minibatches) = 32 updates: one checkpoint every 8
    assert summary["updates"] == 32
    assert periodic == [f"update_{n:09d}.safetensors" for n in (8, 16, 24, 32)]


def test_non_finite_loss_stops_with_message_and_keeps_last_good_checkpoint(tmp_path, tiny_config):
    config = tiny_config("env.id=relayrl-test/HugeReward-v0", "ppo.normalize_reward=false", total_steps=640)
    with pytest.raises(NonFiniteError, match="loss became (nan|inf)"):
        run_trainer(config, run_dir=tmp_path / "r", tensorboard=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["stop_reason"] == "nonfinite"
    assert (tmp_path / "r" / "nonfinite_batch.npz").is_file()


def test_obs_norm_with_prenorm_fills_statistics_before_training(tmp_path, tiny_config):
    config = tiny_config("ppo.obs_norm=true", "ppo.prenorm=true", "ppo.prenormalize_steps=10",
                         "ppo.update_norm=false", total_steps=96)
    summary = run_trainer(config, run_dir=tmp_path / "r", tensorboard=False)
    state = load_checkpoint(tmp_path / "r" / "checkpoints" / "last.safetensors").state["algo"]
    # 10 warm-up vector steps of 2 envs fill the statistics; update_norm=false freezes them after
    assert float(state["obs_rms"]["count"]) == 20
    assert summary["env_steps"] >= 96


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_ppo_solves_cartpole(tmp_path, seed):
    config = build_config("ppo", None, [], {"seed": seed, "total_steps": 150_000})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["solved"], summary
    assert summary["last_eval_return"] >= 475


@pytest.mark.solve
def test_default_ppo_makes_clear_progress_on_pendulum(tmp_path):
    config = build_config("ppo", None, ["eval.freq=20000"], {"env.id": "Pendulum-v1", "total_steps": 200_000})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    evals = [e["eval/return_mean"] for e in read_metrics(tmp_path / "run") if e["event"] == "eval"]
    # a random policy scores about -1200 on Pendulum-v1
    assert evals[0] < -900 and summary["best_eval_return"] > -400, evals


def test_user_hooks_see_a_named_context_at_every_position(tmp_path, tiny_config):
    seen = []

    def record(ctx):
        seen.append((ctx.iteration, ctx.env_steps, ctx.updates, sorted(ctx.metrics)[:1], ctx.stop_reason))

    hooks = [("before_run", lambda ctx: seen.append("start"), {}),
             ("after_iter", record, {"freq": 2}),
             ("after_run", lambda ctx: seen.append(("end", ctx.stop_reason)), {})]
    run_trainer(tiny_config(total_steps=128), run_dir=tmp_path / "r", tensorboard=False, hooks=hooks)
    assert seen[0] == "start" and seen[-1] == ("end", "total_steps")
    iterations = [item[0] for item in seen[1:-1]]
    assert iterations == [2, 4]  # 4 iterations of 32 steps, every second one
    assert seen[1][1] == 64 and seen[1][2] > 0 and seen[1][3] == ["approx_kl"]


def test_training_survives_env_faults_and_logs_them(tmp_path, tiny_config):
    # every env instance raises on its 5th step; worker-side rebuilds keep training going
    config = tiny_config("env.id=relayrl.testing.envs:relayrl-test/Faulty-v0", "env.kwargs={raise_at: 5}",
                         "env.manager=subproc", "env.workers=2", total_steps=256)
    summary = run_trainer(config, run_dir=tmp_path / "r", tensorboard=False)
    assert summary["env_steps"] == 256
    errors = [e["env/errors"] for e in read_metrics(tmp_path / "r") if e["event"] == "train"]
    assert errors[-1] > 0 and errors == sorted(errors)


def test_ppo_refuses_the_async_manager(tiny_config):
    from relayrl.errors import ConfigError

    with pytest.raises(ConfigError, match="not async"):
        run_trainer(tiny_config("env.manager=async"))


@pytest.mark.parametrize("fault", ["env.kwargs={exit_at: 7}", "env.kwargs={hang_at: 7, hang_s: 30}"])
def test_training_survives_dying_and_hanging_workers(tmp_path, tiny_config, fault):
    config = tiny_config("env.id=relayrl.testing.envs:relayrl-test/Faulty-v0", fault, "env.manager=subproc",
                         "env.workers=2", "env.step_timeout=0.3", "eval.freq=0", total_steps=64)
    summary = run_trainer(config, run_dir=tmp_path / "r", tensorboard=False)
    assert summary["env_steps"] == 64
    last = [e for e in read_metrics(tmp_path / "r") if e["event"] == "train"][-1]
    assert last["env/restarts"] > 0
    if "hang" in fault:
        assert last["env/timeouts"] == last["env/restarts"]


def test_dqn_trains_and_resumes_with_its_replay_buffer(tmp_path):
    # one-step transitions, so that every env step is one replay row (with n-step returns the last n - 1
    # steps of each env at a stop are windows that never complete)
    sets = ["dqn.start_training=200", "dqn.steps_per_iteration=8", "dqn.buffer_size=5000", "dqn.batch_size=32",
            "dqn.hidden_sizes=[32, 32]", "env.num_envs=4", "eval.freq=256", "eval.episodes=2", "eval.num_envs=2",
            "dqn.n_step=1"]
    first = run_trainer(build_config("dqn", None, sets, {"total_steps": 512, "seed": 0}), run_dir=tmp_path / "r",
                        tensorboard=False)
    replay = tmp_path / "r" / "checkpoints" / "replay.safetensors"
    assert first["env_steps"] == 512 and first["updates"] > 0 and replay.is_file()
    resumed = run_trainer(build_config("dqn", None, sets, {"total_steps": 1024, "seed": 0}), run_dir=tmp_path / "r",
                          resume=True, tensorboard=False)
    assert resumed["env_steps"] == 1024 and resumed["updates"] > first["updates"]
    from relayrl.data.replay import ReplayBuffer

    buffer = ReplayBuffer(5000)
    buffer.load(replay)
    assert len(buffer) == 1024  # the buffer continued across the resume, nothing lost or doubled


@pytest.mark.solve
def test_default_dqn_solves_cartpole(tmp_path):
    config = build_config("dqn", None, [], {"seed": 0, "total_steps": 100_000})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["solved"], summary


def test_sac_trains_on_pendulum_briefly_and_evaluates(tmp_path):
    sets = ["sac.start_training=64", "sac.batch_size=32", "sac.hidden_sizes=[32, 32]", "sac.steps_per_iteration=16",
            "eval.freq=200", "eval.episodes=2", "eval.num_envs=2"]
    summary = run_trainer(build_config("sac", None, sets, {"total_steps": 400, "seed": 0}), run_dir=tmp_path / "r",
                          tensorboard=False)
    assert summary["env"] == "Pendulum-v1" and summary["env_steps"] == 400
    assert summary["updates"] == 400 - 64  # one update per env step once training started
    assert summary["last_eval_return"] is not None


@pytest.mark.solve
def test_default_sac_reaches_minus_200_on_pendulum(tmp_path):
    config = build_config("sac", None, ["eval.freq=1000", "eval.episodes=5"],
                          {"seed": 0, "total_steps": 20_000, "stop_value": -200})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    assert summary["solved"], summary


def _remote_collector():
    """Random CartPole transitions from a collector of its own: what remote workers would send."""
    from relayrl.envs import make_vec
    from relayrl.training.collector import OffPolicyCollector
    from relayrl.core import Policy
    from relayrl.types import PolicyOutput

    class RandomPolicy(Policy):
        action_shape, action_dtype = (), np.dtype(np.int64)

        def act(self, obs, mode="collect"):
            a = np.random.default_rng(len(obs)).integers(0, 2, len(obs))
            return PolicyOutput(action=a, env_action=a)

        def get_weights(self):
            return {}

        def set_weights(self, weights, version=None):
            pass

    return OffPolicyCollector(make_vec("CartPole-v1", 2), RandomPolicy(), n_step=1, gamma=0.99, steps_per_pull=16)


def test_off_policy_loop_takes_an_external_sample_source_and_weight_sink(tmp_path):
    """What the distributed runtime plugs in: transitions arrive from elsewhere, weights go out."""
    remote = _remote_collector()
    pulls, published = [], []

    from relayrl.core import SampleSource

    class QueueSource(SampleSource):  # stands in for a queue fed by remote workers
        def reset(self, seed):
            remote.reset(seed)

        def pull(self):
            pulls.append(1)
            return remote.pull()

        def pop_episodes(self):
            return remote.pop_episodes()

        def publish(self, weights, version):
            published.append(version)

    sets = ["dqn.start_training=64", "dqn.batch_size=32", "dqn.hidden_sizes=[16]", "dqn.update_model_interval=5",
            "eval.freq=0", "eval.episodes=2", "eval.num_envs=2"]
    summary = run_trainer(build_config("dqn", None, sets, {"total_steps": 320, "seed": 0}), run_dir=tmp_path / "r",
                          tensorboard=False, samples=QueueSource())
    assert len(pulls) == 10 and summary["env_steps"] == 320  # 10 pulls of 16 steps x 2 envs
    assert summary["updates"] > 0 and len(published) == summary["updates"] // 5 + 1
    assert published == sorted(published) and published[:2] == [0, 5]  # the start, then versions count updates


def test_update_buffer_interval_drains_a_polling_source_mid_round(tmp_path):
    """TMRL's update_buffer_interval: samples that arrive while the learner is busy join the buffer
    every k updates, not only between rounds, and their env steps are counted."""
    remote = _remote_collector()
    calls = {"pull": 0, "poll": 0}

    from relayrl.core import SampleSource

    class PollingSource(SampleSource):
        can_poll = True

        def reset(self, seed):
            remote.reset(seed)

        def pull(self):
            calls["pull"] += 1
            return remote.pull()

        def poll(self):  # one vector step "arrived" while the learner was updating
            calls["poll"] += 1
            return remote.collect(1)

        def pop_episodes(self):
            return remote.pop_episodes()

    sets = ["dqn.start_training=64", "dqn.batch_size=32", "dqn.hidden_sizes=[16]", "dqn.update_buffer_interval=4",
            "eval.freq=0", "eval.episodes=2", "eval.num_envs=2"]
    summary = run_trainer(build_config("dqn", None, sets, {"total_steps": 320, "seed": 0}), run_dir=tmp_path / "r",
                          tensorboard=False, samples=PollingSource())
    assert calls["poll"] > 0 and calls["poll"] == summary["updates"] // 4
    assert summary["env_steps"] == 32 * calls["pull"] + 2 * calls["poll"]
