"""Proximal Policy Optimisation (clipped surrogate, GAE, KL early stop), after roadrunner's PPO.

Reads top to bottom: the algorithm (reward scaling, GAE, minibatch epochs), registration. Its options are in
algos/ppo_config.py; the policy it learns (collect / eval modes over one model; its networks are in
policy/actor_critic.py) and the graphs it exports in algos/ppo_policy.py.

Recurrent policies (``recurrent``: policy/recurrent.py) learn from padded sequences
(data/minibatches.py) instead of shuffled steps; the network runs over the padding and only the real
steps are kept, so every loss, the entropy and the KL see exactly the steps a feed-forward update
would. The mirror loss (``mirror``: policy/mirror.py) is one more term in the same minibatch loss.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from relayrl.algos.compiled import CompiledLoss
from relayrl.algos.ppo_config import PPOConfig
from relayrl.algos.ppo_policy import PPOPolicy
from relayrl.algos.registry import register
from relayrl.core import Algorithm
from relayrl.data.dtypes import to_tensor
from relayrl.data.gae import compute_gae
from relayrl.data.minibatches import Epoch, sequence_minibatches, step_minibatches
from relayrl.envs.packed import PackedDict
from relayrl.errors import ConfigError, NonFiniteError
from relayrl.learners.collective import SOLO, Collective, per_learner
from relayrl.learners.moments import PooledMoments
from relayrl.policy.device import cpu_tree, host_to_device
from relayrl.policy.mirror import (EnvMirrorIndices, MirrorSpec, NormalizedMirror, TorchMirror, mirror_terms,
                                   no_env_mirror)
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.types import COLUMN, Batch


# ---------------------------------------------------------------- algorithm


class PPO(Algorithm):
    """Learns from [T, N] rollouts: ``learn(rollout, progress)`` returns metrics.

    As one of N data-parallel learners (``bind_learners``), each learns from its own env columns, a minibatch of
    ``batch_size / N`` of its steps at a time; the advantages are normalised over every learner's minibatch, the
    KL early stop and Ctrl-C's stop are agreed, and the observation and return statistics are pooled."""

    data_parallel = True

    def __init__(self, cfg: PPOConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        if cfg.recurrent is not None and type(self).targets is not PPO.targets:
            name = type(self).__name__.lower()
            raise ConfigError(f"{name} computes its targets with a feed-forward critic: train recurrent policies "
                              f"with ppo, or set {name}.recurrent=null")
        self.cfg = cfg
        self.policy = PPOPolicy(obs_space, act_space, cfg)
        self.actor_optim, self.critic_optim = self.optimizers()
        self.ret_rms = RunningMeanStd(()) if cfg.normalize_reward else None
        # what each learner adds to the statistics, pooled across learners (learners/moments.py; one learner: as is)
        self.obs_pool = None if self.policy.obs_rms is None else PooledMoments(self.policy.obs_rms)
        self.ret_pool = None if self.ret_rms is None else PooledMoments(self.ret_rms)
        self._ret = np.zeros(num_envs, dtype=np.float64)
        self.mirror: TorchMirror | None = None
        # forward + loss, compiled and in bf16 as cfg.compile and cfg.amp ask (algos/compiled.py)
        self.loss_step = CompiledLoss(self.loss, cfg, type(cfg).__name__.removesuffix("Config").lower())

    devices = ("cpu", "cuda")

    def to(self, device: torch.device) -> None:
        self.device = device
        self.policy.to(device)
        self.loss_step.to(device)
        if self.mirror is not None:
            self.mirror = self.mirror.to(device)
        # new optimisers, on the parameters as moved (a move may replace them rather than move them in place); no
        # state is lost: to() comes before any update or checkpoint (whose optimiser state then moves here)
        self.actor_optim, self.critic_optim = self.optimizers()

    def optimizers(self) -> tuple[torch.optim.Adam, torch.optim.Adam]:
        """Adam for the actor's parameters and for the critic's. Fused (one kernel per step instead of a Python
        loop over parameters: ~20% of an update on the CPU) where torch has the kernel: the CPU and CUDA."""
        cfg, model, fused = self.cfg, self.policy.model, self.device.type in ("cpu", "cuda")
        return (torch.optim.Adam(model.actor_parameters(), lr=cfg.actor_lr, eps=cfg.adam_eps, fused=fused),
                torch.optim.Adam(model.critic_parameters(), lr=cfg.critic_lr, eps=cfg.adam_eps, fused=fused))

    def bind_learners(self, learners: Collective) -> None:
        """One of ``learners.size`` learners; refuses what they cannot share: recurrent sequences (a learner's count
        and lengths depend on its data), a batch_size they cannot divide, an update compiled into CUDA graphs."""
        name = type(self.cfg).__name__.removesuffix("Config").lower()
        if learners.size > 1:
            if self.policy.recurrent:
                raise ConfigError(f"{name}.recurrent={self.cfg.recurrent} cannot be shared by {learners.size} "
                                  "learners (each learner's sequences differ in number and length, so their "
                                  f"minibatches would not line up): set learners=1, or {name}.recurrent=null")
            per_learner(self.cfg.batch_size, learners, f"{name}.batch_size")
        self.loss_step.share(learners.size)
        super().bind_learners(learners)
        self.mark_statistics()

    def mark_statistics(self) -> None:
        """The statistics every learner holds now are the shared start of the next pool (learners/moments.py)."""
        for pool in (self.obs_pool, self.ret_pool):
            if pool is not None:
                pool.mark()

    def bind_env(self, env_id: str, env_mirror: Callable[[], EnvMirrorIndices | None] = no_env_mirror) -> None:
        """Resolve and check what depends on the env itself (the mirror spec; ``auto`` without a built-in
        spec: the env's own indices, which ``env_mirror`` reads), before training starts."""
        policy, name = self.policy, type(self.cfg).__name__.removesuffix("Config").lower()  # ppo, appo
        if self.cfg.mirror <= 0:
            return
        if policy.obs_view not in ((-1,), (policy.obs_dim,)) or isinstance(policy.observation_space, PackedDict):
            # an image, a category or a Dict, not a vector to reflect
            raise ConfigError(f"{name}.mirror reflects observation vectors (signed indices), but "
                              f"{policy.observation_space} observations are not one: set {name}.mirror=0")
        if policy.multi or policy.hybrid is not None:
            raise ConfigError(f"{name}.mirror swaps the options of one action, but {policy.action_space} has "
                              f"several branches: set {name}.mirror=0")
        spec = MirrorSpec.load(self.cfg.mirror_spec, env_id, policy.obs_dim, policy.act_dim, env_mirror)
        if policy.discrete and (spec.act_sign < 0).any():
            raise ConfigError(f"mirror spec {self.cfg.mirror_spec!r}: discrete actions can only be swapped, not "
                              f"negated, but the act: list has negative entries for {env_id}")
        self.mirror = spec.torch(self.device)

    # Rewards are scaled in collection order, so the running return sees steps as they happened.
    def scale_rewards(self, rollout: Batch) -> np.ndarray:
        rewards = rollout["reward"] * self.cfg.reward_scale
        if self.ret_rms is None:
            return rewards
        done = rollout["terminated"] | rollout["truncated"]
        columns = rollout[COLUMN][0] if COLUMN in rollout else np.arange(len(self._ret))  # (types.COLUMN)
        running = self._ret[columns]
        for t in range(len(rewards)):
            running = running * self.cfg.gamma + rewards[t]
            self.ret_rms.update(running)
            running[done[t]] = 0.0
        self._ret[columns] = running
        self.ret_pool.pool(self.learners)  # every learner's returns, before any learner divides by their std
        return (rewards / self.ret_rms.std).astype(np.float32)

    def targets(self, rollout: Batch, rewards: np.ndarray, steps: dict[str, torch.Tensor]
                ) -> tuple[np.ndarray, np.ndarray]:
        """Advantages and value targets: GAE per trajectory; truncated episodes bootstrap from V(final obs).
        (``steps``: ``device_steps(rollout)``, for targets that run the networks, as APPO's.)"""
        return compute_gae(rewards, rollout["value"], rollout["next_value"], rollout["terminated"],
                           rollout["truncated"], self.cfg.gamma, self.cfg.gae_lambda)

    def learn(self, rollout: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg = self.cfg
        if cfg.mirror > 0 and self.mirror is None:
            raise ConfigError("ppo.mirror is on but no mirror spec was loaded: call bind_env(env_id) first")
        if self.obs_pool is not None:  # what every learner's collection added to the observation statistics
            self.obs_pool.pool(self.learners)
        steps = self.device_steps(rollout)
        adv, ret = self.targets(rollout, self.scale_rewards(rollout), steps)
        steps["advantage"], steps["return"] = self.tensor(adv), self.tensor(ret)
        epoch = self.minibatches(steps, rollout)
        per_epoch = self.agreed_minibatches(rollout)

        frac = max(0.0, 1.0 - progress)
        actor_lr = cfg.actor_lr * frac if cfg.anneal_lr else cfg.actor_lr
        critic_lr = cfg.critic_lr * frac if cfg.anneal_lr else cfg.critic_lr
        for group in self.actor_optim.param_groups:
            group["lr"] = actor_lr
        for group in self.critic_optim.param_groups:
            group["lr"] = critic_lr
        clip = cfg.clip * frac if cfg.anneal_clip else cfg.clip
        reflect = self.reflection() if cfg.mirror > 0 else None  # with this update's statistics
        clip_arg = self.loss_step.scalar(clip)

        # The loss terms stay on the device until the iteration ends: reading them after every minibatch would make
        # the host wait for each forward pass before it could queue the next update (on a GPU, most of the time). A
        # KL stop needs each minibatch's KL, so it reads them every minibatch.
        sums = {"loss/policy": 0.0, "loss/value": 0.0, "loss/entropy": 0.0, "approx_kl": 0.0, "clip_frac": 0.0}
        rows: list[torch.Tensor] = []
        names: list[str] = []
        updates, kl_stop, interrupted = 0, False, False
        for _ in range(cfg.epochs):
            for mb in itertools.islice(epoch(), per_epoch):
                # Ctrl-C (on any learner: every learner stops here): the rest of the iteration would take as long as it
                # was going to
                if self.learners.any_(self.stopping()):
                    interrupted = True
                    break
                names, row = self.update(mb, clip_arg, reflect)
                updates += 1
                if cfg.kl is None:
                    rows.append(row)
                    continue
                stats = self.read_terms(names, row[None])  # (the mean over the learners: they stop together)
                for key, value in stats.items():
                    sums[key] = sums.get(key, 0.0) + value
                if stats["approx_kl"] > cfg.kl:
                    kl_stop = True
                    break
            if kl_stop or interrupted:
                break
        if rows:
            for key, value in self.read_terms(names, torch.stack(rows)).items():
                sums[key] = sums.get(key, 0.0) + value

        metrics = {key: value / max(updates, 1) for key, value in sums.items()}
        y, v = ret.reshape(-1), rollout["value"].reshape(-1)
        var_y = float(np.var(y))
        metrics.update({
            "explained_variance": float("nan") if var_y == 0 else 1.0 - float(np.var(y - v)) / var_y,
            "lr/actor": actor_lr, "lr/critic": critic_lr, "clip": clip,
            "updates": float(updates), "kl_stop": float(kl_stop), "interrupted": float(interrupted),
        })
        self.policy.version += 1
        return metrics

    # ---- the rollout on the learner's device: it moves there once per learn(), as stored (the CPU: no copy)
    def device_steps(self, rollout: Batch) -> dict[str, torch.Tensor]:
        """What the loss reads of every step, [T, N, ...] each: "obs" as the network reads them (float32 of the
        stored dtype: uint8 images move as uint8 and are cast on the device), "action", "logp", "value" and, when
        the env masks actions, "action_mask" (the loss uses the distribution the actions were sampled from)."""
        T, N = rollout["value"].shape
        steps = {key: self.tensor(rollout[key]) for key in ("action", "logp", "value", "action_mask") if key in rollout}
        obs = to_tensor(rollout["obs"]) if self.device.type == "cpu" else self.tensor(rollout["obs"]).float()
        steps["obs"] = obs.reshape(T, N, *self.policy.obs_view)
        return steps

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` on the learner's device, dtype kept (the CPU: shares its memory; CUDA: from pinned memory,
        not blocking: policy/device.py)."""
        return host_to_device(array, self.device)

    def minibatches(self, steps: dict[str, torch.Tensor], rollout: Batch) -> Epoch:
        """One row per real step: shuffled steps, or [B, L] padded sequences (data/minibatches.py)."""
        if not self.policy.recurrent:
            return step_minibatches(steps, self.cfg.batch_size // self.learners.size)  # (bind_learners: it divides)
        return sequence_minibatches(steps, self.tensor(rollout["hidden"]), rollout["terminated"] | rollout["truncated"],
                                    self.cfg.seq_len, self.cfg.batch_trajectories)

    def agreed_minibatches(self, rollout: Batch) -> int | None:
        """How many minibatches of an epoch every learner takes: the fewest any learner has (their rollouts may
        differ in width: APPO's chunks as they arrive), so that all make the same all-reduces; None (one learner):
        every minibatch."""
        if self.learners.size == 1:
            return None
        n = rollout["value"].size
        return -self.learners.max_(-(n // max(1, min(self.cfg.batch_size // self.learners.size, n))))

    # ---- one gradient step on a minibatch
    def forward(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's output and the value for every real step of ``mb``."""
        model = self.policy.model
        if self.policy.recurrent:
            out, value, _ = model(mb["obs"], mb["hidden"])
            return out[mb["mask"]], value[mb["mask"]]  # padding is dropped here, before any loss
        return model.actor_critic(mb["obs"])

    def loss(self, mb: dict[str, torch.Tensor], clip: float | torch.Tensor, reflect: Any = None
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The minibatch's total loss and its terms (with the approximate KL and the clip fraction); what
        ``loss_step`` compiles (the networks in bf16 with amp, the loss in float32)."""
        cfg = self.cfg
        with self.loss_step.autocast():
            out, value = self.forward(mb)
        out, value = out.float(), value.float()
        # ---- clipped surrogate
        logp, entropy = self.policy.logp_entropy(out, mb["action"], mb.get("action_mask"))
        log_ratio = logp - mb["logp"]
        ratio = log_ratio.exp()
        adv = mb["advantage"]
        if "advantage_moments" in mb:  # the mean and std over every learner's minibatch (update)
            adv = (adv - mb["advantage_moments"][0]) / (mb["advantage_moments"][1] + 1e-8)
        elif cfg.normalize_advantage and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
        entropy_mean = entropy.mean()
        # ---- value loss, optionally clipped around the collection-time value
        returns, old_value = mb["return"], mb["value"]
        if cfg.value_clip is None:
            value_loss = 0.5 * (value - returns).pow(2).mean()
        else:
            clipped = old_value + (value - old_value).clamp(-cfg.value_clip, cfg.value_clip)
            value_loss = 0.5 * torch.max((value - returns).pow(2), (clipped - returns).pow(2)).mean()
        loss = policy_loss - cfg.entropy_coef * entropy_mean + value_loss
        # ---- mirror symmetry
        mirror_terms = self.mirror_terms(mb, out, value, reflect) if reflect is not None else {}
        for term in mirror_terms.values():
            loss = loss + cfg.mirror * term
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()
            clip_frac = ((ratio - 1).abs() > clip).float().mean()
        return loss, {"loss/policy": policy_loss, "loss/value": value_loss, "loss/entropy": entropy_mean,
                      "approx_kl": approx_kl, "clip_frac": clip_frac, **mirror_terms}

    def update(self, mb: dict[str, torch.Tensor], clip: float | torch.Tensor, reflect: Any = None
               ) -> tuple[list[str], torch.Tensor]:
        """One gradient step on the minibatch; returns the names of its loss terms and, on the device, the row
        [total loss, *terms] (``read_terms`` reads rows of them in one transfer)."""
        cfg, model = self.cfg, self.policy.model
        if cfg.normalize_advantage and self.learners.size > 1:
            mb = {**mb, "advantage_moments": self.advantage_moments(mb["advantage"])}
        loss, terms = self.loss_step(mb, clip, reflect)
        row = torch.stack([term.detach() for term in (loss, *terms.values())])
        self.actor_optim.zero_grad(set_to_none=True)
        self.critic_optim.zero_grad(set_to_none=True)
        loss.backward()
        # every learner's gradient (and loss terms: the metrics and the KL stop see the whole minibatch's), averaged
        # before clipping, as one learner on the whole minibatch would clip it
        row = self.learners.average_gradients(model.parameters(), row)
        if cfg.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.actor_parameters(), cfg.grad_clip)
            nn.utils.clip_grad_norm_(model.critic_parameters(), cfg.grad_clip)
        self.actor_optim.step()
        self.critic_optim.step()
        return list(terms), row

    def advantage_moments(self, adv: torch.Tensor) -> torch.Tensor:
        """[mean, std] (float32, the std unbiased as torch's) of the advantages of every learner's minibatch."""
        wide = adv.double()
        sums = torch.stack([wide.new_tensor(len(adv)), wide.sum(), wide.pow(2).sum()])
        n, total, squares = self.learners.sum_(sums)
        mean = total / n
        var = (squares - n * mean * mean) / (n - 1).clamp(min=1)
        return torch.stack([mean, var.clamp(min=0).sqrt()]).to(adv.dtype)

    @staticmethod
    def read_terms(names: list[str], rows: torch.Tensor) -> dict[str, float]:
        """The sums over ``rows`` (minibatches x [total, *terms], on the device) of each term, read in one transfer;
        a NonFiniteError at the first minibatch whose loss was not finite (the run ends there, its checkpoints as
        they were: the updates after it are never saved)."""
        table = rows.cpu().numpy().astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(table[:, 0]))
        if len(bad):
            total, *values = table[bad[0]]
            stats = dict(zip(names, values))
            raise NonFiniteError(
                f"PPO loss became {total} (policy {stats['loss/policy']}, value {stats['loss/value']}): lower the "
                "learning rates, enable obs_norm / normalize_reward, or lower reward_scale")
        return dict(zip(names, table[:, 1:].sum(0).tolist()))

    def mirror_terms(self, mb: dict[str, torch.Tensor], out: torch.Tensor, value: torch.Tensor,
                     reflect: Any) -> dict[str, torch.Tensor]:
        """The mirror-symmetry terms of ``mb`` (policy/mirror.py, ``mirror_terms``), real steps only."""
        return mirror_terms(self.policy.model, mb["obs"], out, value, reflect, discrete=self.policy.discrete,
                            critic=self.cfg.mirror_critic, mask=mb["mask"] if self.policy.recurrent else None)

    def reflection(self) -> Any:
        """The mirror of (normalised) observations and of actions, with the current statistics (None: off)."""
        if self.mirror is None or self.policy.obs_rms is None:
            return self.mirror
        return NormalizedMirror(self.mirror, self.policy.obs_rms)

    # ---- persistence: everything needed to continue training exactly
    def state_dict(self) -> dict[str, Any]:
        state = {**self.policy.get_weights(), "version": self.policy.version,  # (on the CPU, as the optimisers')
                 "actor_optim": cpu_tree(self.actor_optim.state_dict()),
                 "critic_optim": cpu_tree(self.critic_optim.state_dict()), "ret": self._ret.copy()}
        if self.ret_rms is not None:
            state["ret_rms"] = self.ret_rms.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        if self.ret_rms is not None and "ret_rms" in state:
            self.ret_rms.load_state_dict(state["ret_rms"])
        self.mark_statistics()  # (every learner loads the same state)
        if len(state["ret"]) == len(self._ret):
            self._ret = np.asarray(state["ret"], dtype=np.float64).copy()

    # ---- threads=-1 (training/threads.py) times this rather than a stand-in network
    def timing_step(self) -> Callable[[], None]:
        """A gradient step of this configuration's real shape on a throwaway copy: its network (a
        recurrent layer's seq_len small products gain less from threads than an MLP's one wide product),
        its minibatch (steps, or padded sequences) and its loss terms, on a rollout of zeros."""
        clone, policy = copy.deepcopy(self), self.policy
        clone.learners = SOLO  # (timed alone: no other learner takes part)
        shape = (self.cfg.num_steps, len(self._ret))  # [T, N] of one rollout

        def zeros(*rest: int, dtype: Any = np.float32) -> np.ndarray:
            return np.zeros((*shape, *rest), dtype=dtype)
        rollout = {"terminated": zeros(dtype=bool), "truncated": zeros(dtype=bool), "logp": zeros(), "value": zeros(),
                   "obs": zeros(*policy.obs_shape, dtype=policy.obs_dtype),
                   "action": zeros(*policy.action_shape, dtype=policy.action_dtype)}
        if policy.recurrent:
            rollout["hidden"] = zeros(policy.state_size)
        steps = clone.device_steps(rollout)
        steps["advantage"], steps["return"] = clone.tensor(zeros()), clone.tensor(zeros())
        epoch = clone.minibatches(steps, rollout)
        mb, reflect = next(iter(epoch())), clone.reflection()
        return lambda: clone.update(mb, clone.loss_step.scalar(self.cfg.clip), reflect)


register("ppo", PPOConfig, PPO, PPOPolicy, on_policy=True)
