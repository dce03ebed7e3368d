"""The command line: ``relayrl train | eval | export | plot | config | serve | worker | keys``.

Exit codes (docs/usage.md): 0 done, 1 the run failed, 2 bad input, 3 a peer died or timed out, 4 a
protocol error, 130 interrupted, 143 stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from relayrl.errors import ConfigError, RelayRLError, install_hint

EXIT_FAILED = 1  # the run failed while running (an env that keeps failing, a peer that closed, a non-finite loss)
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended

DESCRIPTION = ("Reinforcement learning on a laptop, a Ray cluster, remote robots through a relay, and external "
               "simulators through shared memory. `relayrl COMMAND --help` explains each command.")
EPILOG = ("exit codes: 0 done, 1 the run failed, 2 bad input (usage, config, env, checkpoint), 3 a peer died "
          "or timed out, 4 a protocol error, 130 interrupted, 143 stopped by SIGTERM")


def build_parser() -> argparse.ArgumentParser:
    from relayrl.version import __version__
    from relayrl.algos import BUILTIN

    parser = argparse.ArgumentParser(prog="relayrl", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"relayrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    algos = ", ".join(BUILTIN) + ", or your own as package.module:name"
    p = sub.add_parser("train", help="train an algorithm on an environment",
                       description=f"Train ALGO ({algos}) on an environment until the stop value or --total-steps.",
                       epilog=EPILOG)
    p.add_argument("algo", metavar="ALGO", nargs="?",
                   help=f"algorithm: one of {algos} (with --resume: optional, the run records it)")
    p.add_argument("--env", help="Gymnasium env id, e.g. CartPole-v1 (default: the config's env.id); "
                   "\"bridge:COMMAND\" launches a simulator, bridge:attach waits for one started by hand "
                   "(docs/bridge.md)")
    p.add_argument("--config", type=Path, help="YAML file of options (see `relayrl config ALGO`)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one option, e.g. --set ppo.epochs=4 (repeatable)")
    p.add_argument("--seed", type=int)
    p.add_argument("--total-steps", type=int, help="stop after this many env steps")
    p.add_argument("--stop-value", type=float, help="stop once the eval mean return reaches this")
    p.add_argument("--train-iter", type=int, metavar="N", help="stop after N updates (gradient steps), if earlier")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="stop once the run's wall time (resumes included) reaches this, if earlier")
    p.add_argument("--run-dir", type=Path,
                   help="where to write the run: a new or empty folder (default runs/<env>_<algo>_<time>)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a stopped run from its last checkpoint "
                   "(its algorithm and options, changed by the ones given here)")
    p.add_argument("--previous", type=Path, metavar="CHECKPOINT",
                   help="start from another run's policy weights and normaliser")
    p.add_argument("--backend", choices=["auto", "inline", "mp", "ray"],
                   help="where rollout workers run (default auto: inline for one worker, mp for more)")
    p.add_argument("--workers", type=int, help="rollout workers, each with env.num_envs envs (bridge: "
                   "simulator instances)")
    p.add_argument("--learners", type=int, help="data-parallel learners, each on env.num_envs/N envs and batch_size/N "
                   "rows, gradients averaged (local processes; under torchrun: the group it started)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"],
                   help="where the learner's networks and batches live (default auto: CUDA when there is one); "
                        "rollout workers and evaluation act on the CPU")
    p.add_argument("--ray-address", help="backend ray: join this cluster (auto or HOST:PORT) instead of a local Ray")
    p.add_argument("--server", metavar="HOST:PORT", help="learn from remote workers through the relay there")
    p.add_argument("--keys", metavar="DIR", help="with --server: this machine's keys (relayrl keys generate)")
    p.add_argument("--remote-env", action="store_true",
                   help="with --server: build no env here, take its spaces from the workers (net.remote_env)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-tensorboard", action="store_true", help="skip TensorBoard event files")
    p.add_argument("--track", action="store_true",
                   help="mirror metrics, config and summary to Weights & Biases (logging.wandb; needs the "
                        f"wandb extra: {install_hint('wandb')})")

    p = sub.add_parser("eval", help="run the deterministic policy of a run or checkpoint")
    p.add_argument("path", metavar="RUN_DIR|CHECKPOINT", type=Path)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--env", help="evaluate on another env id (same spaces)")
    p.add_argument("--behaviour", metavar="NAME", help="of a run that trained several behaviours: the one to evaluate "
                   "(the others act with their own policies)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--render", nargs="?", const="", metavar="FILE.gif",
                   help="also record one episode as a GIF (default: <run>/episode.gif)")
    p.add_argument("--video", type=Path, metavar="DIR",
                   help="also record episodes as mp4 files in DIR through Gymnasium's RecordVideo (needs the video "
                        f"extra: {install_hint('video')})")
    p.add_argument("--video-episodes", type=int, default=1, metavar="N",
                   help="with --video: episodes to record (default 1; seeds --seed, --seed + 1, ...)")

    p = sub.add_parser("export", help="write a run's policy as an ONNX or TorchScript file for deployment",
                       description="Write the deterministic policy of a run (its best checkpoint, else the last) or "
                                   "checkpoint as one graph, observation in, action out, with its normaliser and "
                                   "action post-processing, and FILE.json describing its inputs and outputs.",
                       epilog=EPILOG)
    p.add_argument("path", metavar="RUN_DIR|CHECKPOINT", type=Path)
    p.add_argument("--format", default="onnx", choices=["onnx", "torchscript"],
                   help=f"onnx (needs the export extra: {install_hint('export')}) or torchscript (default onnx)")
    p.add_argument("-o", "--out", type=Path, metavar="FILE",
                   help="where to write (default RUN_DIR/policy.onnx or .pt; beside a checkpoint, its name)")
    p.add_argument("--behaviour", metavar="NAME", help="of a run that trained several behaviours: whose policy")

    p = sub.add_parser("collect", help="run a run's policy for N episodes and write them as an offline dataset (.npz)",
                       description="Run the policy of a run (its best checkpoint, else the last) or checkpoint in its "
                                   "env and write the transitions as an .npz that bc and iql learn from "
                                   "(--set bc.dataset=FILE.npz). Never overwrites a file.", epilog=EPILOG)
    p.add_argument("path", metavar="RUN_DIR|CHECKPOINT", type=Path)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("-o", "--out", type=Path, required=True, metavar="FILE.npz", help="the dataset to write (a new file)")
    p.add_argument("--stochastic", action="store_true",
                   help="act with the run's exploration (collect mode) instead of deterministically")
    p.add_argument("--env", help="collect on another env id (same spaces)")
    p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("plot", help="draw learning curves of one or more runs (runs that differ only in seed: their mean)")
    p.add_argument("runs", metavar="RUN_DIR", type=Path, nargs="+")
    p.add_argument("-o", "--output", type=Path, default=Path("curve.png"))

    p = sub.add_parser("config", help="print an algorithm's default config as YAML")
    p.add_argument("algo", metavar="ALGO", help=f"algorithm: one of {algos}")

    p = sub.add_parser("serve", help="run the relay that a trainer and remote workers connect to")
    p.add_argument("--bind", default="127.0.0.1:5555", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:5555; 0.0.0.0:PORT for every interface)")
    p.add_argument("--keys", metavar="DIR", help="the server folder written by `relayrl keys generate DIR`")
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback --bind without --keys")
    p.add_argument("--max-workers", type=int, default=-1, help="workers admitted at once (-1: unlimited)")
    p.add_argument("--max-queue", type=int, default=4096, help="chunks queued for the trainer; then the oldest drop")
    p.add_argument("--max-queue-mb", type=float, default=256.0,
                   help="megabytes queued for the trainer; then the oldest chunks drop")
    p.add_argument("--overflow", default="drop-oldest", metavar="POLICY",
                   help="a full queue: drop-oldest (default; counted) or block (workers hold their chunks and pause)")
    p.add_argument("--window", type=int, default=128, help="chunks in flight to the trainer")
    p.add_argument("--heartbeat", type=float, default=1.0, help="seconds between housekeeping passes")
    p.add_argument("--peer-timeout", type=float, default=10.0, help="seconds of silence before a peer is dropped")
    p.add_argument("--max-message-mb", type=float, default=64.0, help="largest message accepted")
    p.add_argument("--metrics", metavar="FILE.jsonl", help="append relay metrics here")
    p.add_argument("--metrics-every", type=float, default=10.0, help="seconds between metrics lines")

    p = sub.add_parser("worker", help="run a rollout worker that sends samples to a relay")
    p.add_argument("--server", metavar="HOST:PORT", help="the relay's address")
    p.add_argument("--env", help="Gymnasium env id (the trainer's)")
    p.add_argument("--algo", default="sac", help="the trainer's algorithm (default sac)")
    p.add_argument("--keys", metavar="DIR", help="this worker's keys folder (relayrl keys generate)")
    p.add_argument("--config", type=Path, help="YAML options; use the trainer's so the policies match")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--seed", type=int)
    p.add_argument("--name", help="worker name, unique per relay (default: role-host-pid-random)")
    p.add_argument("--expert", action="store_true", help="send samples, never load the trainer's weights")
    p.add_argument("--policy", metavar="MODULE:FUNCTION",
                   help="act with this scripted or human policy, function(obs [n, ...]) -> actions [n, ...], and "
                        "send its samples (an expert worker: it ignores the trainer's weights)")
    p.add_argument("--standalone", action="store_true", help="no server: run the saved policy (deployment)")
    p.add_argument("--deploy", metavar="RUN_DIR", type=Path,
                   help="no server: run the policy a run trained (its best checkpoint, else its last) on the env and "
                        "options it trained with, for --episodes")
    p.add_argument("--weights", type=Path, help="start from this weights file or run checkpoint")
    p.add_argument("--episodes", type=int, default=10, help="--standalone: episodes to run")
    p.add_argument("--benchmark", action="store_true",
                   help="no server: run a real-time env for --steps steps (random actions, or --policy's, or "
                        "--deploy's) and print its timings (step duration, capture offset, inference, overruns)")
    p.add_argument("--steps", type=int, default=500, help="--benchmark: time steps to run (default 500)")
    p.add_argument("--json", action="store_true", help="--benchmark: print the timings as one JSON object")
    p.add_argument("--max-steps", type=int, help="stop after this many env steps")

    p = sub.add_parser("keys", help="CURVE key pairs for the relay and its clients")
    keys_sub = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    g = keys_sub.add_parser("generate", help="write DIR/server and one folder per client")
    g.add_argument("dir", type=Path, metavar="DIR")
    g.add_argument("--clients", default="trainer,worker",
                   help="comma-separated client names (default trainer,worker)")
    g.add_argument("--trainers", default="trainer",
                   help="which of the clients may act as trainers (comma-separated; default trainer); "
                        "the others may only be workers")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from relayrl.usercode import add_working_folder

    args = build_parser().parse_args(argv)
    _log_to_stderr()
    add_working_folder()  # "module:name" envs, algorithms and networks import from here, as with python -m
    try:
        return {"train": cmd_train, "eval": cmd_eval, "export": cmd_export, "plot": cmd_plot, "config": cmd_config,
                "serve": cmd_serve, "worker": cmd_worker, "keys": cmd_keys, "collect": cmd_collect}[args.command](args)
    except RelayRLError as exc:
        print(f"relayrl: error: {exc}", file=sys.stderr)
        return exc.exit_code or EXIT_FAILED  # an error never exits 0 (a simulator's normal close is 0 for it,
        # not for a trainer whose run it ended)
    except KeyboardInterrupt:
        print("relayrl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _log_to_stderr() -> None:
    """The library's notices (logger "relayrl", e.g. which checkpoint a resume took) as ``relayrl: ...`` lines."""
    import logging

    logger = logging.getLogger("relayrl")
    if not any(getattr(h, "relayrl_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("relayrl: %(message)s"))
        handler.relayrl_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def cmd_config(args: argparse.Namespace) -> int:
    from relayrl.config import default_config, to_yaml

    sys.stdout.write(to_yaml(default_config(args.algo)))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from relayrl import launch
    from relayrl.config import build_config, default_config, diff_configs, read_yaml
    from relayrl.io.rundir import check_fresh_run_dir, new_run_dir, write_experiment_record
    from relayrl.training.stops import StopRequest, stop_on_sigterm

    overrides = {"env.id": args.env, "seed": args.seed, "total_steps": args.total_steps,
                 "stop_value": args.stop_value, "train_iter": args.train_iter, "time_limit_s": args.time_limit, "backend": args.backend, "workers": args.workers,
                 "learners": args.learners, "device": args.device,
                 "ray_address": args.ray_address, "net.server": args.server, "net.keys": args.keys,
                 "net.remote_env": True if args.remote_env else None,
                 "logging.wandb.enabled": True if args.track else None}
    run_dir = args.run_dir
    if args.resume is not None:
        if args.previous is not None:
            raise ConfigError("--resume and --previous exclude each other: resume continues a run, "
                              "previous starts a new one from a checkpoint")
        algo, saved_data = _resumed_run(args.resume, args.algo)
        saved = build_config(algo, saved_data)
        file_data = read_yaml(args.config) if args.config else {}
        config = build_config(algo, {**saved.model_dump(), **file_data}, args.sets, overrides)
        if config.env.id != saved.env.id:
            raise ConfigError(f"--resume cannot change the env ({saved.env.id} -> {config.env.id}); "
                              "use --previous to start a new run from this one's weights")
        changes = diff_configs(saved, config)
        for change in changes:
            print(f"relayrl: resume with a changed option: {change}", file=sys.stderr)
        run_dir = args.resume
    else:
        if args.algo is None:
            raise ConfigError("relayrl train needs ALGO, e.g. `relayrl train ppo --env CartPole-v1` (only with "
                              "--resume RUN_DIR does it come from the run)")
        config = build_config(args.algo, read_yaml(args.config) if args.config else None, args.sets, overrides)
        changes = diff_configs(default_config(args.algo), config)
        if run_dir is not None:
            check_fresh_run_dir(run_dir)  # before any env, worker or simulator starts
        run_dir = run_dir if run_dir is not None else new_run_dir(config.env.id, config.algo)

    if config.net.remote_env and config.net.server is None:
        raise ConfigError("--remote-env (net.remote_env) takes the env's spaces from remote workers: it needs "
                          "--server HOST:PORT")
    if config.net.local_refusal() is not None:
        raise ConfigError(config.net.local_refusal())
    stop_event = StopRequest()

    def on_sigint(signum, frame):  # first Ctrl-C: end the round (learning stops between minibatches), save, exit 130
        stop_event.request("interrupted")
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("\nrelayrl: stopping: saving the last checkpoint (Ctrl-C again to abort now)", file=sys.stderr)

    recorded: list[bool] = []

    def record(ctx) -> None:  # once the run directory exists (a refused start writes nothing); once per run (a run
        if not recorded:     # of several behaviours starts a Trainer for each)
            write_experiment_record(run_dir, ["relayrl", *sys.argv[1:]], changes, resumed=args.resume is not None)
            recorded.append(True)

    previous_handler = signal.signal(signal.SIGINT, on_sigint)
    try:
        with stop_on_sigterm(stop_event):  # a scheduler's stop: as Ctrl-C, exit 143
            summary = launch.run(config, run_dir=run_dir, resume=args.resume is not None, previous=args.previous,
                                 quiet=args.quiet, tensorboard=not args.no_tensorboard, stop_event=stop_event,
                                 hooks=[("before_run", record, {})])
    finally:
        signal.signal(signal.SIGINT, previous_handler)
    _print_summary(summary)
    return {"interrupted": EXIT_INTERRUPTED, "terminated": EXIT_TERMINATED}.get(summary["stop_reason"], 0)


def _resumed_run(run_dir: Path, algo: str | None) -> tuple[str, dict]:
    """The algorithm and saved options of the run ``--resume`` names (ALGO, if given, must be the run's)."""
    from relayrl.config import read_yaml

    if not run_dir.is_dir():
        raise ConfigError(f"--resume {str(run_dir)!r}: no such run directory; pass the folder of a run that "
                          "relayrl train wrote (runs/<env>_<algo>_<time>, or its --run-dir)")
    saved_file = run_dir / "config.yaml"
    if not saved_file.is_file():
        raise ConfigError(f"--resume {str(run_dir)!r}: no config.yaml there, so it is not a relayrl run; pass "
                          "the folder of a run that relayrl train wrote")
    data = read_yaml(saved_file)
    saved_algo = data.get("algo")
    if not isinstance(saved_algo, str):
        raise ConfigError(f"{str(saved_file)!r} names no algo: it was not written by relayrl train")
    if algo is not None and algo != saved_algo:
        raise ConfigError(f"--resume {str(run_dir)!r} is a {saved_algo} run, not {algo}: drop ALGO (the run "
                          f"records it) or pass {saved_algo}; to train {algo} from its weights, start a new run")
    return saved_algo, data


def _print_summary(summary: dict) -> None:
    solved = summary["solved"]
    line = (f"{summary['algo']} {summary['env']}: {summary['env_steps']} env steps in {summary['wall_time_s']:.1f} s, "
            f"best eval {_fmt(summary['best_eval_return'])}, last eval {_fmt(summary['last_eval_return'])}")
    if solved and "behaviours" not in summary:
        line += (f"; reached {summary['stop_value']} after {summary['env_steps_to_stop_value']} steps "
                 f"({summary['time_to_stop_value_s']:.1f} s)")
    for name, part in summary.get("behaviours", {}).items():  # a run of several behaviours: a line each
        line += (f"\n  behaviour {name}: {part['env_steps']} env steps, best eval {_fmt(part['best_eval_return'])}, "
                 f"last eval {_fmt(part['last_eval_return'])}, stopped by {part['stop_reason']}")
    print(line)
    print(f"run directory: {summary['run_dir']}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def cmd_eval(args: argparse.Namespace) -> int:
    from relayrl.config import validate
    from relayrl.io.rundir import clean_stale_temps
    from relayrl.training.saved_policy import behaviour_checkpoint, evaluate_checkpoint, require_video

    if args.video is not None:  # before anything is read or written
        require_video()
    if args.path.is_dir():  # a run killed mid-write may have left temp files (none while it trains)
        clean_stale_temps(args.path)
    ckpt, partners = behaviour_checkpoint(args.path, args.behaviour)
    config = validate(ckpt.meta.get("algo"), ckpt.meta["config"])
    if config.env.id.startswith("bridge:") and args.env is None:  # a run trained on an external simulator
        from relayrl.bridge.agent_env import evaluate_bridge_checkpoint

        if args.episodes < 1 or args.render is not None or args.video is not None:
            raise ConfigError("evaluating a bridge run takes --episodes >= 1 and no --render or --video (the "
                              "simulator draws itself)")
        result = evaluate_bridge_checkpoint(ckpt, config, args.episodes, args.seed, partners)
    else:
        result = evaluate_checkpoint(ckpt, episodes=args.episodes, env_id=args.env, seed=args.seed,
                                     render=args.render, video=args.video, video_episodes=args.video_episodes,
                                     partners=partners)
    print(f"{result['env']}: return {result['return_mean']:.2f} ± {result['return_std']:.2f}, "
          f"length {result['length_mean']:.1f} ± {result['length_std']:.1f} over {result['episodes']} episodes "
          f"({result['checkpoint']})")
    if result.get("gif"):
        print(f"episode written to {result['gif']}")
    for path in result.get("videos", []):
        print(f"video written to {path}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from relayrl.export import export_run

    exported = export_run(args.path, args.format, args.out, behaviour=args.behaviour)
    print(f"wrote {exported.path} ({exported.format}) and {exported.sidecar}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from relayrl.training.collect import collect_dataset

    out = collect_dataset(args.path, args.episodes, args.out, stochastic=args.stochastic, seed=args.seed,
                          env_id=args.env)
    print(f"wrote {out['path']}: {out['transitions']} transitions of {out['episodes']} episodes on {out['env']}, return "
          f"{out['return_mean']:.2f} (min {out['return_min']:.2f}, max {out['return_max']:.2f})")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from relayrl.io.plot import plot_runs

    out = plot_runs(args.runs, args.output)
    print(f"wrote {out}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from relayrl.net.relay import Relay, RelayOptions

    options = RelayOptions(bind=args.bind, keys=args.keys, insecure=args.insecure, max_workers=args.max_workers,
                           max_queue=args.max_queue, max_queue_mb=args.max_queue_mb, overflow=args.overflow, window=args.window, heartbeat_s=args.heartbeat,
                           peer_timeout_s=args.peer_timeout, max_message_mb=args.max_message_mb,
                           metrics=args.metrics, metrics_every_s=args.metrics_every)
    relay = Relay(options)
    print(f"relay listening on {relay.endpoint} ({'CURVE keys from ' + args.keys if args.keys else 'no encryption'})",
          flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        relay.serve(stop)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from relayrl.config import build_config, read_yaml
    from relayrl.net.remote_worker import RemoteWorker

    overrides = {"env.id": args.env, "seed": args.seed, "net.server": args.server, "net.keys": args.keys}
    if args.deploy is not None:  # the run's own config and checkpoint, no trainer
        from relayrl.training.saved_policy import deployment

        given = [flag for flag, value in (("--server", args.server), ("--weights", args.weights),
                                          ("--policy", args.policy), ("--config", args.config),
                                          ("--expert", args.expert)) if value]
        if args.benchmark:  # (--deploy RUN --benchmark times the run's own policy)
            given = [flag for flag in given if flag != "--policy"]
        if given:
            raise ConfigError(f"--deploy runs the policy the run trained, with its options and no trainer: drop "
                              f"{', '.join(given)}")
        config, args.weights = deployment(args.deploy)
        data = config.model_dump()
        data.pop("algo", None)
        config = build_config(config.algo, data, args.sets, {"env.id": args.env, "seed": args.seed})
        args.standalone = True
    else:
        config = build_config(args.algo, read_yaml(args.config) if args.config else None, args.sets, overrides)
    if args.benchmark:
        return _benchmark(args, config)
    worker = RemoteWorker(config, name=args.name, expert=args.expert, standalone=args.standalone,
                          weights=args.weights, policy=args.policy)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    interrupted = failed = False
    try:
        if args.standalone:
            for k, ret in enumerate(worker.run_episodes(args.episodes, seed=config.seed)):
                print(f"episode {k}: return {ret:.2f}")
        else:
            print(f"worker {worker.client.name} -> {args.server} ({config.env.id}, {config.algo})", flush=True)
            worker.run(max_steps=args.max_steps, stop=stop)
    except KeyboardInterrupt:
        interrupted = True
    except RelayRLError:  # e.g. a --policy function that raised: what was sent before it gets a moment
        failed = True
        raise
    finally:  # stopped by a signal: a short wait for acknowledgements (Ctrl-C: none without a trainer to give
        # them); a finished run waits longer
        if failed:
            flush = 1.0
        elif interrupted:
            flush = 1.0 if worker.client is not None and worker.client.trainer_present() else 0.0
        else:
            flush = 5.0 if stop.is_set() else 30.0
        worker.close(flush_timeout=flush)
    if args.standalone:
        return EXIT_INTERRUPTED if interrupted else 0
    stats = worker.stats()
    print(f"worker done: {stats['env_steps']} env steps, {stats.get('sent', 0)} chunks sent, "
          f"{stats.get('acked', 0)} acknowledged, {stats.get('chunks_refused', 0)} refused by the trainer, "
          f"{stats.get('backlog_drops', 0)} dropped from the backlog, "
          f"{stats.get('relay_drops', 0)} dropped by the relay, {stats.get('reconnects', 0)} reconnects, "
          f"{stats.get('pauses', 0)} pauses for a full relay queue ({stats.get('blocked_s', 0.0):.1f} s), "
          f"policy version {stats['version']}")
    return EXIT_INTERRUPTED if interrupted else 0


def _benchmark(args: argparse.Namespace, config) -> int:
    """``relayrl worker --benchmark``: the env's timings over --steps steps (envs/rtbench.py), then exit."""
    import json

    import numpy as np

    from relayrl.envs.registry import make
    from relayrl.envs.rtbench import benchmark, report

    if args.server or args.expert or args.standalone and args.deploy is None:
        raise ConfigError("--benchmark runs the env here with no trainer: drop --server, --expert and --standalone")
    act = None
    if args.policy is not None:
        from relayrl.policy.scripted import load_script

        script = load_script(args.policy)
        act = lambda obs: np.asarray(script(np.asarray(obs)[None]))[0]  # noqa: E731 - one env's row
    elif args.deploy is not None:
        from relayrl.io.checkpoint import load_checkpoint
        from relayrl.training.saved_policy import load_policy

        policy = load_policy(load_checkpoint(args.weights))
        act = lambda obs: policy.act(np.asarray(obs)[None], "eval").env_action[0]  # noqa: E731
    env = make(config.env.id, max_episode_steps=config.env.max_episode_steps, **config.env.wrapping(),
               **config.env.kwargs)  # (as the run's workers build it: a deployed policy sees what it trained on)
    try:
        timing = benchmark(env, args.steps, act, seed=config.seed)
    finally:
        env.close()
    finite = {key: value if not isinstance(value, float) or np.isfinite(value) else None for key, value in timing.items()}
    print(json.dumps(finite) if args.json else report(timing))
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from relayrl.net.keys import generate

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    trainers = tuple(c.strip() for c in args.trainers.split(",") if c.strip())
    for folder in generate(args.dir, clients, trainers):
        print(f"wrote {folder}")
    print(f"relay: relayrl serve --keys {args.dir / 'server'}; each client: --keys {args.dir}/NAME "
          "(copy only that folder to that machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
