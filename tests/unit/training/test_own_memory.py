"""Your own memory (``<algo>.replay``), the sampled-batch hook (``<algo>.sample_transform``) and a replay that
starts from a dataset (``<algo>.dataset``): real DQN runs on CartPole through the command line, the user's code
written as modules into the working folder. Mistakes: one line, exit code 2, no run directory."""

import json
import sys
import textwrap

import numpy as np
import gymnasium as gym
import pytest

from relayrl.cli import main

MEMORY = '''
import json
from pathlib import Path

import numpy as np

from relayrl.data.replay import Replay

ADDED = []
INSTANCES = []


class ListMemory(Replay):
    """Transitions as a list of rows; counts what it is given (ADDED) and saves that count."""

    def __init__(self, *, capacity, observation_space, action_space, seed, batch_size):
        self.capacity, self.rows, self.rng = capacity, [], np.random.default_rng(seed)
        self.loaded = None
        INSTANCES.append(self)

    def add(self, batch):
        n = len(batch["obs"])
        ADDED.append(n)
        self.rows += [{k: np.asarray(v[i]) for k, v in batch.items()} for i in range(n)]
        del self.rows[:-self.capacity]

    def sample(self, n, version=None):
        if not self.rows:
            return None
        pick = self.rng.integers(0, len(self.rows), n)
        return {k: np.stack([self.rows[i][k] for i in pick]) for k in self.rows[0]}

    def __len__(self):
        return len(self.rows)

    def save(self, path):
        Path(path).write_text(json.dumps({"rows": len(self.rows)}))

    def load(self, path):
        self.loaded = json.loads(Path(path).read_text())["rows"]
        ADDED.append(("loaded", self.loaded))


class NoObs(ListMemory):
    def sample(self, n, version=None):
        batch = super().sample(n)
        return None if batch is None else {k: v for k, v in batch.items() if k != "obs"}


class Flat(ListMemory):
    def sample(self, n, version=None):
        batch = super().sample(n)
        return None if batch is None else {**batch, "reward": batch["reward"][:, None]}


class Late(ListMemory):
    """Passes the probe (32 rows), then drops a column."""

    def sample(self, n, version=None):
        batch = super().sample(n)
        if batch is None or len(self.rows) <= 32:
            return batch
        return {k: v for k, v in batch.items() if k != "discount"}


class Positional(Replay):
    def __init__(self, size):
        pass


class NotAMemory:
    pass


def shift(batch):
    ADDED.append("transformed")
    return {**batch, "obs": batch["obs"] + np.float32(0.5)}


def shrink(batch):
    return {**batch, "obs": batch["obs"][:, :2]}


def retype(batch):
    return {**batch, "reward": batch["reward"].astype(np.float64)}


def drop(batch):
    return {k: v for k, v in batch.items() if k != "terminated"}


NOT_CALLABLE = 3
'''

FAST = ["--env", "CartPole-v1", "--set", "dqn.start_training=64", "--set", "dqn.batch_size=32", "--quiet"]


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """The user's module ``mymem`` in the working folder; the module object once a run imported it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mymem.py").write_text(textwrap.dedent(MEMORY))
    monkeypatch.delitem(sys.modules, "mymem", raising=False)
    yield lambda: sys.modules["mymem"]
    sys.modules.pop("mymem", None)


def cartpole_npz(path, n=200):
    env, rng = gym.make("CartPole-v1"), np.random.default_rng(0)
    rows = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
    obs, _ = env.reset(seed=0)
    for _ in range(n):
        action = int(rng.integers(2))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, next_obs, terminated, truncated)):
            rows[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    np.savez(path, **{k: np.array(v) for k, v in rows.items()})
    return path


def test_own_memory_holds_what_training_collects_and_is_saved_and_loaded_on_resume(user_code, tmp_path):
    assert main(["train", "dqn", *FAST, "--total-steps", "256", "--set", "dqn.replay=mymem:ListMemory",
                 "--run-dir", "run"]) == 0
    probe, memory = user_code().INSTANCES  # (the probe checked the class before the run)
    assert len(probe) == 32 and len(memory) > 200  # what 256 env steps of CartPole gave (n-step: a few pend)
    saved = json.loads((tmp_path / "run" / "checkpoints" / "replay.safetensors").read_text())["rows"]
    assert saved == len(memory)
    assert main(["train", "--resume", "run", "--total-steps", "384", "--quiet"]) == 0
    assert ("loaded", saved) in user_code().ADDED  # --resume imported the class again and loaded its save


def test_sample_transform_is_applied_to_every_sampled_batch(user_code, tmp_path):
    assert main(["train", "dqn", *FAST, "--total-steps", "192", "--set", "dqn.sample_transform=mymem:shift",
                 "--run-dir", "run"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    calls = user_code().ADDED.count("transformed")
    assert summary["updates"] > 0 and calls == summary["updates"] + 1  # every update's batch (+ the check's)
    assert "sample_transform: 'mymem:shift'" in (tmp_path / "run" / "config.yaml").read_text()


def test_replay_starts_from_a_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cartpole_npz(tmp_path / "cartpole.npz")
    # 64 env steps never reach start_training=100 alone: the 200 transitions of the dataset do
    assert main(["train", "dqn", "--env", "CartPole-v1", "--set", "dqn.start_training=100", "--set",
                 "dqn.batch_size=32", "--set", "dqn.dataset=cartpole.npz", "--set", "dqn.updates_per_step=1",
                 "--total-steps", "64", "--quiet",
                 "--run-dir", "run"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # learning begins at once, at one update per env step from there: the dataset's transitions are no env steps,
    # so they make no updates due (they did: 100 more in the first round, all at once)
    assert 0 < summary["updates"] <= summary["env_steps"]


@pytest.mark.parametrize("sets, expected", [
    (["dqn.replay=nosuchmod:Memory"], "dqn.replay 'nosuchmod:Memory': cannot import module 'nosuchmod'"),
    (["dqn.replay=mymem:Missing"], "module 'mymem'"),
    (["dqn.replay=mymem:NotAMemory"], "not a subclass of relayrl.data.replay.Replay"),
    (["dqn.replay=mymem:Positional"], "cannot be called with the keywords capacity, observation_space"),
    (["dqn.replay=mymem:NoObs"], "returned no 'obs'"),
    (["dqn.replay=mymem:Flat"], "returned 'reward' as ndarray (32, 1) float32, where (32,) float32 was expected"),
    (["dqn.replay=mymem:ListMemory", "dqn.prioritized=true"], "does not do priorities"),
    (["dqn.replay=mymem:ListMemory", "dqn.max_use=2"], "dqn.max_use is an option of the built-in replay buffer"),
    (["dqn.sample_transform=mymem:shrink"], "returned 'obs' as ndarray (32, 2) float32, where (32, 4) float32"),
    (["dqn.sample_transform=mymem:retype"], "returned 'reward' as ndarray (32,) float64, where (32,) float32"),
    (["dqn.sample_transform=mymem:drop"], "returned no 'terminated'"),
    (["dqn.sample_transform=mymem:NOT_CALLABLE"], "is 3, not callable"),
    (["dqn.sample_transform=nosuchmod:f"], "cannot import module 'nosuchmod'"),
    (["dqn.dataset=none.npz"], "dataset 'none.npz' not found"),
    (["dqn.dataset=pendulum.npz"], "obs has shape (50, 3), expected (50, 4)"),
    (["dqn.dataset=cartpole.npz", "dqn.buffer_size=100"], "raise buffer_size to at least 200"),
    (["dqn.dataset=cartpole.npz", "dqn.replay_shards=2"], "set dqn.replay_shards=0"),
])
def test_memory_hook_and_dataset_mistakes_exit_2_with_one_line_and_write_nothing(sets, expected, user_code, tmp_path,
                                                                                   capsys):
    cartpole_npz(tmp_path / "cartpole.npz")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "pendulum.npz", obs=rng.normal(size=(50, 3)), action=np.zeros(50, np.int64),
             reward=np.zeros(50), next_obs=rng.normal(size=(50, 3)), terminated=np.zeros(50, bool))
    before = sorted(p.name for p in tmp_path.iterdir())
    args = ["train", "dqn", *FAST, "--total-steps", "128"]
    for item in sets:
        args += ["--set", item]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == before  # no run directory


def test_a_memory_that_breaks_the_contract_on_real_transitions_stops_the_run_naming_it(user_code, tmp_path, capsys):
    code = main(["train", "dqn", *FAST, "--total-steps", "256", "--set", "dqn.replay=mymem:Late", "--run-dir", "run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "dqn.replay 'mymem:Late': sample(32) after the first transitions of the run returned no 'discount'" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stop_reason"] == "error"


def test_a_dataset_without_the_columns_the_env_s_transitions_carry_stops_the_run_naming_them(tmp_path, monkeypatch,
                                                                                              capsys):
    monkeypatch.chdir(tmp_path)
    env, rng = gym.make("relayrl.testing.masked:relayrl-test/MaskedChoice-v0"), np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    rows = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated")}
    for _ in range(100):
        action = int(rng.integers(env.action_space.n))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, next_obs, terminated)):
            rows[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    np.savez(tmp_path / "masked.npz", **{k: np.array(v) for k, v in rows.items()})
    code = main(["train", "dqn", "--env", "relayrl.testing.masked:relayrl-test/MaskedChoice-v0", "--total-steps", "64",
                 "--set", "dqn.dataset=masked.npz", "--quiet", "--run-dir", "run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "this env's transitions also carry next_action_mask" in err and "train without dqn.dataset" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
