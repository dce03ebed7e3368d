"""EnvManager (envs/keyed.py): DI-engine's id-keyed interface over the vector managers, on real envs and
real worker processes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs import EnvManager, EnvState, Timestep, make_vec
from relayrl.errors import EnvError

START = "relayrl.testing.envs:relayrl-test/Start-v0"
FAULTY = "relayrl.testing.envs:relayrl-test/Faulty-v0"
SLOW = "relayrl.testing.envs:relayrl-test/SlowCartPole-v0"
N = 4


def keyed(manager: str = "sync", env: str = "CartPole-v1", **kw) -> EnvManager:
    workers = {"workers": 2} if manager in ("subproc", "async") else {}
    return EnvManager(env, N, manager=manager, **workers, **kw)


def first_obs(seed: int) -> np.ndarray:
    return gym.make("CartPole-v1").reset(seed=seed)[0]


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_same_trajectories_as_the_array_interface_for_the_same_seeds_and_actions(manager):
    rng = np.random.default_rng(1)
    actions = rng.integers(0, 2, (120, N))
    kw = {"workers": 2} if manager == "subproc" else {}
    with make_vec("CartPole-v1", N, manager=manager, **kw) as venv, keyed(manager) as keyed_envs:
        venv.configure_resets(True, seed_stride=N)  # the array interface with the same per-episode seeds
        obs = venv.reset(seed=3)
        keyed_envs.seed(3, dynamic_seed=True)
        keyed_envs.launch()
        assert np.array_equal(np.stack(list(keyed_envs.ready_obs.values())), obs)
        ended = 0
        for row in actions:
            result = venv.step(row)
            timesteps = keyed_envs.step(dict(enumerate(row.tolist())))
            assert list(timesteps) == list(range(N))
            for i, t in timesteps.items():
                assert isinstance(t, Timestep)
                assert np.array_equal(t.obs, result.obs[i]) and t.reward == result.reward[i]
                assert (t.terminated, t.truncated, t.done) == (result.terminated[i], result.truncated[i],
                                                               result.done[i])
                if t.done:
                    ended += 1
                    assert np.array_equal(t.final_obs, result.final_obs[i])
                else:
                    assert t.final_obs is None
        assert ended > 10  # many episodes, each reset with its own seed, on both sides alike


def test_auto_reset_off_leaves_a_finished_env_in_need_reset_with_its_final_obs_until_reset():
    with keyed(auto_reset=False) as envs:
        envs.seed(0)
        envs.launch()
        while True:
            timesteps = envs.step({i: 0 for i in envs.ready_obs})
            ended = [i for i, t in timesteps.items() if t.done]
            if ended:
                break
        i = ended[0]
        t = timesteps[i]
        assert np.array_equal(t.obs, t.final_obs)  # not reset: its observation is where the episode ended
        assert envs.env_state[i] is EnvState.NEED_RESET and i not in envs.ready_obs
        row = envs.venv.arrays.obs[0][i].copy()
        others = envs.step({k: 0 for k in envs.ready_obs})
        assert i not in others and np.array_equal(envs.venv.arrays.obs[0][i], row)  # not stepped: row untouched
        envs.reset({i: {}})
        assert envs.env_state[i] is EnvState.RUN and i in envs.ready_obs
        assert not np.array_equal(envs.ready_obs[i], row)
        assert envs.episode_count[i] == 1


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_reset_with_per_env_options_reaches_the_env_and_later_resets_reuse_them(manager):
    with keyed(manager, env=START, auto_reset=True) as envs:
        envs.launch(reset_param={1: {"options": {"start": 5}}})
        assert [o[0] for o in envs.ready_obs.values()] == [0, 5, 0, 0]
        envs.reset({2: {"options": {"start": 7}, "seed": 1}})
        assert envs.ready_obs[2][0] == 7
        for _ in range(3):  # Start-v0's episodes last 3 steps: every env auto-resets
            timesteps = envs.step({i: 0 for i in range(N)})
        assert [t.final_obs[0] for t in timesteps.values()] == [3, 8, 10, 3]
        assert [t.obs[0] for t in timesteps.values()] == [0, 5, 7, 0]  # an env's last options, as DI-engine keeps them


def test_dynamic_seeds_give_each_episode_its_own_reproducible_start():
    def starts(dynamic: bool) -> dict[int, list[np.ndarray]]:
        with keyed() as envs:
            envs.seed(10, dynamic_seed=dynamic)
            envs.launch()
            found = {i: [o] for i, o in envs.ready_obs.items()}
            while min(map(len, found.values())) < 3:
                for i, t in envs.step({i: 0 for i in range(N)}).items():
                    if t.done:
                        found[i].append(t.obs)
            return {i: obs[:3] for i, obs in found.items()}

    dynamic = starts(True)
    for i, obs in dynamic.items():  # env i's episode e starts from seed 10 + i + e * num_envs
        assert all(np.array_equal(o, first_obs(10 + i + e * N)) for e, o in enumerate(obs))
    assert len({o.tobytes() for obs in dynamic.values() for o in obs}) == 3 * N
    again = starts(True)
    assert all(np.array_equal(a, b) for i in dynamic for a, b in zip(dynamic[i], again[i]))
    static = starts(False)  # every episode of env i from seed 10 + i
    assert all(np.array_equal(o, first_obs(10 + i)) for i, obs in static.items() for o in obs)


@pytest.mark.parametrize("auto_reset", [True, False])
def test_episode_num_stops_each_env_and_then_the_manager(auto_reset):
    with keyed(env=START, auto_reset=auto_reset, episode_num=2) as envs:
        envs.launch(reset_param={0: {"options": {"start": 0}}})
        steps = 0
        while not envs.done:
            ready = envs.ready_obs
            timesteps = envs.step({i: 0 for i in ready})
            steps += 1
            for i, t in timesteps.items():
                if t.done and envs.env_state[i] is EnvState.NEED_RESET:
                    envs.reset({i: {}})
        assert steps == 6 and envs.episode_count == {i: 2 for i in range(N)}
        assert set(envs.env_state.values()) == {EnvState.DONE} and envs.ready_obs == {}
        with pytest.raises(EnvError, match=r"env 0 is DONE .*episode_num=2.*manager.reset\(\{0: \{\}\}\)"):
            envs.step({0: 0})


def test_async_ready_obs_are_the_envs_not_stepping_and_a_step_takes_a_subset():
    slow = [{"busy_us": 0}] * 2 + [{"busy_us": 0, "sleep_us": 300_000}] * 2  # worker 1's envs take 0.3 s a step
    with keyed("async", env=SLOW, env_kwargs=slow) as envs:
        envs.seed(0)
        envs.launch()
        assert list(envs.ready_obs) == [0, 1, 2, 3]
        assert list(envs.step({1: 0})) == [1]  # worker 0 steps env 1 alone
        assert list(envs.ready_obs) == [0, 1, 2, 3]
        assert list(envs.step({i: 0 for i in range(N)})) == [0, 1]  # the fast worker answers first
        assert list(envs.ready_obs) == [0, 1]
        with pytest.raises(EnvError, match=r"env 2 is still stepping \(async manager\).*manager.ready_obs"):
            envs.step({0: 1, 2: 0})
        with pytest.raises(EnvError, match=r"envs \[3\] are still stepping"):
            envs.reset({3: {}})
        assert list(envs.step({})) == [2, 3]  # nothing to send: wait for the stepping ones
        assert list(envs.ready_obs) == [0, 1, 2, 3]


def test_an_env_error_is_reported_and_without_auto_reset_the_env_waits_in_error_for_reset():
    for auto_reset, state in ((True, EnvState.RUN), (False, EnvState.ERROR)):
        with keyed(env=FAULTY, auto_reset=auto_reset, env_kwargs=[{"raise_at": 2}, {}, {}, {}]) as envs:
            envs.launch()
            envs.step({i: 0 for i in range(N)})
            t = envs.step({i: 0 for i in range(N)})[0]
            assert t.truncated and "injected failure at step 2" in t.info["env_error"]
            assert envs.env_state[0] is state and "injected failure" in envs.errors[0]
            assert envs.episode_count[0] == 0  # an errored episode does not count
            if not auto_reset:
                assert 0 not in envs.ready_obs
                with pytest.raises(EnvError, match=r"env 0 is in ERROR .*manager.reset\(\{0: \{\}\}\)"):
                    envs.step({0: 0})
                envs.reset({0: {}})
                assert envs.env_state[0] is EnvState.RUN and 0 not in envs.errors


def test_native_runs_with_auto_reset_and_every_env_per_step_and_refuses_the_rest():
    with keyed("native") as envs:
        envs.launch()
        for _ in range(30):
            assert len(envs.step({i: 1 for i in envs.ready_obs})) == N
        with pytest.raises(EnvError, match="native manager steps every env on every call"):
            envs.step({0: 1})
        with pytest.raises(EnvError, match="takes no per-episode seeds; use manager='sync' or 'subproc'"):
            envs.seed(0)
    with pytest.raises(EnvError, match="auto_reset=False needs envs stepped .* use manager='sync' or 'subproc'"):
        keyed("native", auto_reset=False)
    with pytest.raises(EnvError, match="episode_num=3 needs"):
        keyed("native", episode_num=3)
    with make_vec("CartPole-v1", 2, manager="native") as venv, pytest.raises(EnvError, match="the native manager"):
        EnvManager.over(venv, auto_reset=False)


def test_over_views_a_vector_env_built_by_make_vec():
    with make_vec(START, N) as venv:
        envs = EnvManager.over(venv, auto_reset=False, episode_num=1)
        envs.launch(reset_param={0: {"options": {"start": 2}}})
        assert envs.ready_obs[0][0] == 2 and envs.env_num == N
        for _ in range(3):
            envs.step({i: 0 for i in envs.ready_obs})
        assert envs.done and venv.autoreset is False


# ---------------------------------------------------------------- bad input: one message each, naming env and fix


def test_unknown_env_ids_in_step_are_named():
    with keyed() as envs:
        envs.launch()
        with pytest.raises(EnvError, match=r"unknown env ids \[7, 9\]: this manager's envs are 0..3"):
            envs.step({0: 0, 7: 1, 9: 1})


def test_an_action_for_an_env_in_need_reset_names_it_and_the_reset():
    with keyed(env=START, auto_reset=False) as envs:
        envs.launch()
        for _ in range(3):
            envs.step({i: 0 for i in range(N)})
        with pytest.raises(EnvError, match=r"env 2 is NEED_RESET .*manager.reset\(\{2: \{\}\}\) before"):
            envs.step({2: 0})


def test_reset_parameters_other_than_seed_and_options_say_to_put_them_under_options():
    with keyed(env=START) as envs:
        envs.launch()
        with pytest.raises(EnvError, match=r"env 1 has keys \['start'\] .*takes seed and options.*under options"):
            envs.reset({1: {"start": 3}})
        with pytest.raises(EnvError, match=r"unknown env ids \[8\]"):
            envs.reset({8: {}})


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_options_the_env_refuses_give_its_message_naming_the_env_and_the_manager_goes_on(manager):
    with keyed(manager, env=START) as envs:
        envs.launch()
        with pytest.raises(EnvError, match=r"env 3 refused reset options \['speed'\]: TypeError: .*'speed'"):
            envs.reset({3: {"options": {"speed": 2}}})
        assert envs.env_state[3] is EnvState.RUN
        envs.reset({3: {"options": {"start": 4}}})  # the same workers go on
        assert envs.ready_obs[3][0] == 4 and len(envs.step({i: 0 for i in range(N)})) == N
        # one refusal in a reset of several envs (on different workers under subproc): the others reset, and say so
        with pytest.raises(EnvError, match=r"env 3 refused reset options.*\(envs \[0\] of the same reset\(\) were reset\)"):
            envs.reset({0: {"options": {"start": 7}}, 3: {"options": {"speed": 2}}})
        assert envs.ready_obs[0][0] == 7 and envs.env_state[0] is EnvState.RUN


def test_step_or_reset_before_launch_and_episode_num_below_one_are_refused():
    with keyed() as envs:
        assert set(envs.env_state.values()) == {EnvState.VOID}
        with pytest.raises(EnvError, match=r"step\(\) before launch\(\): call manager.launch\(\)"):
            envs.step({0: 0})
        with pytest.raises(EnvError, match=r"reset\(\) before launch\(\)"):
            envs.reset({0: {}})
    for bad in (0, -1, 1.5):
        with pytest.raises(EnvError, match=f"episode_num must be a whole number of at least 1.*got {bad}"):
            keyed(episode_num=bad)
