#!/usr/bin/python3
"""The graph pass against the best allocator of every cell (issue 16's rules).

    bench/run_best_alloc.py                               # the issue's cells, 5 rounds
    bench/run_best_alloc.py --models resnet18 --batches 1 --threads 1 --rounds 3
    bench/run_best_alloc.py --resume bench/results/best_alloc_<stamp>    # finish a run
    bench/run_best_alloc.py --model-file resnet18_pt2=PKG.pt2 --models resnet18_pt2 \
        --batches 1 --threads 1   # an AOTInductor package (LibTorch >= 2.6; docs/PYTORCH2.md)
    bench/best_alloc_report.py bench/results/best_alloc_<stamp> [--doc docs/results/TORCH.md]

A cell is a model, a batch and a count of inference threads (one intra-op thread each). Every
configuration of a cell runs in a process of its own (bench/torch_alloc_bench: load, warm-up
passes, timed passes split over the threads; for graph-pass, plan() first) and reports the median
pass time and the process's peak RSS (ru_maxrss: loading, warm-up and planning included).
Order: round-major; in each round a cell's configurations run back to back, rotated by one per
round and cell, so every configuration meets every load. A process starts only when the 1-minute
load average is at most --max-load (default: the core count): it waits up to --wait-s for that,
then stops the run, saying so; every process's load at its start is kept in its .meta file. The
thread counts never exceed the cores (no load of the benchmark's own making).

Standard library only; needs the bench binary of --build-dir (`cmake --build build --target
torch_alloc_bench`) and the zoo models (`/usr/bin/python3 bench/models/make_zoo.py --only ...`).
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_matrix import CONFIGS, MODEL_FILES, ROOT, Runner, ensure_models, machine_info  # noqa

ALLOCATORS = ["glibc", "glibc-keep", "jemalloc", "tcmalloc", "mimalloc"]
DEFAULTS = dict(models="resnet18,mobilenet_v2,efficientnet_b0,bert_encoder,gpt_decoder",
                batches="1,8", threads="1,2", rounds=5, warmup=4, timed_total=8)
# Passes of the two transformer stacks take 0.2-2 s each here: fewer per process.
SLOW_MODELS = {"bert_encoder": (3, 4), "gpt_decoder": (3, 4)}  # (warm-up, timed)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for key, value in DEFAULTS.items():
        p.add_argument("--" + key.replace("_", "-"), type=type(value), default=value)
    p.add_argument("--configs",
                   default=",".join(ALLOCATORS + ["graph-pass", "graph-pass-tcmalloc"]))
    p.add_argument("--max-load", type=float, default=float(os.cpu_count()))
    p.add_argument("--wait-s", type=float, default=300.0)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--run-dir", help="default bench/results/best_alloc_<stamp>")
    p.add_argument("--resume", help="a run directory to complete (its settings are reused)")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--model-file", action="append", default=[], metavar="NAME=PATH",
                   help="a model of its own file (a TorchScript file, or an AOTInductor package "
                        "on LibTorch >= 2.6), named NAME in --models; repeatable")
    args = p.parse_args()
    if args.resume:
        saved = json.load(open(os.path.join(args.resume, "settings.json")))
        for key, value in saved.items():
            setattr(args, key, value)
        args.run_dir = args.resume
    return args


def wait_for_load(args):
    """True once the load is at most --max-load; False after --wait-s."""
    deadline = time.time() + args.wait_s
    while os.getloadavg()[0] > args.max_load:
        if time.time() > deadline:
            return False
        time.sleep(5)
    return True


def main():
    args = parse_args()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_dir = args.run_dir or os.path.join(ROOT, "bench", "results", f"best_alloc_{stamp}")
    models = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    configs = args.configs.split(",")
    for item in args.model_file:
        name, _, path = item.partition("=")
        if not name or not os.path.exists(path):
            sys.exit(f"run_best_alloc: --model-file {item}: expected NAME=PATH of a file")
        MODEL_FILES[name] = (os.path.abspath(path), "given")
    unknown = [c for c in configs if c not in CONFIGS] + [m for m in models if m not in MODEL_FILES]
    if unknown:
        sys.exit(f"run_best_alloc: unknown {', '.join(unknown)}")
    if max(threads) > os.cpu_count():
        sys.exit(f"run_best_alloc: {max(threads)} threads on {os.cpu_count()} cores would be load "
                 "of the benchmark's own making")
    ensure_models(models, args.dry_run)
    os.makedirs(run_dir, exist_ok=True)
    settings = {k: getattr(args, k) for k in
                ("models", "batches", "threads", "rounds", "warmup", "timed_total", "configs",
                 "max_load", "wait_s", "build_dir", "model_file")}
    json.dump(settings, open(os.path.join(run_dir, "settings.json"), "w"), indent=1)
    info_path = os.path.join(run_dir, "machine.json")
    info = json.load(open(info_path)) if os.path.exists(info_path) else {"sessions": []}
    info.update({k: v for k, v in machine_info().items() if k != "load_at_start"})
    info["sessions"].append({"command": " ".join(sys.argv), "load_at_start": os.getloadavg()[0]})
    json.dump(info, open(info_path, "w"), indent=1)
    runner = Runner(args, run_dir)
    cells = [(m, b, t) for m in models for b in batches for t in threads]
    for round_index in range(args.rounds):
        for cell_index, (model, batch, count) in enumerate(cells):
            shift = (round_index + cell_index) % len(configs)
            for config in configs[shift:] + configs[:shift]:
                tag = f"r{round_index}_{model}_b{batch}_t{count}_{config}"
                if os.path.exists(os.path.join(run_dir, "raw", tag + ".out")):
                    continue
                if not args.dry_run and not wait_for_load(args):
                    sys.exit(f"run_best_alloc: load {os.getloadavg()[0]:.2f} above "
                             f"{args.max_load} for {args.wait_s:.0f} s; stopped before {tag} "
                             f"(--resume {os.path.relpath(run_dir, ROOT)} goes on)")
                warmup, timed = SLOW_MODELS.get(model, (args.warmup, args.timed_total))
                argv = [runner.bench, "--model", os.path.join(ROOT, MODEL_FILES[model][0]),
                        "--name", model, "--config", config, "--batch", str(batch),
                        "--threads", str(count), "--warmup", str(warmup), "--timed-total",
                        str(timed), "--marks", "0"]
                if config.startswith("graph-pass"):
                    argv += ["--plan", "greedy_by_size"]
                lines = runner.run(tag, config, argv, timeout=1800)
                row = lines[-1] if lines else ""
                print(f"round {round_index + 1}/{args.rounds} {model} b{batch} t{count} "
                      f"{config}: {row.split(',')[6] if row.count(',') > 6 else '-'} ms",
                      flush=True)
    info = json.load(open(info_path))
    info["sessions"][-1]["load_at_end"] = os.getloadavg()[0]
    json.dump(info, open(info_path, "w"), indent=1)
    header = subprocess.run([runner.bench, "--header"], capture_output=True, text=True).stdout
    open(os.path.join(run_dir, "header.csv"), "w").write(header)
    print(f"run_best_alloc: done; bench/best_alloc_report.py {os.path.relpath(run_dir, ROOT)}")


if __name__ == "__main__":
    main()
