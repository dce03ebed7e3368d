"""Training drivers: collector, evaluator, learner with hooks, and the loops that join them."""
