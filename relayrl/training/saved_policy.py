"""A saved policy, loaded and evaluated: ``load_policy`` rebuilds a checkpoint's policy (``relayrl.load``,
``relayrl export``); ``evaluate_checkpoint`` is ``relayrl eval RUN_DIR|CHECKPOINT`` (the ``Evaluator`` of
training/evaluator.py on fresh envs, a GIF or mp4 files of its episodes on request)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.algos import get_algo
from relayrl.config import validate
from relayrl.envs.managers import make_vec
from relayrl.envs.masks import info_mask
from relayrl.envs.multiagent import MultiAgentVectorEnv, agent_env_factory, is_pettingzoo, pettingzoo_factory
from relayrl.envs.native import in_process_manager
from relayrl.envs.registry import make
from relayrl.envs.space_data import SpaceDataError, space_from_data
from relayrl.envs.turn_based import TurnBasedEnv, game_factory, is_turn_based
from relayrl.errors import CheckpointError, ConfigError, EnvError, install_hint
from relayrl.io.checkpoint import Checkpoint, explain_load_error, load_checkpoint
from relayrl.io.rundir import BEHAVIOURS_DIR, behaviour_names, behaviour_run, check_behaviour
from relayrl.io.video import VisibleFrames, write_gif
from relayrl.options import RunConfig
from relayrl.training.agent_collectors import AgentEvaluator
from relayrl.training.evaluator import Evaluator


def behaviour_checkpoint(path: Path | str, behaviour: str | None = None) -> tuple[Checkpoint, dict[str, Checkpoint]]:
    """The checkpoint of ``path`` (a run directory: its best, else its last) for ``behaviour`` (required for a run of
    several behaviours), and the other behaviours' checkpoints of such a run (their policies act beside it)."""
    run = behaviour_run(path, behaviour)
    ckpt = load_checkpoint(run)
    check_behaviour(ckpt.meta, ckpt.path, behaviour)
    partners = {}
    if run != Path(path):
        partners = {name: load_checkpoint(Path(path) / BEHAVIOURS_DIR / name)
                    for name in behaviour_names(Path(path)) if name != behaviour}
    return ckpt, partners


def deployment(path: Path | str) -> tuple[RunConfig, Path]:
    """The config a run trained with and its checkpoint to act with (its best, else its last), for a worker that
    runs the trained policy with no trainer (``relayrl worker --deploy RUN``)."""
    if (Path(path) / BEHAVIOURS_DIR).is_dir():
        raise CheckpointError(f"{str(path)!r} trained several behaviours of a simulator: deploy one behaviour's run, "
                              f"{str(Path(path) / BEHAVIOURS_DIR / 'NAME')}")
    ckpt = load_checkpoint(Path(path))
    return validate(ckpt.meta.get("algo"), ckpt.meta["config"]), ckpt.path


def load_policy(ckpt: Checkpoint, env_id: str | None = None):
    """Rebuild the policy stored in ``ckpt`` for ``env_id`` (default: the env it was trained on)."""
    algo_name = ckpt.meta.get("algo")
    config = validate(algo_name, ckpt.meta["config"])
    env_id = env_id or config.env.id
    env = _spaces_env(env_id, config, ckpt.meta.get("spaces"))
    try:
        policy = get_algo(algo_name).build_policy(config.algo_config, env.observation_space, env.action_space)
        policy.set_weights(ckpt.state["algo"])
    except ConfigError as exc:  # e.g. the network it records (ppo.encoder) no longer imports here
        raise CheckpointError(f"checkpoint {str(ckpt.path)!r} cannot rebuild its policy here: {exc}") from None
    except (RuntimeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {str(ckpt.path)!r} (trained on {config.env.id}) does not fit {env_id}'s "
                              f"spaces: {explain_load_error(exc)}; evaluate on an env with the same observation "
                              "and action spaces") from None
    finally:
        env.close()
    return policy, config, env_id


class _AgentSpaces:
    """An agent env's spaces under a Gymnasium env's names (what ``load_policy`` reads)."""

    def __init__(self, env: MultiAgentVectorEnv):
        self.env, self.observation_space, self.action_space = env, env.single_observation_space, env.single_action_space

    def close(self) -> None:
        self.env.close()


class _PlayerSpaces:
    """One player's spaces of a turn-based game (the player a checkpoint's ``env.kwargs.behaviour`` names)."""

    def __init__(self, env: TurnBasedEnv, player: str):
        self.env, behaviour = env, env.behaviours[player]
        self.observation_space, self.action_space = behaviour.observation_space, behaviour.action_space

    def close(self) -> None:
        self.env.close()


class _StoredSpaces:
    """The spaces a checkpoint records (a simulator's run: no env to build here)."""

    def __init__(self, spaces: dict[str, Any], where: str):
        try:
            self.observation_space = space_from_data(spaces["observation"])
            self.action_space = space_from_data(spaces["action"])
        except (SpaceDataError, KeyError, TypeError) as exc:
            raise CheckpointError(f"checkpoint {where!r} records spaces that do not parse ({exc}): the file is "
                                  "damaged; use another checkpoint of the run") from None

    def close(self) -> None:
        pass


def _spaces_env(env_id: str, config, stored: dict[str, Any] | None = None) -> gym.Env | _AgentSpaces | _StoredSpaces:
    """An env of ``env_id`` to read the spaces from (a PettingZoo id: one copy, one agent's spaces; a simulator:
    the spaces the checkpoint records)."""
    if env_id.startswith("bridge:"):
        if stored is None:
            raise CheckpointError(f"the checkpoint of {env_id!r} records no spaces (written before relayrl stored "
                                  "them): evaluate it with relayrl eval, which launches the simulator")
        return _StoredSpaces(stored, env_id)
    if is_pettingzoo(env_id) and is_turn_based(env_id, config.env.kwargs):
        env = TurnBasedEnv([game_factory(env_id, config.env.kwargs)])
        try:
            return _PlayerSpaces(env, _player(env, config, env_id))
        except BaseException:
            env.close()
            raise
    if is_pettingzoo(env_id):
        return _AgentSpaces(_pettingzoo_envs(env_id, config, 1))
    return make(env_id, **config.env.wrapping(), **config.env.kwargs)


def _player(env: TurnBasedEnv, config, env_id: str) -> str:
    """The player of ``env`` whose policy a checkpoint with ``config`` holds (its ``env.kwargs.behaviour``; a
    self-play run's policy plays every side, with the first side's spaces)."""
    if config.selfplay.active:
        return (config.selfplay.sides or list(env.behaviours))[0]
    player = config.env.kwargs.get("behaviour")
    if player not in env.behaviours:
        held = f"player {player!r}'s policy" if player else "one policy, not a player's"
        raise CheckpointError(f"{env_id} is a turn-based game with a policy per player {list(env.behaviours)}, but "
                              f"the checkpoint holds {held}: pass a checkpoint of a run trained on this game, with "
                              "--behaviour PLAYER")
    return player


def _pettingzoo_envs(env_id: str, config, copies: int) -> MultiAgentVectorEnv:
    return MultiAgentVectorEnv([agent_env_factory(config, pettingzoo_factory(env_id))] * copies)


def evaluate_checkpoint(path: Path | Checkpoint, episodes: int = 10, env_id: str | None = None, seed: int = 0,
                        render: str | None = None, video: Path | str | None = None,
                        video_episodes: int = 1, partners: dict[str, Checkpoint] | None = None) -> dict[str, Any]:
    """``path``: a checkpoint file or run directory, or a Checkpoint already loaded; ``render``: a GIF of one
    episode; ``video``: a folder for ``video_episodes`` episodes as mp4 files (the ``video`` extra); ``partners``:
    of a player of a turn-based game, the other players' checkpoints (``behaviour_checkpoint``), whose policies
    play against it (players without one get the game's default answer, their lowest allowed action)."""
    if episodes < 1:
        raise CheckpointError(f"--episodes {episodes}: evaluate at least 1 episode")
    if video is not None:
        require_video()
        if video_episodes < 1:
            raise ConfigError(f"--video-episodes {video_episodes}: record at least 1 episode")
    ckpt = path if isinstance(path, Checkpoint) else load_checkpoint(path)
    policy, config, env_id = load_policy(ckpt, env_id)
    if is_pettingzoo(env_id) and is_turn_based(env_id, config.env.kwargs):  # a player against its partners
        if render is not None or video is not None:
            raise ConfigError(f"{env_id}: --render and --video record single-agent Gymnasium envs; evaluate a "
                              "turn-based game without them")
        result = _evaluate_player(policy, config, env_id, episodes, seed, partners or {})
    elif is_pettingzoo(env_id):  # every agent of the copies is a row: episodes per agent (the training evaluator's)
        if render is not None or video is not None:
            raise ConfigError(f"{env_id}: --render and --video record single-agent Gymnasium envs; evaluate a "
                              "PettingZoo run without them")
        with _pettingzoo_envs(env_id, config, min(episodes, 10)) as env:
            result = AgentEvaluator(env, episodes, seed=seed).evaluate(policy)
    else:
        cfg = config.env
        env_args = dict(env_kwargs=cfg.kwargs, max_episode_steps=cfg.max_episode_steps, wrapping=cfg.wrapping(),
                        manager=in_process_manager(cfg.manager, env_id, cfg.kwargs, cfg.wrapping()))
        with make_vec(env_id, min(episodes, 10), **env_args) as venv:
            result = Evaluator(venv, episodes, seed=seed).evaluate(policy)
    out: dict[str, Any] = {
        "env": env_id, "checkpoint": str(ckpt.path), "episodes": len(result.returns),
        "return_mean": result.mean, "return_std": result.std,
        "length_mean": float(result.lengths.mean()), "length_std": float(result.lengths.std()),
    }
    if render is not None:
        target = Path(render) if render else ckpt.path.parent.parent / "episode.gif"
        out["gif"] = str(record_episode(policy, env_id, config, target, seed))
    if video is not None:
        out["videos"] = [str(p) for p in record_videos(policy, env_id, config, Path(video), video_episodes, seed)]
    return out


def _evaluate_player(policy, config, env_id: str, episodes: int, seed: int,
                     partners: dict[str, Checkpoint]) -> Any:
    """Deterministic episodes of the player ``config.env.kwargs.behaviour`` of a turn-based game, the other players
    acting deterministically with their ``partners`` policies."""
    from relayrl.training.behaviours import JointEvaluation

    with TurnBasedEnv([game_factory(env_id, config.env.kwargs)] * min(episodes, 10)) as env:
        player = _player(env, config, env_id)
        others = {name: load_policy(partner)[0] for name, partner in partners.items() if name in env.behaviours}
        if config.selfplay.active:  # a self-play run's policy plays every side
            others = {name: policy for name in env.behaviours if name != player}
        return JointEvaluation(env, player, others, episodes, seed).evaluate(policy)


def require_video() -> None:
    """Refuse ``--video`` without moviepy (what Gymnasium's RecordVideo writes mp4 files with), before
    anything is read or written."""
    try:
        from moviepy.video.io.ImageSequenceClip import ImageSequenceClip  # noqa: F401  (what RecordVideo uses)
    except ImportError:
        raise ConfigError("--video needs the moviepy package, which is not installed: install relayrl's video extra, "
                          f"{install_hint('video')}, or use --render FILE.gif") from None


def _rgb_env(env_id: str, config, flag: str) -> gym.Env:
    """The env with ``render_mode="rgb_array"`` and its frames made visible (``relayrl.io.video.VisibleFrames``),
    or an EnvError naming ``flag`` to drop."""
    # frames to an array need no window: without this, pygame-drawn envs (classic control) make SDL look for a
    # display and print "XDG_RUNTIME_DIR is invalid or not set" on a headless machine, although nothing fails
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env = make(env_id, render_mode="rgb_array", max_episode_steps=config.env.max_episode_steps,
               **config.env.wrapping(), **config.env.kwargs)
    if "rgb_array" not in env.metadata.get("render_modes", []):
        env.close()
        raise EnvError(f"{env_id} cannot render to rgb_array, so no episode can be recorded; drop {flag}")
    return VisibleFrames(env)  # uint8 RGB of at least 160 px a side: MinAtar's 10x10 [0, 1] colours are no picture


def record_videos(policy, env_id: str, config, folder: Path, episodes: int = 1, seed: int = 0,
                  max_steps: int = 100_000) -> list[Path]:
    """Run ``episodes`` deterministic episodes (seeds ``seed``, ``seed + 1``, ...) through Gymnasium's
    ``RecordVideo`` and return the mp4 files, ``<folder>/<env>-episode-<k>.mp4`` (files of that name are
    replaced). ``max_steps`` bounds an episode of an env without a time limit."""
    import warnings

    from gymnasium.wrappers import RecordVideo

    prefix = env_id.rpartition(":")[2].replace("/", "-")
    env = _rgb_env(env_id, config, "--video")
    with warnings.catch_warnings():  # "Overwriting existing videos at ...": a folder the user chose
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
        env = RecordVideo(env, str(folder), episode_trigger=lambda episode: True, name_prefix=prefix,
                          disable_logger=True)
    try:
        for k in range(episodes):
            obs, info = env.reset(seed=seed + k)
            policy.reset_hidden("eval")
            done, steps = False, 0
            while not done and steps < max_steps:
                mask = info_mask(info, env.action_space)
                action = policy.act_masked(np.asarray(obs)[None], "eval", mask).env_action[0]
                obs, _, terminated, truncated, info = env.step(action)
                done, steps = terminated or truncated, steps + 1
    except gym.error.DependencyNotInstalled as exc:
        raise EnvError(f"{env_id} cannot render here: {exc}") from None
    finally:
        env.close()  # writes the last episode's file
    paths = [Path(folder) / f"{prefix}-episode-{k}.mp4" for k in range(episodes)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise EnvError(f"{env_id}: no video was written for {', '.join(missing)} (the env rendered no frames?)")
    return paths


def record_episode(policy, env_id: str, config, path: Path, seed: int = 0, max_frames: int = 1000) -> Path:
    """Run one deterministic episode with ``render_mode="rgb_array"`` and write it as a GIF (every frame, the
    reset's and each step's)."""
    env = _rgb_env(env_id, config, "--render")
    obs, info = env.reset(seed=seed)
    try:
        frames = [env.render()]
    except gym.error.DependencyNotInstalled as exc:
        env.close()
        raise EnvError(f"{env_id} cannot render here: {exc}") from None
    policy.reset_hidden("eval")
    done = False
    while not done and len(frames) < max_frames:
        action = policy.act_masked(np.asarray(obs)[None], "eval", info_mask(info, env.action_space)).env_action[0]
        obs, _, terminated, truncated, info = env.step(action)
        frames.append(env.render())
        done = terminated or truncated
    fps = int(env.metadata.get("render_fps") or 30)
    env.close()
    return write_gif(frames, path, fps)
