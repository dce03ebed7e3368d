import numpy as np
import pytest

from relayrl.data.replay import EpisodeBuffer


def episode(tag, length):
    """obs = [tag, step]; the last step terminates."""
    return {"obs": np.stack([np.full(length, tag), np.arange(length)], 1).astype(np.float32),
            "reward": np.ones(length, np.float32),
            "terminated": np.arange(length) == length - 1, "truncated": np.zeros(length, bool)}


def test_interleaved_vector_steps_become_whole_episodes():
    buf = EpisodeBuffer(100, seed=0)
    # env 0 runs an episode of 3 steps, env 1 one of 2, interleaved as a vector env delivers them
    rows = [(0, 0, False), (1, 0, False), (0, 1, False), (1, 1, True), (0, 2, True)]
    batch = {"env_id": np.array([r[0] for r in rows]), "obs": np.array([[r[0], r[1]] for r in rows], np.float32),
             "terminated": np.array([r[2] for r in rows]), "truncated": np.zeros(5, bool)}
    assert buf.add(batch) == 2 and len(buf) == 5
    eps = buf.sample_episodes(20)
    for obs, length in zip(eps["obs"], eps["length"]):
        tag = obs[0, 0]
        assert length == (3 if tag == 0 else 2)
        np.testing.assert_array_equal(obs[:length, 1], np.arange(length))  # in order, one env only


def test_sequences_never_cross_episode_boundaries_and_are_masked():
    buf = EpisodeBuffer(1000, seed=0)
    for tag, length in enumerate([5, 12, 3, 20]):
        buf.add_episode(episode(tag, length))
    seq = buf.sample_sequences(500, 8)
    assert seq["obs"].shape == (500, 8, 2) and seq["mask"].shape == (500, 8)
    for obs, mask in zip(seq["obs"], seq["mask"]):
        real = obs[mask]
        assert len(set(real[:, 0])) == 1  # one episode per sequence
        np.testing.assert_array_equal(np.diff(real[:, 1]), 1)  # consecutive steps
        assert mask[0] and (mask[:mask.sum()]).all()  # padding only at the end
        assert (obs[~mask] == 0).all()
    # starts are uniform over stored steps: the 20-step episode is chosen about 20/40 of the time
    share = np.mean(seq["episode"] == 3)
    assert 0.4 < share < 0.6


def test_wraparound_drops_overwritten_episodes_whole():
    buf = EpisodeBuffer(10, seed=0)
    buf.add_episode(episode(0, 4))
    buf.add_episode(episode(1, 4))
    buf.add_episode(episode(2, 4))  # rows 8, 9, 0, 1: episode 0 is overwritten and dropped
    assert len(buf.episodes) == 2 and len(buf) == 8
    tags = set(buf.sample_episodes(50)["obs"][:, 0, 0].tolist())
    assert tags == {1.0, 2.0}
    eps = buf.sample_episodes(50)
    for obs, length in zip(eps["obs"], eps["length"]):
        np.testing.assert_array_equal(obs[:length, 1], np.arange(4))  # the wrapped episode reads in order
    with pytest.raises(ValueError, match="does not fit"):
        buf.add_episode(episode(9, 11))


def test_sampling_an_empty_buffer_is_a_clear_error():
    with pytest.raises(ValueError, match="no complete episode"):
        EpisodeBuffer(10).sample_sequences(1, 4)
