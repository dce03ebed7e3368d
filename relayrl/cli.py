"""``relayrl train | eval | plot | config``: the command line (spellings fixed by DESIGN.md)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from relayrl.errors import ConfigError, RelayRLError

EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relayrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train an algorithm on an environment")
    p.add_argument("algo", metavar="ALGO", help="algorithm, e.g. ppo")
    p.add_argument("--env", help="Gymnasium env id, e.g. CartPole-v1 (default: the config's env.id)")
    p.add_argument("--config", type=Path, help="YAML file of options (see `relayrl config ALGO`)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one option, e.g. --set ppo.epochs=4 (repeatable)")
    p.add_argument("--seed", type=int)
    p.add_argument("--total-steps", type=int, help="stop after this many env steps")
    p.add_argument("--stop-value", type=float, help="stop once the eval mean return reaches this")
    p.add_argument("--run-dir", type=Path, help="where to write the run (default runs/<env>_<algo>_<time>)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a stopped run from its last checkpoint")
    p.add_argument("--previous", type=Path, metavar="CHECKPOINT",
                   help="start from another run's policy weights and normaliser")
    p.add_argument("--backend", choices=["auto", "inline", "mp", "ray"],
                   help="where rollout workers run (default auto: inline for one worker, mp for more)")
    p.add_argument("--workers", type=int, help="rollout workers, each with env.num_envs envs")
    p.add_argument("--ray-address", help="backend ray: join this cluster (auto or HOST:PORT) instead of a local Ray")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-tensorboard", action="store_true", help="skip TensorBoard event files")

    p = sub.add_parser("eval", help="run the deterministic policy of a run or checkpoint")
    p.add_argument("path", metavar="RUN_DIR|CHECKPOINT", type=Path)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--env", help="evaluate on another env id (same spaces)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--render", nargs="?", const="", metavar="FILE.gif",
                   help="also record one episode as a GIF (default: <run>/episode.gif)")

    p = sub.add_parser("plot", help="draw learning curves of one or more runs")
    p.add_argument("runs", metavar="RUN_DIR", type=Path, nargs="+")
    p.add_argument("-o", "--output", type=Path, default=Path("curve.png"))

    p = sub.add_parser("config", help="print an algorithm's default config as YAML")
    p.add_argument("algo", metavar="ALGO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"train": cmd_train, "eval": cmd_eval, "plot": cmd_plot, "config": cmd_config}[args.command](args)
    except RelayRLError as exc:
        print(f"relayrl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("relayrl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def cmd_config(args: argparse.Namespace) -> int:
    from relayrl.config import default_config, to_yaml

    sys.stdout.write(to_yaml(default_config(args.algo)))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from relayrl.config import build_config, diff_configs, read_yaml
    from relayrl.runtime import train

    overrides = {"env.id": args.env, "seed": args.seed, "total_steps": args.total_steps,
                 "stop_value": args.stop_value, "backend": args.backend, "workers": args.workers,
                 "ray_address": args.ray_address}
    run_dir = args.run_dir
    if args.resume is not None:
        if args.previous is not None:
            raise ConfigError("--resume and --previous exclude each other: resume continues a run, "
                              "previous starts a new one from a checkpoint")
        saved_file = args.resume / "config.yaml"
        if not saved_file.is_file():
            raise ConfigError(f"--resume {str(args.resume)!r}: no config.yaml there; pass a run directory "
                              "written by relayrl train")
        saved = build_config(args.algo, read_yaml(saved_file))
        file_data = read_yaml(args.config) if args.config else {}
        config = build_config(args.algo, {**saved.model_dump(), **file_data}, args.sets, overrides)
        if config.env.id != saved.env.id:
            raise ConfigError(f"--resume cannot change the env ({saved.env.id} -> {config.env.id}); "
                              "use --previous to start a new run from this one's weights")
        for change in diff_configs(saved, config):
            print(f"relayrl: resume with a changed option: {change}", file=sys.stderr)
        run_dir = args.resume
    else:
        config = build_config(args.algo, read_yaml(args.config) if args.config else None, args.sets, overrides)

    stop_event = threading.Event()

    def on_sigint(signum, frame):  # first Ctrl-C: finish the iteration, save, exit 130
        stop_event.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("\nrelayrl: stopping after this iteration (Ctrl-C again to abort now)", file=sys.stderr)

    previous_handler = signal.signal(signal.SIGINT, on_sigint)
    try:
        summary = train(config, run_dir=run_dir, resume=args.resume is not None, previous=args.previous,
                        quiet=args.quiet, tensorboard=not args.no_tensorboard, stop_event=stop_event)
    finally:
        signal.signal(signal.SIGINT, previous_handler)
    _print_summary(summary)
    return EXIT_INTERRUPTED if summary["stop_reason"] == "interrupted" else 0


def _print_summary(summary: dict) -> None:
    solved = summary["solved"]
    line = (f"{summary['algo']} {summary['env']}: {summary['env_steps']} env steps in {summary['wall_time_s']:.1f} s, "
            f"best eval {_fmt(summary['best_eval_return'])}, last eval {_fmt(summary['last_eval_return'])}")
    if solved:
        line += (f"; reached {summary['stop_value']} after {summary['env_steps_to_stop_value']} steps "
                 f"({summary['time_to_stop_value_s']:.1f} s)")
    print(line)
    print(f"run directory: {summary['run_dir']}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def cmd_eval(args: argparse.Namespace) -> int:
    from relayrl.train.evaluate import evaluate_checkpoint

    result = evaluate_checkpoint(args.path, episodes=args.episodes, env_id=args.env, seed=args.seed,
                                 render=args.render)
    print(f"{result['env']}: return {result['return_mean']:.2f} ± {result['return_std']:.2f}, "
          f"length {result['length_mean']:.1f} ± {result['length_std']:.1f} over {result['episodes']} episodes "
          f"({result['checkpoint']})")
    if result.get("gif"):
        print(f"episode written to {result['gif']}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from relayrl.io.plot import plot_runs

    out = plot_runs(args.runs, args.output)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
