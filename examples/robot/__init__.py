"""TMRL's tutorial in relayrl: a robot's own env, network and algorithm, trained through a relay by three scripts
(relay.py, worker.py, trainer.py). docs/library.md, "A robot in Python", walks through them."""
