"""What the trainer checks of a chunk from a remote worker before the pool may take it.

``ChunkChecks(config, observation_space, action_space).check(msg)`` returns the chunk's arrays (after
``net.decompressor``) or raises ``Refusal``: a chunk from a worker on another env or algo, a buggy
compressor, a NaN reward, a missing or invalid ``env_steps``, bad observation moments, other spaces.
The causes are ``CAUSES`` (the ``net/refused/<cause>`` metrics, and what the worker is told on the
ack). The expected arrays are those of docs/wire-protocol.md, "Samples chunks": transitions
off-policy, a RolloutStore's [T, n] rollout on-policy (data/rollout.py).
"""

from __future__ import annotations

import zlib
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.algos import get_algo
from relayrl.data.dtypes import stored_dtype
from relayrl.envs.masks import mask_width
from relayrl.errors import EnvError, RelayRLError
from relayrl.net import wire
from relayrl.net.hooks import load_hook
from relayrl.envs.space_data import SpaceDataError, space_from_data
from relayrl.options import RunConfig
from relayrl.types import Batch

# The arrays of an off-policy chunk (docs/wire-protocol.md, "Samples chunks"), after net.decompressor.
FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "discount")
# The arrays of an on-policy chunk (a RolloutStore's, data/rollout.py), "hidden" only for recurrent policies.
ROLLOUT_FIELDS = ("obs", "action", "logp", "value", "reward", "terminated", "truncated", "next_value")
ROLLOUT_FINITE = ("logp", "value", "reward", "next_value")
# Why a chunk is refused: net/refused/<cause>, and the cause the worker is told.
CAUSES = ("env_steps", "decompress", "missing", "extra", "rows", "empty", "shape", "dtype", "nonfinite", "moments",
          "spaces")
_SAME_RUN = ("run the worker with the trainer's --env, --algo and --config/--set options (and, with a "
             "net.compressor, the one that matches the trainer's net.decompressor)")
_SENDER_BUG = ("check the worker's net.compressor (or, for a worker of your own, docs/wire-protocol.md, \"Samples "
               "chunks\")")

Schema = dict[str, tuple[tuple, tuple[np.dtype, ...]]]


class Refusal(Exception):
    """A chunk the trainer will not use: ``cause`` (one of CAUSES), what is wrong, and the fix."""

    def __init__(self, cause: str, problem: str, fix: str):
        super().__init__(f"{problem}: {fix}")
        self.cause, self.problem, self.fix = cause, problem, fix


class ChunkChecks:
    """The arrays a chunk must hold for the trainer's env, algorithm and policy, and the checks of one chunk.
    ``bind(observation_space, action_space)`` once the spaces are known (with ``net.remote_env``, from the
    first worker that describes them)."""

    def __init__(self, config: RunConfig, observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None):
        net = config.net
        self.config = config
        self.on_policy = get_algo(config.algo).on_policy
        self.num_steps = config.algo_config.num_steps if self.on_policy else 0
        self.num_envs = config.env.num_envs
        self.decompress: Callable[[Batch], Batch] | None = load_hook(net.decompressor, "net.decompressor")
        self.decompressor = net.decompressor
        self.crc_debug = net.crc_debug
        self.env_name = f"{config.env.id}, {config.algo}"
        self._spaces_ok: dict[str, Any] = {}  # worker -> the meta.spaces it last sent that matched (checked once)
        self.observation_space: gym.Space | None = None
        self.action_space: gym.Space | None = None
        self.normalises = False  # the trainer's policy keeps observation statistics (ppo.obs_norm)
        self.optional: Schema = {}  # arrays a chunk may carry (action masks), set with the spaces
        if observation_space is not None:
            self.bind(observation_space, action_space)

    def bind(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """What the chunks must look like, from the env's spaces (and, on-policy, the policy's attributes)."""
        self.observation_space, self.action_space = observation_space, action_space
        self.obs_shape = tuple(observation_space.shape or ())
        self.action_shape = tuple(action_space.shape or ())
        # a masked env's chunks also carry its action masks (envs/masks.py): the masks acted under
        # (on-policy) or those of the next observations (off-policy, DQN's target max)
        width = mask_width(action_space)
        self.optional: Schema = {("action_mask" if self.on_policy else "next_action_mask"):
                                 ((width,), (np.dtype(bool),))} if width else {}
        if self.on_policy:
            self.schema = self._rollout_schema()
            return
        # what a relayrl worker on this env sends: observations in their stored dtype (data/dtypes.py:
        # float64 as float32, integers kept; earlier releases sent the env's own dtype, which replay
        # converts just as well), actions as the policies emit them (integers for discrete spaces,
        # float32 otherwise; SAC's are scaled to [-1, 1])
        obs_dtypes = _obs_dtypes(getattr(observation_space, "dtype", None))
        action_dtype = np.dtype(np.int64 if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                                                                       gym.spaces.MultiBinary)) else np.float32)
        self.schema = {
            "obs": (self.obs_shape, obs_dtypes), "next_obs": (self.obs_shape, obs_dtypes),
            "action": (self.action_shape, (action_dtype,)), "reward": ((), (np.dtype(np.float32),)),
            "terminated": ((), (np.dtype(bool),)), "discount": ((), (np.dtype(np.float32),))}

    def _rollout_schema(self) -> Schema:
        """A RolloutStore's arrays for the trainer's policy (data/rollout.py): per [T, n] step, the trailing
        shape and dtype."""
        entry = get_algo(self.config.algo)
        policy = entry.build_policy(self.config.algo_config, self.observation_space, self.action_space)
        self.normalises = policy.obs_rms is not None
        f4, b1 = (np.dtype(np.float32),), (np.dtype(bool),)
        schema: Schema = {
            "obs": (self.obs_shape, (stored_dtype(policy.obs_dtype),)),
            "action": (tuple(policy.action_shape), (np.dtype(policy.action_dtype),)),
            "logp": ((), f4), "value": ((), f4), "reward": ((), f4), "terminated": ((), b1), "truncated": ((), b1),
            "next_value": ((), f4)}
        if policy.recurrent:
            schema["hidden"] = ((policy.state_size,), f4)
        return schema


    def check(self, msg: wire.Message) -> Batch:
        """The chunk's arrays ({} for a chunk that carries only env steps), or Refusal."""
        meta = msg.meta
        problem = wire.env_steps_problem(meta)
        if problem is not None:
            raise Refusal("env_steps", problem, "every chunk counts the env steps its transitions took in "
                          "meta.env_steps, an integer >= 0: run a relayrl worker of the trainer's release")
        batch: Batch = dict(msg.arrays)
        if not batch:  # env steps that completed no transition yet (n-step), only episode ends, or (on-policy)
            if self.on_policy and meta["env_steps"]:  # a worker announcing its spaces before its first rollout
                raise Refusal("empty", f"it has no arrays and meta.env_steps {meta['env_steps']} (an on-policy chunk "
                              "carries its whole rollout)", _SENDER_BUG)
            self._check_spaces(msg)
            return batch
        if self.decompress is not None:
            try:
                batch = self.decompress(batch)
            except Exception as exc:  # a user's hook: any error means this chunk is not what it expects
                raise Refusal("decompress", f"net.decompressor {self.decompressor} failed on it "
                              f"({type(exc).__name__}: {exc})", _SAME_RUN) from None
            if not isinstance(batch, dict) or not all(isinstance(v, np.ndarray) for v in batch.values()):
                raise Refusal("decompress", f"net.decompressor {self.decompressor} returned "
                              f"{type(batch).__name__}, not a dict of numpy arrays", "fix the decompressor")
        if self.crc_debug:
            try:
                _check_crc(batch, meta.get("crc"))
            except CrcMismatch as exc:
                raise RelayRLError(f"crc_debug: chunk {msg.seq} of worker {msg.sender!r}: {exc}") from None
        schema = {**self.schema, **{key: entry for key, entry in self.optional.items() if key in batch}}
        if self.on_policy:
            _check_rollout(batch, schema, (self.num_steps, self.num_envs), meta["env_steps"], self.env_name,
                           self.config.algo)
        else:
            _check_schema(batch, schema, self.env_name)
        self._check_spaces(msg)
        self._check_moments(meta)
        return batch

    def _check_spaces(self, msg: wire.Message) -> None:
        """A chunk that describes its env's spaces (meta.spaces) must describe the trainer's."""
        data = msg.meta.get("spaces")
        if data is None or self._spaces_ok.get(msg.sender) == data:
            return
        spaces = decode_spaces(data)
        if isinstance(spaces, str):
            raise Refusal("spaces", f"its meta.spaces does not describe spaces ({spaces})",
                          "run a relayrl worker of the trainer's release (docs/wire-protocol.md, \"Spaces\")")
        if spaces != (self.observation_space, self.action_space):
            raise Refusal("spaces", f"its env's spaces are observation {spaces[0]}, action {spaces[1]}; the trainer's "
                          f"are observation {self.observation_space}, action {self.action_space} ({self.env_name})",
                          _SAME_RUN)
        self._spaces_ok[msg.sender] = data

    def _check_moments(self, meta: dict) -> None:
        """meta.obs_moments: present exactly when the trainer normalises observations, and sound."""
        moments = meta.get("obs_moments")
        section = self.config.algo.rpartition(":")[2]  # (its config section)
        option = f"{section}.obs_norm" if "obs_norm" in type(self.config.algo_config).model_fields else None
        if moments is None:
            if self.normalises:
                raise Refusal("moments", f"the trainer normalises observations ({option}=true) and the chunk "
                              "carries no meta.obs_moments (the worker acts on raw observations)",
                              f"run the worker with {option}=true, as the trainer")
            return
        if not self.normalises:
            raise Refusal("moments", "it carries meta.obs_moments (the worker normalises observations) and the "
                          f"trainer's {self.config.algo} policy does not" + (f" ({option}=false)" if option else ""),
                          f"run the worker with the trainer's {option}" if option else _SAME_RUN)
        problem = _moments_problem(moments, self.obs_shape)
        if problem is not None:
            raise Refusal("moments", f"its meta.obs_moments {problem}", "run a relayrl worker of the trainer's "
                          "release (or, for a worker of your own, docs/wire-protocol.md, \"Observation moments\")")


class CrcMismatch(ValueError):
    pass


def crc_of(batch: Batch) -> dict[str, int]:
    return {k: zlib.crc32(np.ascontiguousarray(v).tobytes()) for k, v in batch.items()}


def _check_crc(batch: Batch, expected: Any) -> None:
    if not isinstance(expected, dict):
        raise CrcMismatch("the worker sent no CRCs: set net.crc_debug=true on the worker too")
    got = crc_of(batch)
    if set(got) != set(expected):
        raise CrcMismatch(f"decompressed fields {sorted(got)} differ from the originals {sorted(expected)}")
    for key, value in expected.items():
        if got[key] != value:
            raise CrcMismatch(f"field {key!r} differs from the original after decompression")


def _obs_dtypes(space_dtype: Any) -> tuple[np.dtype, ...]:
    """The observation dtypes a relayrl worker sends for a space of ``space_dtype``: the stored one
    first (what this release sends), then the space's own (earlier releases); () for no check."""
    if space_dtype is None:
        return ()
    space_dtype = np.dtype(space_dtype)
    try:
        stored = stored_dtype(space_dtype)
    except EnvError:  # a dtype no algorithm learns from: the trainer's algorithm refuses the env itself
        return (space_dtype,)
    return (stored,) if stored == space_dtype else (stored, space_dtype)


def _check_keys(batch: Batch, schema: Schema) -> None:
    missing = [k for k in schema if k not in batch]
    if missing:
        raise Refusal("missing", f"it lacks {missing} (it has {sorted(batch)}; the trainer expects {list(schema)})",
                      _SAME_RUN)
    extra = sorted(k for k in batch if k not in schema)
    if extra:
        raise Refusal("extra", f"it carries {extra}, which the trainer does not know (it expects exactly "
                      f"{list(schema)})", _SAME_RUN)


def _check_rows(batch: Batch, schema: Schema, lead: int, env: str) -> None:
    """Each array's shape after its ``lead`` leading axes, and its dtype, as ``schema`` says."""
    for key, (shape, _) in schema.items():
        got = batch[key].shape[lead:]
        if got != shape:
            what = (f"observation width {got[0]}, expected {shape[0]}" if key == "obs" and len(got) == len(shape) == 1
                    else f"{key} rows have shape {got}, expected {shape}")
            raise Refusal("shape", f"{what} ({env})", _SAME_RUN)
    for key, (shape, dtypes) in schema.items():
        if dtypes and batch[key].dtype not in dtypes:
            expected = " or ".join(str(d) for d in dtypes)
            raise Refusal("dtype", f"{key} has dtype {batch[key].dtype}, expected {expected} ({env})", _SAME_RUN)


def _check_schema(batch: Batch, schema: Schema, env: str) -> None:
    """Raise Refusal unless ``batch`` holds exactly the arrays of ``schema``, each with one row per
    transition (at least one), rows of the expected shape and the expected dtype, finite rewards
    and discounts."""
    _check_keys(batch, schema)
    rows = {k: (v.shape[0] if v.ndim else None) for k, v in batch.items()}
    if len(set(rows.values())) != 1 or None in rows.values():
        raise Refusal("rows", f"its arrays hold different numbers of rows ({', '.join(f'{k} {n}' for k, n in rows.items())}; "
                      "one row per transition in every array)", _SENDER_BUG)
    if batch["reward"].shape[0] == 0:
        raise Refusal("empty", "its arrays hold 0 rows (a chunk with no transitions carries no arrays, only "
                      "meta.env_steps)", _SENDER_BUG)
    _check_rows(batch, schema, 1, env)
    for key in ("reward", "discount"):
        bad = int(np.count_nonzero(~np.isfinite(batch[key])))
        if bad:
            raise Refusal("nonfinite", f"{bad} of its {len(batch[key])} {key} values are not finite (nan or inf)",
                          "fix the worker's env (or wrap it to replace non-finite rewards)")


def _check_rollout(batch: Batch, schema: Schema, size: tuple[int, int], env_steps: int, env: str, algo: str) -> None:
    """Raise Refusal unless ``batch`` is a [T, n] rollout of ``size`` (num_steps, env.num_envs) holding
    exactly the arrays of ``schema`` with their trailing shapes and dtypes, finite where it matters,
    and ``env_steps`` is T x n."""
    _check_keys(batch, schema)
    lead = {k: v.shape[:2] if v.ndim >= 2 else v.shape for k, v in batch.items()}
    if len(set(lead.values())) != 1 or any(len(d) != 2 for d in lead.values()):
        shapes = ", ".join(f"{k} {'x'.join(map(str, d)) or 'scalar'}" for k, d in lead.items())
        raise Refusal("rows", f"its arrays do not share the [steps, envs] leading axes of a rollout ({shapes})",
                      _SENDER_BUG)
    steps, width = batch["reward"].shape
    if (steps, width) != size:
        section = algo.rpartition(":")[2]
        raise Refusal("shape", f"a rollout of {steps} steps x {width} envs, the trainer's is {size[0]} x {size[1]} "
                      f"({section}.num_steps x env.num_envs; {env})", f"run the worker with the trainer's "
                      f"--set {section}.num_steps={size[0]} --set env.num_envs={size[1]} (or its --config)")
    _check_rows(batch, schema, 2, env)
    if env_steps != steps * width:
        raise Refusal("env_steps", f"its meta.env_steps is {env_steps}, its rollout holds {steps} x {width} = "
                      f"{steps * width} steps", _SENDER_BUG)
    for key in ROLLOUT_FINITE:
        bad = int(np.count_nonzero(~np.isfinite(batch[key])))
        if bad:
            fix = ("fix the worker's env (or wrap it to replace non-finite rewards)" if key == "reward" else
                   "the worker's policy produced them: check its weights and observations (obs_norm for large ones)")
            raise Refusal("nonfinite", f"{bad} of its {batch[key].size} {key} values are not finite (nan or inf)", fix)


def decode_spaces(data: Any) -> tuple[gym.Space, gym.Space] | str:
    """meta.spaces as (observation space, action space), or what is wrong with it."""
    if data is None:
        return "it has none"
    if not isinstance(data, dict) or set(data) != {"observation", "action"}:
        return "it must be a map of \"observation\" and \"action\""
    try:
        return space_from_data(data["observation"]), space_from_data(data["action"])
    except SpaceDataError as exc:
        return str(exc)


def _moments_problem(moments: Any, shape: tuple[int, ...]) -> str | None:
    """What is wrong with meta.obs_moments (None: count > 0, mean and var of the observation shape,
    finite, var >= 0)."""
    if not isinstance(moments, dict) or set(moments) != {"count", "mean", "var"}:
        return "must be a map of count, mean and var"
    count = moments["count"]
    if not isinstance(count, (int, float)) or isinstance(count, bool) or not np.isfinite(count) or count <= 0:
        return f"count is {count!r}, not a number > 0"
    for key in ("mean", "var"):
        try:
            value = np.asarray(moments[key], dtype=np.float64)
        except (TypeError, ValueError):
            return f"{key} is not an array of numbers"
        if value.shape != shape:
            return f"{key} has shape {value.shape}, the observations' is {shape}"
        if not np.isfinite(value).all():
            return f"{key} holds values that are not finite"
        if key == "var" and (value < 0).any():
            return "var holds negative values"
    return None


def finite_numbers(value: Any) -> list:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)]

