"""Test and benchmark helpers that worker processes can import (fault-injecting and slow envs, a relay in a thread,
replay shards in process)."""
