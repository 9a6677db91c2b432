#!/usr/bin/python3
"""The design matrix of docs/results/TORCH.md: models x batch x input size x inference threads x
allocator configurations, interleaved and repeated; allocator calls; planner quality; serving.

    bench/run_matrix.py --quick               # reduced matrix, under 10 minutes here
    bench/run_matrix.py                       # the full matrix (3 rounds: about 67 minutes here)
    bench/run_matrix.py --resume bench/results/matrix_20261122T170000Z --rounds 4   # add rounds

Stages (--stages, default all): `timing` (one process per round, model, batch, size and
configuration; the thread counts are phases of that process, bench/torch_alloc_bench.cc),
`counts` (allocator calls per pass: the malloc counter preloaded first, separate processes so its
cost never reaches the timings), `planner` (`memoplan compare`: every strategy on every trace in
tests/data/traces), `serve` (bench/run_serve_bench.py). Raw outputs go to RUN_DIR (default
bench/results/matrix_<stamp>/), one file per process, with the exact command next to each; a
finished process is never run again on --resume. bench/matrix_report.py turns RUN_DIR into CSV,
tables and plots.

Order: round-major, so that an interrupted run leaves complete rounds: for each round, model,
batch and size, the configurations run back to back, rotated by one every round (A B C ..., then
B C ... A). Thread counts whose phase would take longer than --phase-budget-s (estimated from a
calibration pass of each model, batch and size under jemalloc) are left out for every
configuration alike and listed in the report: on 2 cores, 32 threads of a batch-8 256x256 pass
cost minutes per process.

Standard library only; runs the bench binaries of --build-dir (build them first:
`cmake --build build-bench --target torch_alloc_bench memoplan memoplan-serve
memoplan_malloc_counter memoplan_preload`).
"""
import argparse
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = "/usr/lib/x86_64-linux-gnu"
TORCH_PYTHON = "/usr/bin/python3"  # Debian's: the one with torch (models are made with it)

# The thesis's configurations (issue 6). Each is an environment; graph-pass is a bench flag.
CONFIGS = {
    "jemalloc": {"LD_PRELOAD": f"{LIB}/libjemalloc.so.2"},
    "glibc": {},
    # 32 MiB is the largest mmap threshold glibc accepts on x86-64; setting any of the three
    # also turns off glibc's dynamic threshold.
    "glibc-keep": {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824",
                   "MALLOC_TOP_PAD_": "268435456"},
    "jemalloc-thesis": {"LD_PRELOAD": f"{LIB}/libjemalloc.so.2",
                        "MALLOC_CONF": f"narenas:{4 * os.cpu_count()},oversize_threshold:1048576"},
    "tcmalloc": {"LD_PRELOAD": f"{LIB}/libtcmalloc_minimal.so.4"},
    # mimalloc 2 (Debian 12), or 3 where only it is installed (Debian 13).
    "mimalloc": {"LD_PRELOAD": next((f"{LIB}/libmimalloc.so.{v}" for v in (2, 3)
                                     if os.path.exists(f"{LIB}/libmimalloc.so.{v}")),
                                    f"{LIB}/libmimalloc.so.2")},
    "shim": {"LD_PRELOAD": "{build}/interpose/libmemoplan_preload.so",
             "MEMOPLAN_CONF": "mode:auto,stats_print:true"},
    "graph-pass": {},
    # The graph pass paired with the allocator that was fastest in more cells than any other here
    # (tcmalloc): its plan serves the tensors, tcmalloc the rest (TensorImpls, IValues, vectors).
    "graph-pass-tcmalloc": {"LD_PRELOAD": f"{LIB}/libtcmalloc_minimal.so.4"},
}
BASELINE = "jemalloc"
# The profiled traces of the zoo's models committed with the tests (scripts/record_torch_traces.py
# writes them).
TRACE_DIR = "tests/data/traces"

# Models: the zoo's (bench/models/make_zoo.py) and the small transformer encoder of
# bench/make_torchscript_models.py (the zoo's BERT and GPT take 220-330 ms per batch-1 pass on
# one core here: too slow for a thread sweep).
MODEL_FILES = {
    "resnet18": ("models/resnet18.pt", "zoo"),
    "mobilenet_v2": ("models/mobilenet_v2.pt", "zoo"),
    "transformer_encoder": ("bench/results/tmp/models/transformer_encoder.pt", "bench"),
}
for _name in ("resnet50", "squeezenet1_0", "mnasnet0_75", "efficientnet_b0", "googlenet",
              "densenet121", "dcgan_generator", "bert_encoder", "gpt_decoder", "vgg16",
              "inception_v3", "regnet_x_8gf", "wide_resnet50_2", "resnext101_32x8d",
              "fcn_resnet50", "deeplabv3_resnet50"):
    MODEL_FILES[_name] = (f"models/{_name}.pt", "zoo")

FULL = dict(models="resnet18,mobilenet_v2,transformer_encoder", batches="1,4,8",
            sizes="128,256", threads="1,2,4,8,16,32", rounds=3, warmup=4, timed_total=8,
            phase_budget_s=4.0, planner_time_limit=10.0)
QUICK = dict(models="resnet18,transformer_encoder", batches="1,4", sizes="128",
             threads="1,2,4,8", rounds=2, warmup=4, timed_total=8, phase_budget_s=3.0,
             planner_time_limit=2.0)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="the reduced matrix (under 10 minutes)")
    for key, value in FULL.items():
        p.add_argument("--" + key.replace("_", "-"), type=type(value), default=None,
                       help=f"default {value} (--quick: {QUICK[key]})")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--stages", default="timing,counts,planner,serve")
    p.add_argument("--build-dir", default="build-bench")
    p.add_argument("--run-dir", help="default bench/results/matrix_<stamp>")
    p.add_argument("--resume", help="a run directory to complete (its settings are reused)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args()
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def machine_info():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
    simd = [f for f in ("avx2", "fma", "avx512f") if f" {f}" in flags]
    versions = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", "libtorch-dev", "libjemalloc2",
         "libtcmalloc-minimal4", "libmimalloc2.0", "libc6", "libopenblas0-pthread"],
        capture_output=True, text=True).stdout.split("\n")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "simd": " ".join(simd), "cores": os.cpu_count(),
            "kernel": platform.release(), "memory_gib": round(
                os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "packages": [v for v in versions if v], "commit": commit,
            "load_at_start": os.getloadavg()[0]}


def ensure_models(names, dry_run):
    zoo = [n for n in names if MODEL_FILES[n][1] == "zoo"
           and not os.path.exists(os.path.join(ROOT, MODEL_FILES[n][0]))]
    if zoo and not dry_run:
        subprocess.run([TORCH_PYTHON, "bench/models/make_zoo.py", "--only", ",".join(zoo)],
                       cwd=ROOT, check=True)
    bench = os.path.join(ROOT, MODEL_FILES["transformer_encoder"][0])
    if "transformer_encoder" in names and not os.path.exists(bench) and not dry_run:
        subprocess.run([TORCH_PYTHON, "bench/make_torchscript_models.py",
                        os.path.dirname(bench), "transformer_encoder"], cwd=ROOT, check=True)


class Runner:
    def __init__(self, args, run_dir):
        self.args, self.run_dir = args, run_dir
        self.build = os.path.join(ROOT, args.build_dir)
        self.bench = os.path.join(self.build, "bench", "torch_alloc_bench")
        os.makedirs(os.path.join(run_dir, "raw"), exist_ok=True)
        os.makedirs(os.path.join(run_dir, "memory"), exist_ok=True)

    def env(self, config, counter=None):
        env = dict(os.environ)
        for key in ("LD_PRELOAD", "MALLOC_CONF", "MEMOPLAN_CONF"):
            env.pop(key, None)
        extra = {k: v.format(build=self.build) for k, v in CONFIGS[config].items()}
        lib = os.path.join(self.build, "bench", "libmemoplan_malloc_counter.so")
        if counter == "first":  # it sees every call of the program, then forwards it
            extra["LD_PRELOAD"] = (lib + " " + extra.get("LD_PRELOAD", "")).strip()
        elif counter == "behind":  # behind the shim: what the shim passes on to the allocator
            extra["LD_PRELOAD"] = (extra.get("LD_PRELOAD", "") + " " + lib).strip()
        env.update(extra)
        return env, extra

    def run(self, tag, config, argv, counter=None, timeout=1200):
        """Runs one process unless its output exists; returns its stdout lines."""
        out = os.path.join(self.run_dir, "raw", tag + ".out")
        if os.path.exists(out):
            return open(out).read().splitlines()
        env, extra = self.env(config, counter)
        command = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items())
        command = (command + " " + " ".join(shlex.quote(a) for a in argv)).strip()
        if self.args.dry_run:
            print(command)
            return []
        load = os.getloadavg()[0]
        start = time.time()
        try:
            done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True,
                                  timeout=timeout)
            stdout, stderr, rc = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as e:
            stdout, stderr, rc = "", (e.stderr or b"").decode(errors="replace"), "timeout"
        with open(os.path.join(self.run_dir, "raw", tag + ".err"), "w") as f:
            f.write(stderr)
        with open(os.path.join(self.run_dir, "raw", tag + ".meta"), "w") as f:
            json.dump({"command": command, "load1": load, "seconds": time.time() - start,
                       "rc": rc}, f)
        if rc != 0:
            print(f"  {tag}: exit {rc}: {stderr.strip().splitlines()[-1:] or ''}")
        with open(out + ".tmp", "w") as f:
            f.write(stdout)
        os.replace(out + ".tmp", out)  # written last: its existence means finished
        return stdout.splitlines()

    def bench_argv(self, model, config, batch, size, threads, extra=()):
        argv = [self.bench, "--model", os.path.join(ROOT, MODEL_FILES[model][0]), "--name", model,
                "--config", config, "--batch", str(batch), "--size", str(size), "--threads",
                ",".join(map(str, threads)), "--marks", "0"] + list(extra)
        if config.startswith("graph-pass"):
            argv += ["--plan", "greedy_by_size"]
        return argv


def phase_estimate_s(pass_ms, threads, warmup, timed_total, cores):
    thread_passes = threads * warmup + max(timed_total, threads)
    return thread_passes * pass_ms / 1000.0 / min(threads, cores)


def calibrate(runner, args, models, batches, sizes):
    """One jemalloc pass time per model, batch and size: which thread counts fit the budget."""
    path = os.path.join(runner.run_dir, "calibration.json")
    table = json.load(open(path)) if os.path.exists(path) else {}
    for model in models:
        for batch in batches:
            for size in sizes:
                key = f"{model}__b{batch}__s{size}"
                if key in table:
                    continue
                lines = runner.run("calibrate__" + key, BASELINE, runner.bench_argv(
                    model, BASELINE, batch, size, [1], ["--warmup", "3", "--passes", "3",
                                                        "--sample-ms", "0"]))
                if args.dry_run:
                    continue
                if not lines:
                    table[key] = None
                    continue
                pass_ms = float(lines[-1].split(",")[6])
                keep = [t for t in args.thread_list if phase_estimate_s(
                    pass_ms, t, args.warmup, args.timed_total, os.cpu_count()) <=
                        args.phase_budget_s or t == 1]
                table[key] = {"pass_ms": pass_ms, "threads": keep}
                print(f"  calibrated {key}: {pass_ms:.1f} ms per pass, threads {keep}")
    if not args.dry_run:
        json.dump(table, open(path, "w"), indent=1)
    return table


def timing(runner, args, models, batches, sizes, configs):
    table = calibrate(runner, args, models, batches, sizes)
    units = [(m, b, s) for m in models for b in batches for s in sizes]
    for round_ in range(1, args.rounds + 1):
        started = time.time()
        for i, (model, batch, size) in enumerate(units):
            cal = table.get(f"{model}__b{batch}__s{size}")
            threads = cal["threads"] if cal else args.thread_list
            shift = (round_ - 1 + i) % len(configs)
            for config in configs[shift:] + configs[:shift]:
                tag = f"time__r{round_}__{config}__{model}__b{batch}__s{size}"
                extra = ["--warmup", str(args.warmup), "--timed-total", str(args.timed_total),
                         "--sample-ms", "10"]
                if round_ == 1 and batch == batches[0] and size == sizes[0]:
                    extra += ["--memory-trace", os.path.join(
                        runner.run_dir, "memory", f"{model}__{config}.csv")]
                runner.run(tag, config, runner.bench_argv(model, config, batch, size, threads,
                                                          extra))
        print(f"round {round_}/{args.rounds}: {time.time() - started:.0f} s", flush=True)


def counts(runner, args, models, configs):
    """Allocator calls per pass at batch 1, the first size, 1 and 2 threads: the program's (the
    counter first), and for the shim also what reaches the allocator behind it."""
    for model in models:
        for config in configs:
            for kind, counter in (("count", "first"), ("countbehind", "behind")):
                if kind == "countbehind" and config != "shim":
                    continue
                tag = f"{kind}__r1__{config}__{model}__b1__s{args.size_list[0]}"
                runner.run(tag, config, runner.bench_argv(
                    model, config, 1, args.size_list[0], [1, 2],
                    ["--warmup", str(args.warmup), "--passes", "10", "--sample-ms", "0"]),
                    counter=counter)


def planner(runner, args):
    out = os.path.join(runner.run_dir, "planner.csv")
    if os.path.exists(out) or args.dry_run:
        return
    traces = sorted(glob.glob(os.path.join(ROOT, TRACE_DIR, "*.json.gz")))
    argv = [os.path.join(runner.build, "src", "memoplan"), "compare", "--csv", "--time-limit",
            str(args.planner_time_limit)] + traces
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    with open(out, "w") as f:
        f.write("# " + " ".join(shlex.quote(os.path.relpath(a, ROOT)) for a in argv) + "\n")
        f.write(done.stdout)


def serve(runner, args):
    if any(f.startswith("serve_bench_") for f in os.listdir(runner.run_dir)) or args.dry_run:
        return
    argv = [TORCH_PYTHON, os.path.join(ROOT, "bench", "run_serve_bench.py"), "--build-dir",
            args.build_dir, "--out-dir", runner.run_dir]
    if args.quick:
        argv.append("--quick")
    subprocess.run(argv, cwd=ROOT, check=True)


def main():
    args = parse_args()
    if args.resume:
        run_dir = args.resume
        saved = json.load(open(os.path.join(run_dir, "settings.json")))
        rounds, stages = args.rounds, args.stages
        for key, value in saved.items():  # the matrix stays as it was; what to run now does not
            setattr(args, key, value)
        args.rounds = max(rounds, saved["rounds"])
        args.stages = stages
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        run_dir = args.run_dir or os.path.join(ROOT, "bench", "results", f"matrix_{stamp}")
    models = args.models.split(",")
    for m in models:
        if m not in MODEL_FILES:
            sys.exit(f"run_matrix: unknown model {m} (one of {', '.join(MODEL_FILES)})")
    configs = args.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"run_matrix: unknown configuration {c} (one of {', '.join(CONFIGS)})")
    args.thread_list = [int(t) for t in str(args.threads).split(",")]
    args.size_list = [int(s) for s in str(args.sizes).split(",")]
    batches = [int(b) for b in str(args.batches).split(",")]
    runner = Runner(args, run_dir)
    if not os.path.exists(runner.bench):
        sys.exit(f"run_matrix: {runner.bench} is missing: build it first (see --help)")
    settings = {k: v for k, v in vars(args).items() if k not in ("resume", "dry_run")}
    if not args.dry_run:
        json.dump(settings, open(os.path.join(run_dir, "settings.json"), "w"), indent=1)
        info_path = os.path.join(run_dir, "machine.json")
        info = json.load(open(info_path)) if os.path.exists(info_path) else {"sessions": []}
        info["sessions"].append(dict(machine_info(), command=" ".join(
            shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])))
        json.dump(info, open(info_path, "w"), indent=1)
    ensure_models(models, args.dry_run)
    print(f"run_matrix: {run_dir}", flush=True)
    stages = args.stages.split(",")
    if "timing" in stages:
        timing(runner, args, models, batches, args.size_list, configs)
    if "counts" in stages:
        counts(runner, args, models, configs)
    if "planner" in stages:
        planner(runner, args)
    if "serve" in stages:
        serve(runner, args)
    if not args.dry_run:
        with open(os.path.join(run_dir, "machine.json")) as f:
            info = json.load(f)
        info["sessions"][-1]["load_at_end"] = os.getloadavg()[0]
        json.dump(info, open(os.path.join(run_dir, "machine.json"), "w"), indent=1)
    print(f"run_matrix: done; report: bench/matrix_report.py {os.path.relpath(run_dir, ROOT)}")


if __name__ == "__main__":
    main()
