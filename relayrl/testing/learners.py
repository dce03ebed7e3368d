"""Data-parallel learners in real processes, for tests: ``run_group(scenarios)`` starts ``size`` learner processes
(the "spawn" context) joined over gloo on 127.0.0.1, runs each named scenario in every one of them, in order, and
returns each learner's results; a deadline ends a group that hangs (the test then fails, it does not wait).

A scenario is a function ``(learners: Collective) -> dict[str, np.ndarray]`` that learns from the share of a fixed
batch that ``learners.rank`` owns (``share``), so that calling it with ``SOLO`` (one learner: the whole batch) gives
the reference the learners' results are compared with. Every batch is drawn from a fixed seed, so every process
builds the same one without receiving it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import socket
import threading
import time
import traceback
from typing import Any, Callable, Iterator

import gymnasium as gym
import numpy as np
import torch

from relayrl.learners.collective import Collective, Solo

Result = dict[str, np.ndarray]
T, N, OBS = 16, 4, 3  # on-policy rollouts: [T, N] steps of 3-d observations
ROWS = 64  # off-policy batches: rows of the whole batch


# ---------------------------------------------------------------- the processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_group(scenarios: list[str], size: int = 2, deadline_s: float = 60.0, timeout_s: float = 20.0,
              wait_for: list[int] | None = None, device: str = "cpu", torchrun: bool = False) -> list[dict[str, Any]]:
    """Each learner's ``{scenario: result or "error: ..."}``, learner 0's first. ``timeout_s``: the group's collective
    timeout; ``deadline_s``: the whole run's, after which the processes are killed and a TimeoutError raised;
    ``wait_for``: the learners whose results are awaited (None: all; the others' are {} and they are killed);
    ``device``: "cuda" joins the group over NCCL, learner r on cuda:r; ``torchrun``: each learner finds the group in
    the environment variables torchrun sets (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) rather than in
    ``init_collective``'s arguments."""
    wanted = set(range(size) if wait_for is None else wait_for)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_learner, args=(rank, size, port, scenarios, timeout_s, queue, device, torchrun), daemon=True)
             for rank in range(size)]
    for proc in procs:
        proc.start()
    results: dict[int, dict[str, Any]] = {}
    end = time.monotonic() + deadline_s
    try:
        while not wanted <= set(results):
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"learners {sorted(wanted - set(results))} gave no result within "
                                   f"{deadline_s:g} s")
            try:
                rank, result = queue.get(timeout=min(left, 1.0))
            except Exception:  # (queue.Empty) a learner that died without a word counts as one with no result
                if all(not p.is_alive() for p in procs) and queue.empty():
                    missing = sorted(wanted - set(results))
                    raise RuntimeError(f"learners {missing} exited without a result") from None
                continue
            results[rank] = result
    finally:
        for rank, proc in enumerate(procs):
            proc.join(timeout=5 if rank in wanted else 0)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return [results.get(rank, {}) for rank in range(size)]


def _learner(rank: int, size: int, port: int, scenarios: list[str], timeout_s: float, queue: Any, device: str,
             torchrun: bool) -> None:
    torch.set_num_threads(1)
    from relayrl.learners.collective import init_collective

    out: dict[str, Any] = {}
    try:
        if torchrun:
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(size),
                              LOCAL_RANK=str(rank))
            learners = init_collective(device=device, timeout_s=timeout_s)
        else:
            learners = init_collective(rank, size, f"tcp://127.0.0.1:{port}", device, timeout_s=timeout_s)
    except Exception as error:
        queue.put((rank, {name: f"error: {error}" for name in scenarios}))
        return
    for name in scenarios:
        started = time.monotonic()
        try:
            out[name] = SCENARIOS[name](learners)
        except Exception as error:
            out[name] = f"error: {type(error).__name__}: {error}\n{traceback.format_exc()}"
        out[f"{name}/seconds"] = time.monotonic() - started
    queue.put((rank, out))
    learners.close()


class Alone(Solo):
    """Learner ``rank`` of ``size`` that learns from its share and never talks to the others: what each would do
    without the group (the counter-example the agreement tests need), and a group's size for refusals checked before
    any call."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size


# ---------------------------------------------------------------- fixed batches and shares


def share(array: np.ndarray, learners: Collective, axis: int) -> np.ndarray:
    """The learner's equal slice of ``array`` along ``axis`` (env columns of a rollout, rows of a replay batch)."""
    n = array.shape[axis] // learners.size
    index = [slice(None)] * array.ndim
    index[axis] = slice(learners.rank * n, (learners.rank + 1) * n)
    return array[tuple(index)]


def rollout(seed: int, actions: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A fixed [T, N] rollout of 3-d observations and two actions, with terminations and truncations."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(T, N, OBS)).astype(np.float32),
            "action": rng.integers(0, 2, (T, N)) if actions is None else actions,
            "logp": rng.normal(np.log(0.5), 0.05, (T, N)).astype(np.float32),
            "value": rng.normal(size=(T, N)).astype(np.float32),
            "reward": rng.normal(0.5, 1.0, (T, N)).astype(np.float32),
            "terminated": rng.random((T, N)) < 0.06, "truncated": rng.random((T, N)) < 0.04,
            "next_value": rng.normal(size=(T, N)).astype(np.float32)}


def columns(batch: dict[str, np.ndarray], learners: Collective) -> dict[str, np.ndarray]:
    return {key: share(value, learners, 1) for key, value in batch.items()}


def on_policy(name: str, learners: Collective, *sets: str, num_envs: int | None = None) -> Any:
    """PPO or APPO for the fixed rollouts (``num_envs`` columns; None: the learner's share of N), built from seed 0
    (every learner: the same initial weights), bound."""
    from relayrl.algos import get_algo
    from relayrl.config import build_config

    torch.manual_seed(0)
    entry = get_algo(name)
    cfg = build_config(name, None, list(sets)).algo_config
    algo = entry.build_algorithm(cfg, gym.spaces.Box(-5, 5, (OBS,), np.float32), gym.spaces.Discrete(2),
                                 N // learners.size if num_envs is None else num_envs)
    algo.bind_learners(learners)
    return algo


def weights(*modules: torch.nn.Module) -> Result:
    return {f"{i}.{key}": value.detach().cpu().numpy().copy() for i, module in enumerate(modules)
            for key, value in module.state_dict().items()}


# ---------------------------------------------------------------- scenarios


def ppo_exact(learners: Collective, name: str = "ppo") -> Result:
    """Two iterations of 3 epochs, one minibatch per epoch (each learner's: its whole share), advantages normalised,
    gradients clipped hard (the averaged gradient's norm is what is clipped), rewards scaled by the return's std."""
    algo = on_policy(name, learners, f"{name}.epochs=3", f"{name}.batch_size={T * N}", f"{name}.grad_clip=0.05",
                     f"{name}.normalize_advantage=true", f"{name}.normalize_reward=true", f"{name}.value_clip=0.3")
    metrics = [algo.learn(columns(rollout(seed), learners), progress=0.25 * seed) for seed in (1, 2)]
    return {**weights(algo.policy.model), "ret_rms": np.array([algo.ret_rms.mean, algo.ret_rms.var,
                                                                algo.ret_rms.count]),
            "ret": algo._ret.copy(), "loss": np.array([m["loss/policy"] + m["loss/value"] for m in metrics])}


def appo_exact(learners: Collective) -> Result:
    return ppo_exact(learners, "appo")


def kl_rollout() -> dict[str, np.ndarray]:
    """Learner 1's columns were collected by a policy further from the current one (their log-probabilities 0.3
    lower: an approximate KL of 0.05 before any update), learner 0's by this one: alone, learner 1 would stop
    after its first minibatch and learner 0 minibatches later."""
    batch = rollout(3, actions=np.ones((T, N), np.int64))
    batch["logp"][:] = np.log(0.5)
    batch["logp"][:, N // 2:] -= 0.3
    return batch


def ppo_kl(learners: Collective) -> Result:
    """Many epochs of two minibatches, stopped early by the KL (decided on the KL of every learner's minibatch)."""
    algo = on_policy("ppo", learners, "ppo.epochs=40", f"ppo.batch_size={T * N // 2}", "ppo.kl=0.03",
                     "ppo.actor_lr=0.003", "ppo.normalize_reward=false")
    metrics = algo.learn(columns(kl_rollout(), learners))
    return {**weights(algo.policy.model), "updates": np.array(metrics["updates"]),
            "kl_stop": np.array(metrics["kl_stop"])}


def ppo_interrupt(learners: Collective) -> Result:
    """Learner 0 alone is asked to stop (Ctrl-C) before its iteration: every learner stops with it."""
    algo = on_policy("ppo", learners, "ppo.batch_size=16")
    event = threading.Event()
    if learners.rank == 0:
        event.set()
    algo.stop_on(event)
    metrics = algo.learn(columns(rollout(1), learners))
    return {"updates": np.array(metrics["updates"]), "interrupted": np.array(metrics["interrupted"])}


def appo_widths(learners: Collective) -> Result:
    """Learners whose rollouts differ in width (APPO learns from chunks as they arrive): learner 0 gets 3 columns, the
    others 1; each epoch, every learner takes as many minibatches as the narrowest has."""
    width = 3 if learners.rank == 0 else 1
    algo = on_policy("appo", learners, "appo.batch_size=16", "appo.epochs=2", num_envs=width)
    batch = rollout(1)
    start = 0 if learners.rank == 0 else 2 + learners.rank
    metrics = algo.learn({key: value[:, start:start + width] for key, value in batch.items()})
    return {**weights(algo.policy.model), "updates": np.array(metrics["updates"])}


def metrics(learners: Collective) -> Result:
    """Learner r's metrics {"loss": r, "updates": 4 + 2r, "rank": its rank}, averaged over the group."""
    mean = learners.mean_metrics({"updates": 4.0 + 2 * learners.rank, "loss": float(learners.rank),
                                  "rank": float(learners.rank)})
    return {key: np.array(value) for key, value in mean.items()}


def gather(learners: Collective) -> Result:
    """Learner r's episodes (r + 1 returns of value r), gathered on every learner in rank order."""
    parts = learners.all_gather_object([float(learners.rank)] * (learners.rank + 1))
    return {"episodes": np.array([value for part in parts for value in part])}  # type: ignore[union-attr]


def observations(rank: int, round_: int) -> np.ndarray:
    """What learner ``rank`` acts on in ``round_``: each learner's from another distribution."""
    rng = np.random.default_rng(10 * round_ + rank)
    return rng.normal(3.0 * rank, 1.0 + rank, (50 + 10 * rank, OBS)).astype(np.float32)


def ppo_obs_norm(learners: Collective) -> Result:
    """Each learner acts on its own observations (its statistics grow from them), then learns, twice: the pooled
    statistics after each learn."""
    algo = on_policy("ppo", learners, "ppo.obs_norm=true", "ppo.batch_size=16")
    out: Result = {}
    for round_ in (0, 1):
        algo.policy.act(observations(learners.rank, round_), "collect")
        algo.learn(columns(rollout(round_), learners))
        rms = algo.policy.obs_rms
        out[f"round{round_}"] = np.concatenate([rms.mean, rms.var, [rms.count]])
    return out


def replay_batch(seed: int, discrete: bool) -> dict[str, np.ndarray]:
    """A fixed replay minibatch of ROWS transitions (n-step discounts, terminations, importance weights)."""
    rng = np.random.default_rng(seed)
    batch = {"obs": rng.normal(size=(ROWS, OBS)).astype(np.float32),
             "next_obs": rng.normal(size=(ROWS, OBS)).astype(np.float32),
             "reward": rng.normal(size=ROWS).astype(np.float32),
             "discount": (0.99 ** rng.integers(1, 4, ROWS)).astype(np.float32),
             "terminated": (rng.random(ROWS) < 0.1).astype(np.float32),
             "weight": rng.uniform(0.2, 1.0, ROWS).astype(np.float32)}
    batch["action"] = rng.integers(0, 3, ROWS) if discrete else rng.uniform(-1, 1, (ROWS, 2)).astype(np.float32)
    return batch


def rows(batch: dict[str, np.ndarray], learners: Collective) -> dict[str, np.ndarray]:
    return {key: share(value, learners, 0) for key, value in batch.items()}


def off_policy(name: str, learners: Collective, act_space: gym.Space, *sets: str) -> Any:
    from relayrl.algos import get_algo
    from relayrl.config import build_config

    torch.manual_seed(0)
    cfg = build_config(name, None, [f"{name}.batch_size={ROWS}", f"{name}.hidden_sizes=[32,32]", *sets]).algo_config
    algo = get_algo(name).build_algorithm(cfg, gym.spaces.Box(-5, 5, (OBS,), np.float32), act_space, 1)
    algo.bind_learners(learners)
    return algo


def dqn_exact(learners: Collective) -> Result:
    """Five updates on fixed batches: double Q, a hard target copy every 2 updates, gradients clipped hard."""
    algo = off_policy("dqn", learners, gym.spaces.Discrete(3), "dqn.grad_clip=0.5", "dqn.target_update_period=2")
    priorities = []
    for seed in range(5):
        algo.learn(rows(replay_batch(seed, discrete=True), learners))
        priorities.append(algo.pop_priorities())
    return {**weights(algo.policy.model, algo.target), "priorities": np.stack(priorities)}


@contextlib.contextmanager
def rowwise_noise() -> Iterator[None]:
    """SAC's sampling noise as a function of each row's own values (sin of the actor's mean), not draws of the global
    generator: a learner's half of the batch then gets the noise those rows get in the whole batch."""
    draw: Callable[..., torch.Tensor] = torch.randn_like
    torch.randn_like = lambda like, *args, **kwargs: torch.sin(1000.0 * like.detach())  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.randn_like = draw  # type: ignore[assignment]


def sac_exact(learners: Collective) -> Result:
    """Five updates on fixed batches: twin critics, the actor and the temperature (autotune), the soft target."""
    algo = off_policy("sac", learners, gym.spaces.Box(-1, 1, (2,), np.float32), "sac.start_training=0")
    with rowwise_noise():
        for seed in range(5):
            algo.learn(rows(replay_batch(seed, discrete=False), learners))
    return {**weights(algo.policy.actor, algo.critic, algo.target),
            "log_alpha": algo.log_alpha.detach().numpy().copy()}


def learn_timed(algo, learners: Collective) -> Result:
    """Learner 0 learns from a rollout: the error it raised (empty: none) and the seconds until then."""
    started = time.monotonic()
    try:
        algo.learn(columns(rollout(1), learners))
    except Exception as error:
        return {"error": np.array(f"{type(error).__name__}: {error}"), "seconds": np.array(time.monotonic() - started)}
    return {"error": np.array(""), "seconds": np.array(time.monotonic() - started)}


def peer_dies(learners: Collective) -> Result:
    """Learner 1 dies once the group has formed; learner 0 learns: its first all-reduce must raise."""
    algo = on_policy("ppo", learners, "ppo.batch_size=16")
    learners.max_(0)  # (both are in the group)
    if learners.rank == 1:
        os._exit(0)
    return learn_timed(algo, learners)


def peer_hangs(learners: Collective) -> Result:
    """Learner 1 stays alive but never joins learner 0's next collective: learner 0's must raise at the timeout."""
    algo = on_policy("ppo", learners, "ppo.batch_size=16")
    learners.max_(0)
    if learners.rank == 1:
        time.sleep(30)  # (killed by run_group once learner 0 has answered)
        return {}
    return learn_timed(algo, learners)


def nccl_average(learners: Collective) -> Result:
    """On cuda:rank (NCCL): learner r's gradients of sum(W x + b) over 4 rows of x = r + 1, averaged; a flag only
    learner 1 raises (gloo, in the same group)."""
    device = torch.device("cuda", learners.local_rank)
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2).to(device)
    layer(torch.full((4, 3), float(learners.rank + 1), device=device)).sum().backward()
    values = learners.average_gradients(layer.parameters(), torch.tensor([float(learners.rank)], device=device))
    return {"weight": layer.weight.grad.cpu().numpy(), "bias": layer.bias.grad.cpu().numpy(),
            "values": values.cpu().numpy(), "any": np.array(learners.any_(learners.rank == 1))}


SCENARIOS: dict[str, Callable[[Collective], Result]] = {
    "ppo_exact": ppo_exact, "appo_exact": appo_exact, "ppo_kl": ppo_kl, "ppo_interrupt": ppo_interrupt,
    "ppo_obs_norm": ppo_obs_norm, "appo_widths": appo_widths, "metrics": metrics, "gather": gather, "dqn_exact": dqn_exact, "sac_exact": sac_exact, "peer_dies": peer_dies,
    "peer_hangs": peer_hangs, "nccl_average": nccl_average}
