"""Your own memory, TMRL's kind: DQN on a frame-stacked image env whose memory keeps each single frame once and
rebuilds the k-frame history of obs and next_obs at sample time (TMRL's TrackMania memory does this for its
screenshots).

    python -m examples.history_memory [--total-steps N] [--run-dir DIR]     (from the repository root)

The env stacks K frames (``env.frame_stack``, Gymnasium's FrameStackObservation: an episode starts with its
first frame repeated K times). Each transition the learner receives holds two stacks, 2K frames; this memory
holds, per transition, about one new frame and 2K frame numbers:

- a stack seen before (obs is the previous transition's next_obs, or with n-step returns the next_obs of n
  transitions back) reuses its frame numbers;
- a stack whose first K - 1 frames are the last K - 1 of a stack seen before (the next step of that env)
  stores its newest frame only;
- any other stack (an episode's first) stores its distinct frames (one, for a reset's repeated frame).

Streams of several envs, interleaved, are told apart by content, so it works with any ``env.num_envs`` and
any number of workers. ``sample`` returns exactly the stacks that were added (tests/examples/
test_history_memory.py checks this on real env data), with every other column as given.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict

import numpy as np

from relayrl.data.replay import Replay
from relayrl.envs.spaces import image_layout

K = 4  # the frames in a stack: the env's frame_stack
CONFIG = {"env": {"frame_stack": K, "num_envs": 4},
          "dqn": {"replay": "examples.history_memory:HistoryMemory", "buffer_size": 50_000, "start_training": 500,
                  "batch_size": 64, "n_step": 1},
          "eval": {"freq": 2000, "episodes": 5}}
ENV = "MinAtar/Breakout-v1"
REMEMBERED = 4096  # stacks remembered for reuse (a few per env is enough; old ones are forgotten)


class HistoryMemory(Replay):
    def __init__(self, *, capacity, observation_space, action_space, seed, batch_size, k=K):
        shape = observation_space.shape  # a stack of K frames, laid out as env.frame_stack lays out one frame's kind
        last = (*shape[:2], shape[2] // k)  # (the layout is the single frame's: envs/registry.py stack_frames)
        self.channels_last = shape[2] % k == 0 and not image_layout(last).channels_first
        self.k, self.capacity, self.rng = k, capacity, np.random.default_rng(seed)
        self.frame_shape = (*shape[:2], shape[2] // k) if self.channels_last else (shape[0] // k, *shape[1:])
        self.frame_capacity = capacity + capacity // 4 + 2 * k  # (episode starts add frames; the oldest go first)
        self.frames: np.ndarray | None = None  # [frame_capacity, *frame_shape], allocated at the first add
        self.written = 0  # frames ever written: frame number f is at row f % frame_capacity while f >= written - cap
        self.ids = np.zeros((capacity, 2 * k), np.int64)  # per transition: the frame numbers of obs, then next_obs
        self.oldest = np.zeros(capacity, np.int64)  # per transition: its oldest frame number
        self.other: dict[str, np.ndarray] = {}  # every other column, one row per transition
        self.next, self.size = 0, 0
        self.stacks: OrderedDict[bytes, tuple[int, ...]] = OrderedDict()  # stack content -> its frame numbers
        self.tails: OrderedDict[bytes, tuple[int, ...]] = OrderedDict()  # last K-1 frames -> their numbers

    # ---- frames of a stack, and back
    def split(self, stacks: np.ndarray) -> np.ndarray:
        """[n, *stack] -> [n, K, *frame]."""
        if self.channels_last:  # [n, H, W, K*C] with frame-major channels
            n, h, w, _ = stacks.shape
            return np.moveaxis(stacks.reshape(n, h, w, self.k, -1), 3, 1)
        return stacks.reshape(len(stacks), self.k, *self.frame_shape)

    def join(self, frames: np.ndarray) -> np.ndarray:
        """[n, K, *frame] -> [n, *stack]."""
        if self.channels_last:
            n, _, h, w, _ = frames.shape
            return np.moveaxis(frames, 1, 3).reshape(n, h, w, -1)
        return frames.reshape(len(frames), -1, *self.frame_shape[1:])

    # ---- the contract
    def add(self, batch):
        obs, next_obs = self.split(np.asarray(batch["obs"])), self.split(np.asarray(batch["next_obs"]))
        if self.frames is None:
            self.frames = np.zeros((self.frame_capacity, *self.frame_shape), obs.dtype)
            self.other = {key: np.zeros((self.capacity, *np.shape(v)[1:]), np.asarray(v).dtype)
                          for key, v in batch.items() if key not in ("obs", "next_obs")}
        for i in range(len(obs)):
            row = self.next
            self.ids[row] = (*self._numbers(obs[i]), *self._numbers(next_obs[i]))
            self.oldest[row] = self.ids[row].min()
            for key, column in self.other.items():
                column[row] = batch[key][i]
            self.next, self.size = (self.next + 1) % self.capacity, min(self.capacity, self.size + 1)

    def sample(self, n, version=None):
        if self.size == 0:
            return None
        live = self._live()
        rows = live[self.rng.integers(0, len(live), n)]
        frames = self.frames[self.ids[rows] % self.frame_capacity]  # [n, 2K, *frame]
        batch = {key: column[rows] for key, column in self.other.items()}
        batch["obs"], batch["next_obs"] = self.join(frames[:, :self.k]), self.join(frames[:, self.k:])
        return batch

    def __len__(self):
        return self.size

    def stats(self):
        return {"replay/size": float(self.size), "replay/frames": float(min(self.written, self.frame_capacity))}

    def bytes_per_transition(self) -> float:
        """What this memory holds per transition it holds: frames, frame numbers and the other columns."""
        frames = 0 if self.frames is None else min(self.written, self.frame_capacity) * self.frames[0].nbytes
        other = sum(column[0].nbytes for column in self.other.values()) + self.ids[0].nbytes + self.oldest[0].nbytes
        return frames / max(1, self.size) + other

    def nbytes(self) -> int:
        """The bytes of the arrays it has allocated (for capacity transitions)."""
        frames = 0 if self.frames is None else self.frames.nbytes
        return frames + self.ids.nbytes + self.oldest.nbytes + sum(column.nbytes for column in self.other.values())

    # ---- frame numbers
    def _numbers(self, frames: np.ndarray) -> tuple[int, ...]:
        """The frame numbers of one stack [K, *frame]: reused, extended by its newest frame, or written anew."""
        key = frames.tobytes()
        known = self.stacks.get(key)
        if known is not None and self._alive(min(known)):
            self.stacks.move_to_end(key)
            return known
        tail = self.tails.get(frames[:-1].tobytes())
        if tail is not None and self._alive(min(tail)):
            numbers = (*tail, self._write(frames[-1]))
        else:  # an episode's first stack: a frame equal to the one before it is held once (a reset's K: one)
            written: list[int] = []
            for j, frame in enumerate(frames):
                same = j > 0 and np.array_equal(frame, frames[j - 1])
                written.append(written[-1] if same else self._write(frame))
            numbers = tuple(written)
        self._remember(self.stacks, key, numbers)
        self._remember(self.tails, frames[1:].tobytes(), numbers[1:])
        return numbers

    def _write(self, frame: np.ndarray) -> int:
        self.frames[self.written % self.frame_capacity] = frame
        self.written += 1
        return self.written - 1

    def _alive(self, number: int) -> bool:
        return number >= self.written - self.frame_capacity

    @staticmethod
    def _remember(table: OrderedDict, key: bytes, numbers: tuple[int, ...]) -> None:
        table[key] = numbers
        table.move_to_end(key)
        if len(table) > REMEMBERED:
            table.popitem(last=False)

    def _live(self) -> np.ndarray:
        """Rows whose oldest frame is still held (the frame ring overwrites the oldest frames first)."""
        rows = np.arange(self.size)
        return rows[self.oldest[:self.size] >= self.written - self.frame_capacity]


def main() -> None:
    import relayrl

    parser = argparse.ArgumentParser()
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()
    run = relayrl.train("dqn", ENV, CONFIG, total_steps=args.total_steps, run_dir=args.run_dir, seed=0)
    print(f"best eval return {run.summary['best_eval_return']:.1f}, written to {run.run_dir}")


if __name__ == "__main__":
    main()
