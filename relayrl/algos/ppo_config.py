"""PPO's options (``ppo:`` in a config; APPO's section extends them): its fields, their help, and the
combinations refused before a run starts. The policy is in algos/ppo_policy.py, the algorithm in algos/ppo.py."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from relayrl.errors import ConfigError
from relayrl.options import AlgoConfig, CompiledUpdateConfig, Placement
from relayrl.policy.encoder import EncoderRef


class PPOConfig(AlgoConfig, CompiledUpdateConfig):
    lag_correction: ClassVar[str | None] = "the probability ratio to the policy that acted, clipped"
    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "actor_lr,critic_lr", "lr": "actor_lr,critic_lr", "n_epochs": "epochs",
        "n_steps": "num_steps", "ent_coef": "entropy_coef", "clip_range": "clip", "clip_range_vf": "value_clip",
        "max_grad_norm": "grad_clip", "target_kl": "kl", "discount": "gamma", "lam": "gae_lambda",
        "minibatch_size": "batch_size", "normalize_advantages": "normalize_advantage", "norm_obs": "obs_norm",
        "norm_reward": "normalize_reward", "net_arch": "hidden_sizes", "eps": "adam_eps",
        "features_extractor_class": "encoder"}

    num_steps: int = Field(64, ge=1)
    """Vector steps collected per iteration (the rollout holds num_steps x env.num_envs steps)."""
    epochs: int = Field(5, ge=1)
    """Passes over each rollout."""
    batch_size: int = Field(256, ge=1)
    """Minibatch size in steps."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    """GAE lambda (bias-variance trade-off of the advantage)."""
    actor_lr: float = Field(3e-3, gt=0.0)
    """Actor learning rate (Adam)."""
    critic_lr: float = Field(3e-3, gt=0.0)
    """Critic learning rate (Adam)."""
    adam_eps: float = Field(1e-5, gt=0.0)
    """Adam epsilon."""
    anneal_lr: bool = True
    """Decay both learning rates linearly to 0 over total_steps."""
    clip: float = Field(0.2, gt=0.0)
    """Surrogate clipping range: the ratio is clipped to 1 +- clip."""
    anneal_clip: bool = False
    """Decay the clipping range linearly to 0 over total_steps."""
    value_clip: float | None = Field(None, gt=0.0)
    """Clip the value update to +- this around the old value (null: no clipping)."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus coefficient."""
    grad_clip: float | None = Field(0.5, gt=0.0)
    """Maximum gradient norm, per network (null: no clipping)."""
    kl: float | None = Field(None, gt=0.0)
    """Stop the iteration's remaining minibatches once the approximate KL exceeds this (null: never)."""
    normalize_advantage: bool = True
    """Normalise advantages per minibatch."""
    obs_norm: bool = False
    """Normalise observations with a running mean and std."""
    update_norm: bool | None = None
    """Update the observation statistics from collected data (null: yes, with obs_norm; false freezes them,
    e.g. after prenorm or --previous). Needs obs_norm."""
    prenorm: bool = False
    """Fill the observation statistics before training by running the initial policy. Needs obs_norm."""
    prenormalize_steps: int = Field(1000, ge=1)
    """Vector steps run to fill the statistics when prenorm is on."""
    reward_scale: float = Field(1.0, gt=0.0)
    """Multiply rewards by this before computing advantages."""
    normalize_reward: bool = True
    """Divide rewards by the running std of the discounted return."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor and of the critic (with an encoder: of their heads on its features)."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"
    """Hidden activation."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the actor and the
    critic share one (one call; shared_trunk=false: two, one each), with hidden_sizes MLP heads on top
    (docs/library.md, "Your own network"). null: the built-in choice from the observation space (docs/library.md,
    "Built-in encoders"): a CNN for images, one-hot for Discrete and MultiDiscrete, MLPs on flat observations."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""
    recurrent: Literal["lstm", "gru"] | None = None
    """Recurrent actor and critic (lstm or gru; null: feed-forward MLPs). hidden_sizes then sizes the
    MLP heads on top of the recurrent layer; an encoder (yours, or a built-in CNN or one-hot) feeds the layer."""
    recurrent_hidden: int = Field(64, ge=1)
    """Units of each recurrent layer."""
    shared_trunk: bool | None = None
    """One trunk feeds both the actor and the critic head: the encoder (a CNN, a Dict's encoders, yours) and a
    recurrent policy's recurrent layer, trained by the actor's optimiser with the value loss's gradient too;
    false: the critic has its own. null: shared when the observations go through an encoder (a CNN then runs
    once per observation, as in SB3's CnnPolicy), separate for the MLPs on flat vectors."""
    seq_len: int = Field(16, ge=0)
    """Recurrent updates: chunk length in steps; each chunk starts from the hidden state stored when its
    first step was collected. 0: whole trajectories (cut only by the rollout's ends)."""
    batch_trajectories: int = Field(16, ge=1)
    """Recurrent updates: minibatch size in sequences (chunks or trajectories), padded to equal length."""
    mirror: float = Field(0.0, ge=0.0)
    """Weight of the mirror-symmetry loss: MSE between the policy's mean action for s and the mirror of
    its mean action for mirror(s) (0: off)."""
    mirror_spec: str = "auto"
    """Mirror spec: "auto" (built-in for the env, e.g. Walker2d) or a YAML file with obs: and act: lists
    of signed indices (relayrl/policy/mirror.py)."""
    mirror_critic: bool = False
    """Also penalise V(s) - V(mirror(s)) with the same weight."""
    critic_only_keys: list[str] = Field(default_factory=list)
    """Keys of a Dict observation only the critic sees (privileged inputs, an asymmetric actor-critic:
    policy/privileged.py); the actor reads the other keys, and predict needs only those. []: none."""

    def check(self, name: str = "ppo") -> None:
        """Refuse combinations that would silently do nothing; the loop calls it before a run starts."""
        if self.obs_norm:
            return
        if self.prenorm:
            raise ConfigError(f"{name}.prenorm=true fills observation statistics, but {name}.obs_norm=false keeps "
                              f"none: set {name}.obs_norm=true, or {name}.prenorm=false")
        if self.update_norm is not None:
            raise ConfigError(f"{name}.update_norm={str(self.update_norm).lower()} has no effect with "
                              f"{name}.obs_norm=false (there are no statistics to update): set "
                              f"{name}.obs_norm=true, or leave {name}.update_norm at null")

    _PRENORM_ELSEWHERE: ClassVar[dict[str, str]] = {
        "agents": "{name}.prenorm does not apply to agent envs (a simulator bridge, PettingZoo envs): set it to false"}
    # (with rollout workers and the relay, their first rollouts are the warm-up: training/onpolicy.py's warmup)

    def check_placement(self, name: str, placement: Placement) -> None:
        """prenorm needs envs the policy steps (the learner's own or rollout workers'), not agent envs."""
        if self.prenorm and placement in self._PRENORM_ELSEWHERE:
            raise ConfigError(self._PRENORM_ELSEWHERE[placement].format(name=name))

    def prenorm_steps(self) -> int:
        return self.prenormalize_steps if self.prenorm else 0

    def timing_sizes(self) -> tuple[list[int], int]:
        return list(self.hidden_sizes), self.batch_size
