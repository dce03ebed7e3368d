"""Where rollout workers run. Every backend offers the same calls to the pool:

- ``start(seed)``: create the workers (worker k seeded ``seed + 1000 * k``);
- ``publish(params, env_steps)``: make ``params`` the weights every worker loads before its next chunk;
- ``request(version)``: on-policy, ask every worker for one chunk collected with ``version``;
- ``receive(timeout)``: the chunks that arrived (blocking up to ``timeout`` for the first), after
  restarting any worker that died;
- ``close()``; and the counters ``restarts`` and ``num_workers``.
"""

WORKER_SEED_STRIDE = 1000
