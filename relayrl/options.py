"""The options of a run, as pydantic sections: RunConfig and its common sections (env, eval, net, logging),
and the bases of an algorithm's own section (AlgoConfig; ReplayLoopConfig for off-policy ones).

Every section forbids unknown keys, so a typo is an error with a close-match suggestion (config.py),
never a silently ignored value. The docstring under each field is its help text and becomes a comment
in ``relayrl config ALGO``. This module knows no algorithm: relayrl/config.py adds each algorithm's
section to RunConfig (``config_model``) and builds a run's config from defaults, YAML and ``--set``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from relayrl.errors import ConfigError
from relayrl.data.replay.ratelimit import limiter_bounds_problem


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, fields documented in place.

    ``aliases`` maps names users bring from other libraries (``n_epochs``, ``learning_rate``) to
    the field(s) to use instead; they only feed the "did you mean" hint, never the parsing.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)
    aliases: ClassVar[dict[str, str]] = {}


Placement = Literal["envs", "agents", "workers", "relay"]  # where the experience comes from (check_placement)


class AlgoConfig(Section):
    """Base of an algorithm's section (``ppo:``, ``sac:``); ``check`` refuses combinations of options that would
    silently do nothing, before a run starts."""

    lag_correction: ClassVar[str | None] = None
    """How the algorithm corrects for rollouts collected by the policy one version behind the learner
    (``overlap: true``, training/overlap.py); None: it has none, and ``overlap`` is refused."""

    def check(self, name: str) -> None:
        """Raise a ConfigError naming the options and the fix (default: every combination is fine)."""

    # What generic code asks of an algorithm's options (training/, runtime/, net/ never read them by name).
    def check_placement(self, name: str, placement: Placement) -> None:
        """Refuse options that cannot work where the experience comes from: "envs" (the learner's own vector envs),
        "agents" (agent envs: a simulator bridge, PettingZoo), "workers" (a worker pool, runtime/pool.py) or
        "relay" (remote workers). A ConfigError naming the option and the fix; default: every option works anywhere."""

    def prenorm_steps(self) -> int:
        """Vector steps the loop runs before learning to fill the policy's observation statistics (PPO's prenorm);
        default 0: none."""
        return 0

    def transitions_before_learning(self) -> int:
        """Env steps the learner collects before its first update (a paced remote worker does not wait before
        then); default 0."""
        return 0

    def timing_sizes(self) -> tuple[list[int], int]:
        """(hidden layer sizes, batch size) of the MLP that ``threads: -1`` times for an algorithm without a
        ``timing_step``; default ([256, 256], 256)."""
        return [256, 256], 256


CompileMode = Literal["off", "auto", "default", "reduce-overhead", "max-autotune"]


class CompiledUpdateConfig(Section):
    """The learner's update compiled and in lower precision (algos/compiled.py), mixed into the sections of the
    algorithms that take it (PPO, APPO, DQN, SAC); checkpoints are the same with or without."""

    compile: CompileMode = "off"
    """Compile the update's forward pass and loss (and their backward) with torch.compile: "default" (inductor's
    fused kernels), "reduce-overhead" (those, replayed as CUDA graphs: one launch per update instead of hundreds;
    CUDA only), "max-autotune" (also searches kernel configurations: longer first update), "auto" (reduce-overhead
    on CUDA; off on the CPU, where it measured 0.8x-1.4x eager's speed by network after a 6-25 s first update:
    docs/benchmarks.md), "off": eager. Needs a C++ compiler (inductor's; the first update then takes seconds)."""
    amp: Literal["off", "bf16"] = "off"
    """Mixed precision of the update: "bf16" runs the networks' forward pass (and its backward) in bfloat16 under
    torch.autocast, the losses and the weights in float32 (a CUDA GPU with bf16, Ampere or later, or the CPU);
    "off": float32 throughout."""

    @field_validator("compile", "amp", mode="before")
    @classmethod
    def _off(cls, value: Any) -> Any:
        return "off" if value is False else value  # (YAML reads a bare off as false)


class ReplayLoopConfig(AlgoConfig):
    """Options of the replay loop, shared by every off-policy algorithm's config (which extends it)."""

    buffer_size: int = Field(1_000_000, ge=1)
    """Replay capacity in transitions."""
    replay_layout: Literal["auto", "plain", "frames"] = "auto"
    """How the replay keeps observations: "frames" holds every frame of obs and next_obs once (images),
    "plain" one record per transition; auto: frames for images of 4 KB or more (data/replay/framestorage.py)."""
    batch_size: int = Field(256, ge=1)
    """Minibatch size per update."""
    start_training: int = Field(1000, ge=0)
    """Transitions in the buffer before the first update."""
    steps_per_iteration: int = Field(16, ge=1)
    """Vector steps collected between two rounds of updates."""
    updates_per_step: float = Field(1.0, gt=0)
    """Updates per env step (0.5: one update every two env steps)."""
    max_training_steps_per_env_step: float | None = Field(None, gt=0)
    """Pause updates when updates / env steps exceeds this (null: no cap)."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    n_step: int | None = Field(1, ge=1)
    """Steps summed into each return before bootstrapping (null: the algorithm's default for the env kind,
    ``n_step_for``)."""
    prioritized: bool = False
    """Prioritized replay (proportional, with importance weights) on the TD errors."""
    priority_alpha: float = Field(0.6, ge=0)
    """Prioritization exponent (with prioritized)."""
    priority_beta: float = Field(0.4, ge=0, le=1)
    """Initial importance-weight exponent, annealed to 1 (with prioritized)."""
    max_use: int | None = Field(None, ge=1)
    """Evict a transition once it has been sampled this many times (Reverb's max_times_sampled; null:
    never). Bounds how often a fast learner reuses slow collectors' data."""
    max_staleness: int | None = Field(None, ge=1)
    """Evict a transition once the learner's policy is this many versions (updates) past the one that
    collected it (a worker's chunk's version; the local collector's: the learner's at collection; null: never)."""
    vector_n_step: ClassVar[int] = 1
    """What ``n_step: null`` means on vector envs (an algorithm's config may set it)."""

    def n_step_for(self, agents: bool) -> int:
        """``n_step``, or for null: 1 on agent envs (a simulator bridge, PettingZoo: their transitions are
        one-step, complete as soon as an agent reports back), ``vector_n_step`` on vector envs."""
        if self.n_step is not None:
            return self.n_step
        return 1 if agents else self.vector_n_step

    samples_per_insert: float | None = None
    """A rate limiter (Reverb's SampleToInsertRatio): sampled rows (updates x batch_size) per transition stored,
    kept within +- spi_tolerance by making the faster side wait (the learner runs no update past the bound; the
    collectors stop being taken from, or with replay_shards the shards stop taking inserts, so workers block).
    Replaces updates_per_step and
    max_training_steps_per_env_step (either one changed from the algorithm's default beside it is refused); null:
    no limiter (docs/usage.md, "Rate limiter")."""
    spi_tolerance: float = 0.1
    """With samples_per_insert: the relative slack, as an error buffer of spi_tolerance x samples_per_insert x
    start_training sampled rows either side of samples_per_insert x inserts (Acme's tolerance rate); it must hold
    at least half of one update's batch_size rows, or the two sides could wait for each other forever."""

    replay_shards: int = Field(0, ge=0)
    """The replay service: 0 keeps the replay in the learner's process; N > 0 runs N replay shards as Ray
    actors (backend ray) or local processes (backend mp), which the workers (or their node proxies) insert
    into directly and the learner samples from, prefetched. buffer_size is split evenly over them
    (docs/distributed.md)."""
    replay: str | None = None
    """Your own memory, "module:Class" (a subclass of relayrl.data.replay.Replay, built by keyword with capacity,
    observation_space, action_space, seed and batch_size; docs/library.md "Your own memory"); null: the built-in
    buffer."""
    sample_transform: str | None = None
    """"module:function" applied to every sampled minibatch on the learner before the update (e.g. DrQ's random
    shift, relayrl.data.augment:random_shift); it returns a batch of the same keys, shapes and dtypes."""
    dataset: str | None = None
    """Transitions the replay starts with, loaded before training (TMRL's dataset_path): what the offline
    algorithms' dataset takes (an .npz, an off-policy run's directory, a Minari folder; data/datasets.py)."""

    def transitions_before_learning(self) -> int:
        return max(self.start_training, self.batch_size)  # (a first minibatch needs batch_size transitions)

    def check(self, name: str) -> None:
        if self.samples_per_insert is not None:
            self._check_limiter(name)
        if self.replay_shards and self.dataset is not None:
            raise ConfigError(f"{name}.dataset loads into the learner's replay, and {name}.replay_shards > 0 keeps the "
                              f"replay in shards: set {name}.replay_shards=0 to start from {self.dataset!r}")
        if self.replay is not None:
            self._check_own_memory(name)

    def _check_limiter(self, name: str) -> None:
        """samples_per_insert: bounds that can be met, and no schedule option that contradicts it."""
        for option in ("updates_per_step", "max_training_steps_per_env_step"):  # (changed from the algorithm's
            if getattr(self, option) != type(self).model_fields[option].default:  # default: configs are re-validated)
                raise ConfigError(f"{name}.samples_per_insert={self.samples_per_insert:g} sets the update schedule "
                                  f"(updates run as the limiter allows), and {name}.{option}="
                                  f"{getattr(self, option)} sets it too: drop {name}.{option} (samples_per_insert "
                                  f"{self.samples_per_insert:g} means {self.samples_per_insert / self.batch_size:.3g}"
                                  f" updates per transition at batch_size {self.batch_size}) or "
                                  f"{name}.samples_per_insert")
        problem = limiter_bounds_problem(self.samples_per_insert, self.spi_tolerance,
                                         self.transitions_before_learning(), self.batch_size, name, self.replay_shards)
        if problem:
            raise ConfigError(problem)

    def _check_own_memory(self, name: str) -> None:
        """What your own memory (``replay``) cannot be combined with: the built-in buffer's options."""
        built_in = {"replay_shards": self.replay_shards != 0, "max_use": self.max_use is not None,
                    "max_staleness": self.max_staleness is not None, "replay_layout": self.replay_layout != "auto"}
        for option, set_ in built_in.items():
            if set_:
                raise ConfigError(f"{name}.{option} is an option of the built-in replay buffer, and {name}.replay="
                                  f"{self.replay!r} replaces it: drop {name}.{option} (your memory does its own) or "
                                  f"{name}.replay")

    update_model_interval: int = Field(1, ge=1)
    """Publish the learner's weights every this many updates (matters with an external sample source;
    the local collector acts with the learner's own policy)."""
    update_buffer_interval: int | None = Field(None, ge=1)
    """Within a round of updates, move what an external sample source has received into the buffer
    every this many updates (TMRL's update_buffer_interval; null: only between rounds). Needs a
    source with a non-blocking ``poll()``; the local collector has none and ignores it."""


class OfflineConfig(AlgoConfig):
    """Options of the offline loop (training/offline.py), shared by every offline algorithm's config (BC, IQL):
    updates from a dataset, no env steps; ``total_steps`` and ``eval.freq`` count updates."""

    dataset: str | None = None
    """The transitions to learn from (required): an .npz (`relayrl collect` writes one), an off-policy run's
    directory (its replay snapshot), or a Minari dataset folder (docs/offline.md)."""
    batch_size: int = Field(256, ge=1)
    """Minibatch size per update."""
    updates_per_round: int = Field(1000, ge=1)
    """Updates between two log lines (one round of the loop; total_steps counts updates)."""

    def check(self, name: str) -> None:
        if self.dataset is None:
            raise ConfigError(f"{name} learns from a dataset and takes no env steps, and none was given: set "
                              f"{name}.dataset=PATH (an .npz of transitions, e.g. written by `relayrl collect RUN -o "
                              "FILE.npz`, or an off-policy run's directory; docs/offline.md)")

    def check_placement(self, name: str, placement: Placement) -> None:
        if placement == "agents":
            raise ConfigError(f"{name} evaluates on local Gymnasium envs of --env, not on a simulator bridge's or "
                              "PettingZoo's agents: train it with a Gymnasium env of the same spaces")
        if placement != "envs":
            raise ConfigError(f"{name} learns from a dataset in this process and collects nothing: drop "
                              "--workers/--backend/--server (it evaluates on local envs of --env)")


class EnvConfig(Section):
    id: str = "CartPole-v1"
    """Gymnasium environment id."""
    num_envs: int = Field(8, ge=1)
    """Environment copies stepped together for training."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to gymnasium.make."""
    max_episode_steps: int | None = Field(None, ge=1)
    """Override the env's time limit (null keeps the registered one)."""
    manager: Literal["auto", "sync", "subproc", "async", "native"] = "auto"
    """How envs are stepped: in process (sync), in worker processes through shared memory (subproc,
    async), in the env's own vectorised implementation (native: Gymnasium's vector_entry_point, e.g.
    CartPole, or EnvPool), or auto: native when the env has one and no option rules it out, else subproc
    when a timed step shows the workers would save more than they cost, else sync."""
    workers: int | None = Field(None, ge=1)
    """Worker processes for subproc/async (null: one per core, at most num_envs)."""
    groups: int = Field(1, ge=1)
    """Env groups stepped in turn (on- and off-policy collection in this process): with 2, the policy acts for
    one half of the envs while the other half's workers step (Sample Factory's double-buffered sampling), so
    inference and env steps overlap. Each group is a vector env of num_envs/groups envs and its share of the
    workers (manager subproc or native; auto picks between those two)."""
    step_timeout: float | None = Field(60.0, gt=0)
    """Seconds before a hung env worker is killed and respawned (subproc/async; null: never)."""
    max_restarts: int = Field(3, ge=0)
    """Consecutive failures of one env or worker tolerated before training stops with an error."""
    frame_stack: int | None = Field(None, ge=1)
    """Stack the last k observations into one (images along their channel axis; null: 4 for Atari
    ALE/ ids, else 1)."""
    atari_preprocessing: bool = True
    """For Atari ALE/ ids: frame skip 4, 84x84 grayscale, no-op starts (Gymnasium's AtariPreprocessing);
    false keeps the raw RGB frames."""
    grayscale: bool = False
    """Turn RGB image observations [H, W, 3] into grayscale [H, W, 1] (Gymnasium's GrayscaleObservation),
    after resize and before frame_stack; PettingZoo envs: every agent's."""
    resize: list[int] | None = Field(None, min_length=2, max_length=2)
    """Resize image observations to [height, width] (Gymnasium's ResizeObservation, e.g. [84, 84]: big
    frames make the CNN's first linear layer huge); null keeps their size. PettingZoo envs: every agent's."""

    @field_validator("resize")
    @classmethod
    def _positive_sides(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and min(value) < 1:
            raise ValueError(f"resize {value}: give [height, width] in pixels, both at least 1")
        return value

    def wrapping(self) -> dict[str, Any]:
        """``envs.make``'s preprocessing options for this env (``make_vec(..., wrapping=...)``)."""
        return {"frame_stack": self.frame_stack, "atari_preprocessing": self.atari_preprocessing,
                "resize": self.resize, "grayscale": self.grayscale}


class EvalConfig(Section):
    freq: int = Field(5000, ge=0)
    """Evaluate every this many env steps (0: only at the end of training)."""
    episodes: int = Field(10, ge=1)
    """Deterministic episodes per evaluation."""
    num_envs: int = Field(10, ge=1)
    """Environment copies used by the evaluator; episodes are balanced across them."""
    on_best_train: bool = False
    """Also evaluate whenever the training episodes' mean return (train/return_mean, as logged) is a
    new best of the run (roadrunner's schedule), at least best_train_gap env steps after the last
    evaluation. It counts like any other: best checkpoint, metrics, stop_value."""
    best_train_gap: int = Field(1000, ge=0)
    """With on_best_train: env steps from the last evaluation (of any kind) before a new best training
    return triggers another; while the return climbs, nearly every round is a new best, and without a
    gap each would cost eval.episodes episodes. A new best inside the gap is still the best to beat."""


class NetConfig(Section):
    """Remote rollout workers through a relay (``relayrl serve``); docs/remote.md."""

    server: str | None = None
    """Relay address HOST:PORT. For `relayrl train`: learn from the workers connected there instead
    of local envs (null: local training)."""
    keys: str | None = None
    """Folder of this machine's CURVE keys (written by `relayrl keys generate`); null: no encryption,
    only for loopback or a trusted network."""
    heartbeat_s: float = Field(1.0, gt=0)
    """Seconds between heartbeats to the relay."""
    timeout_s: float = Field(10.0, gt=0)
    """Seconds of silence from the relay before reconnecting (with exponential backoff)."""
    reconnect_initial_s: float = Field(0.2, gt=0)
    """Seconds before the second hello to a relay that does not answer (then times reconnect_factor)."""
    reconnect_factor: float = 2.0
    """Each wait between hellos is the previous one times this (at least 1; 1: a fixed pace)."""
    reconnect_max_s: float = 30.0
    """The longest wait between hellos (at least reconnect_initial_s)."""

    @field_validator("reconnect_factor")
    @classmethod
    def _factor(cls, value: float) -> float:
        if not value >= 1:
            raise ValueError("the wait between hellos may not shrink: give a factor >= 1 (1: a fixed pace; default 2)")
        return value

    @field_validator("reconnect_max_s")
    @classmethod
    def _maximum(cls, value: float, info) -> float:
        initial = info.data.get("reconnect_initial_s")
        if initial is not None and not value >= initial:
            raise ValueError(f"give a maximum >= initial (net.reconnect_initial_s = {initial:g})")
        return value

    param_pull_s: float | None = Field(None, gt=0)
    """Worker: fetch the newest weights from the relay every this many seconds instead of being sent every
    version the trainer publishes (the actor model's FetchParam: many workers on a slow link). A pull is
    answered only when the relay holds newer weights. null: take every broadcast."""

    def local_refusal(self) -> str | None:
        """Why these options do not fit a run without a relay (its workers are local), or None."""
        if self.server is None and self.param_pull_s is not None:
            return ("net.param_pull_s (weights pulled at a period) is for remote workers behind a relay; this run's "
                    "workers are local (inline, mp, ray) and read the newest weights at their own pace already: "
                    "set net.param_pull_s=null, or train with --server HOST:PORT")
        return None

    connect_timeout_s: float = Field(120.0, gt=0)
    """Trainer: seconds to wait for the relay at start before giving up with an error (it says it
    waits after a second; Ctrl-C stops it)."""
    backlog: int = Field(256, ge=1)
    """Worker: chunks kept until the trainer acknowledges them (resent after a reconnect); when full,
    the oldest is dropped and counted (flow control keeps it from filling while the worker collects)."""
    window: int = Field(64, ge=1)
    """Worker: chunks sent and not yet acknowledged at any time. Flow control: at min(window,
    backlog) unacknowledged chunks the worker stops collecting until the trainer takes some, so it
    collects what the trainer takes."""
    max_message_mb: float = Field(64.0, gt=0)
    """Largest message accepted (samples chunk or weights)."""
    max_steps_per_update: int | None = Field(None, ge=1)
    """Worker, off-policy: after this many env steps with one policy version, wait for newer weights
    before collecting more (TMRL's synchronous worker; keeps simulated workers from outrunning the
    learner; not before the worker's own start_training steps, the trainer's warm-up; null: never
    wait). On-policy workers are paced by versions (PPO) or rollouts_in_flight (APPO)."""
    pace_timeout_s: float = Field(10.0, gt=0)
    """Worker: the longest wait for newer weights once paced (off-policy) or after sending PPO's
    rollout of a version; then it collects on with the weights it has and warns (a trainer that
    publishes less often than the worker's pace, a lost broadcast, must not deadlock the two)."""
    rollouts_in_flight: int = Field(2, ge=1)
    """Worker, APPO: rollouts sent and not yet taken by the trainer; at this many the worker waits
    before collecting another (bounds the policy lag, as the mp backend's bounded queue does)."""
    remote_env: bool = False
    """Trainer: build no env; take its spaces from the first chunk a worker sends (every worker
    describes its env's spaces), for envs that exist only on the workers' machines (`relayrl train
    --remote-env`; docs/remote.md)."""
    min_samples_per_worker_packet: int = Field(1, ge=1)
    """Worker: transitions gathered before a chunk is sent."""
    compressor: str | None = None
    """Worker: "module:function" mapping a chunk (dict of arrays) to what is sent (TMRL's
    sample_compressor); the trainer's decompressor must invert it."""
    decompressor: str | None = None
    """Trainer: "module:function" mapping a received chunk back to transitions."""
    crc_debug: bool = False
    """Worker sends a CRC32 of every original array; the trainer checks its decompressed chunk
    against them and stops with an error naming the first field that differs."""
    test_episode_interval: int = Field(0, ge=0)
    """Worker: run one deterministic test episode (never sent) every this many training episodes
    (0: never)."""
    weights_dir: str | None = None
    """Worker: folder where received weights are saved (latest.safetensors) and loaded from at start
    (null: relayrl-worker/<env>_<algo> under the current directory)."""
    model_history: int = Field(0, ge=0)
    """Worker: also keep a copy of every this many received versions (0: only the latest)."""


class WandbConfig(Section):
    """Mirror the run to Weights & Biases (the ``wandb`` extra); docs/usage.md, "Tracking"."""

    enabled: bool | None = None
    """Mirror every logged metric, the config and the summary to a W&B run (`relayrl train --track` sets
    true). null: on when a project is set."""
    project: str | None = None
    """W&B project (null: WANDB_PROJECT, else "relayrl")."""
    entity: str | None = None
    """W&B user or team (null: WANDB_ENTITY, else your default entity)."""
    group: str | None = None
    """Group runs together in the W&B UI, e.g. the seeds of one experiment (null: none)."""
    name: str | None = None
    """The W&B run's name (null: the run directory's name)."""
    tags: list[str] = Field(default_factory=list)
    """Tags of the W&B run."""
    mode: Literal["online", "offline", "disabled"] | None = None
    """online: sync while training (needs `wandb login`); offline: write under the run directory's
    wandb/ folder (or WANDB_DIR) for a later `wandb sync`; disabled: no W&B run. null: WANDB_MODE,
    else online."""

    @property
    def active(self) -> bool:
        """Whether the run goes to W&B: enabled (or a project set while enabled is null), and not disabled."""
        on = self.enabled if self.enabled is not None else self.project is not None
        return on and self.mode != "disabled"


class SelfPlayConfig(Section):
    """Self-play between two sides of an env (ML-Agents' ghost trainer): one policy learns on one side against
    frozen snapshots of itself on the other (docs/bridge.md, "Self-play")."""

    sides: list[str] | None = None
    """The two behaviours (teams, players) that play each other, with the same spaces (null: self-play off, or
    with enabled: true the env's two behaviours)."""
    enabled: bool = False
    """Self-play between the env's two behaviours (sides names them when it has more)."""
    save_steps: int = Field(20_000, ge=1)
    """Env steps of the learning side between snapshots of the learning policy."""
    swap_steps: int = Field(10_000, ge=1)
    """Env steps between changes of the opponent (a snapshot: the latest with play_against_latest_model_ratio,
    else one of the last window at random)."""
    team_change: int = Field(100_000, ge=1)
    """Env steps before the learning side changes to the other side (the policy learns both)."""
    window: int = Field(10, ge=1)
    """Snapshots kept to play against."""
    play_against_latest_model_ratio: float = Field(0.5, ge=0.0, le=1.0)
    """How often the opponent is the latest snapshot."""
    initial_elo: float = 1200.0
    """Each side's rating at the start (ELO, K = 16)."""

    @property
    def active(self) -> bool:
        return self.enabled or self.sides is not None


class LoggingConfig(Section):
    """Where metrics go besides metrics.jsonl and TensorBoard."""

    wandb: WandbConfig = Field(default_factory=WandbConfig)


class RunConfig(Section):
    """Options shared by every algorithm; each algorithm adds a section named after it."""

    algo: str
    """Algorithm: a built-in name (ppo, appo, a2c, pqn, dqn, sac, td3, redq, crossq; offline: bc, iql) or your own as package.module:name (docs/library.md)."""
    seed: int = 0
    """Seed for torch and the environments (env k gets seed + k)."""
    total_steps: int = Field(1_000_000, ge=1)
    """Stop after this many env steps."""
    train_iter: int | None = Field(None, ge=1)
    """Stop after this many updates (gradient steps, summary.json's ``updates``; DI-engine's max_train_iter),
    whichever of the stops comes first (null: no such stop)."""
    time_limit_s: float | None = Field(None, gt=0)
    """Stop once the run's wall time (summary.json's ``wall_time_s``, resumes included) reaches this many
    seconds, at the end of the round under way (null: no such stop)."""
    stop_value: float | None = None
    """Stop once the eval mean return reaches this (null: the env's reward_threshold, if any)."""
    save_freq: int = Field(-1, ge=-1)
    """Keep a periodic checkpoint every this many updates (-1: only best and last)."""
    threads: int | None = Field(None, ge=-1)
    """torch threads for the learner (0: torch's default, one per core; -1: the fastest of 1, 2, 4, ... up
    to the cores, by timing a few updates of the algorithm's network size at start, roadrunner's
    backprop_workers). null: one per core (up to 4) for images the Nature CNN reads (its convolutions gain
    from more threads), 1 otherwise (one is fastest for small MLPs and, under load, for the small CNN on
    MinAtar-sized images). config.yaml records the count used."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the learner's networks and each update's batch live (auto: CUDA when torch finds a CUDA
    device and the algorithm learns on it, else the CPU). Rollout workers act on the CPU with the
    published weights, which are always CPU tensors. DQN, SAC, PPO, APPO, A2C and PQN learn on CUDA."""
    overlap: bool = False
    """Collect the next rollout while the learner learns from this one (PPO and APPO, whose ratio and
    V-trace correct for the lag, and the replay algorithms, on the learner's own envs): neither side
    waits for the other, and everything after the first pull is collected by the policy one version
    behind the learner. Worth it where learning takes a good share of the time, e.g. a CNN on a GPU."""
    backend: Literal["auto", "inline", "mp", "ray"] = "auto"
    """Where rollout workers run: inline (this process), mp (local processes), ray (a Ray cluster);
    auto: inline for one worker, mp for more."""
    workers: int = Field(1, ge=1)
    """Rollout workers, each stepping its own env.num_envs envs (PPO's rollout is num_steps x
    env.num_envs x workers)."""
    learners: int = Field(1, ge=1)
    """Data-parallel learners, each on its own share of the experience (env.num_envs / learners envs, the
    minibatch's batch_size / learners rows), their gradients averaged before every optimiser step
    (docs/distributed.md "Learners"): local processes started by this one, or the group torchrun started
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set). PPO, APPO, DQN and SAC."""
    learner_timeout_s: float = Field(120.0, gt=0)
    """Seconds a learner waits in a collective for the others (and to join the group) before the group is
    declared broken: a learner that died or hangs ends the run (or restarts the group) within about this."""
    learner_placement: Literal["local", "ray"] = "local"
    """Where learners > 1 run: local processes started by this one, or one Ray actor each (ray_address's
    cluster, or a local Ray), each with one CPU and learner_gpus GPUs."""
    learner_gpus: float = Field(0.0, ge=0)
    """learner_placement ray: the GPUs each learner's actor asks Ray for (it learns on cuda when it gets one)."""
    max_learner_restarts: int = Field(0, ge=0)
    """Restart the whole learner group from the last checkpoint this many times when a learner dies or hangs,
    instead of ending the run (0: end it, naming the learner)."""
    worker_timeout: float = Field(300.0, gt=0)
    """Seconds a rollout worker may take to deliver one chunk before it is declared hung, killed and
    restarted (raise it for envs whose chunk takes longer to collect)."""
    max_policy_lag: int | None = Field(None, ge=0)
    """Drop chunks collected more than this many policy versions behind the learner (counted in
    workers/too_old, local or through a relay; null: keep all). Bounds staleness for APPO, DQN and
    SAC with workers, local or remote."""
    ray_address: str | None = None
    """backend ray: the cluster to join ("auto" or HOST:PORT); null starts a local Ray for the run."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    behaviours: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """A simulator with several behaviours trains each with a policy of its own, with the run's algorithm and
    settings; this maps a behaviour's name to what differs for it: its algorithm's section, total_steps,
    stop_value, save_freq, eval, or its algorithm (e.g. {striker: {ppo: {actor_lr: 1e-4}, total_steps: 50000},
    goalie: {algo: sac}})."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    selfplay: SelfPlayConfig = Field(default_factory=SelfPlayConfig)
    net: NetConfig = Field(default_factory=NetConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @property
    def algo_config(self) -> AlgoConfig:
        """The algorithm's section: ``config.ppo`` for ppo; ``config.reinforce`` for your own
        ``"package.module:reinforce"`` (a section is named as the algorithm registered)."""
        return getattr(self, self.algo.rpartition(":")[2])

    @property
    def resolved_backend(self) -> str:
        if self.net.server is not None:
            return "relay"
        if self.backend != "auto":
            return self.backend
        return "inline" if self.workers == 1 else "mp"
