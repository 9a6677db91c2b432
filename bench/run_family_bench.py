"""Inputs whose shapes vary (issue 18): `memoplan run` with range inputs on zoo models, at 1 and
2 inference threads, under tcmalloc (memoplan-run's own pairing) and under mimalloc (preloaded),
and the table for docs/results/TORCH.md (between its "family" markers).

    /usr/bin/python3 bench/run_family_bench.py --run-dir bench/results/family_<date> [--iters 40]
    /usr/bin/python3 bench/run_family_bench.py --report bench/results/family_<date> \
        --doc docs/results/TORCH.md

Each cell is one `memoplan run --json` process (the default strategy) (its planned and unplanned copies
interleaved in it, each copy's peak RSS in a fresh process of its own); cells run one after the
other, configurations rotated per model. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys

CASES = [
    # (name, model file, range input, how drawn, what varies)
    ("bert_encoder", "models/bert_encoder.pt", "1x8:256", "lognormal",
     "sequence length 8-256, lognormal (median 45)"),
    ("bert_encoder", "models/bert_encoder.pt", "1x8:256", "uniform", "sequence length 8-256"),
    ("resnet18", "models/resnet18.pt", "1:8x3x224x224", "uniform", "batch 1-8"),
    ("resnet18", "models/resnet18.pt", "1x3x128:320x128:320", "uniform",
     "image height and width 128-320"),
]
ALLOCATORS = {"tcmalloc": "", "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"}
BEGIN, END = "<!-- BEGIN GENERATED: family -->", "<!-- END GENERATED: family -->"


def run_cells(args):
    raw = os.path.join(args.run_dir, "raw")
    os.makedirs(raw, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    with open(os.path.join(args.run_dir, "meta.json"), "w") as f:
        json.dump({"commit": commit, "iters": args.iters, "seed": args.seed}, f)
    for index, (name, model, shape, draw, _) in enumerate(CASES):
        allocators = list(ALLOCATORS.items())
        if index % 2:
            allocators.reverse()
        for threads in (1, 2):
            for allocator, preload in allocators:
                out = os.path.join(raw, f"{index}_{name}_t{threads}_{allocator}.json")
                if os.path.exists(out):
                    continue
                env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
                if preload:
                    env["LD_PRELOAD"] = preload
                cmd = [args.memoplan, "run", model, "--input", shape, "-n", str(args.iters),
                       "-t", str(threads), "--draw", draw, "--seed", str(args.seed), "--json",
                       "-q"]
                print(" ".join(cmd), f"({allocator})", flush=True)
                result = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if result.returncode != 0:
                    print(result.stderr, file=sys.stderr)
                with open(out, "w") as f:
                    f.write(result.stdout.strip() or json.dumps({"error": result.stderr[-2000:]}))


def mib(n):
    return f"{n / 2**20:.1f}" if n else "-"


def report(args):
    rows = []
    meta = {}
    runs = []
    for run_dir in args.report.split(","):
        with open(os.path.join(run_dir, "meta.json")) as f:
            meta = json.load(f)
        label = os.path.basename(run_dir.rstrip("/"))
        runs.append(f"`{label}` (last started at {meta.get('commit')})")
        raw = os.path.join(run_dir, "raw")
        for file in sorted(os.listdir(raw)):
            with open(os.path.join(raw, file)) as f:
                r = json.load(f)
            # {index}_{name}_t{threads}_{allocator}.json
            parts = file[:-len(".json")].split("_")
            case = CASES[int(parts[0])]
            threads = int(parts[-2][1:])
            allocator = parts[-1]
            if "error" in r:
                why = (r["error"].strip().splitlines() or ["crashed, nothing on stderr"])[-1][:80]
                rows.append(f"| {label} | {case[0]} | {case[4]} | {threads} | {allocator} | "
                            f"failed: {why} |" + " |" * 8)
                continue
            rows.append(
                f"| {label} | {case[0]} | {case[4]} | {threads} | {allocator} | "
                f"{r['distinct_shapes']} | "
                f"{r['planned_pass_fraction'] * 100:.0f}% | {r['profiled_passes']} | "
                f"{r['family_plans']} | {r['fallbacks']} | "
                f"{r['planned_ms']:.1f} / {r['unplanned_ms']:.1f} = "
                f"{r['planned_ms'] / r['unplanned_ms']:.3f} | "
                f"{mib(r['slab_bytes_max'])} / {mib(r['lower_bound_bytes_max'])} | "
                f"{mib(r['peak_rss_bytes_planned'])} / {mib(r['peak_rss_bytes_unplanned'])} | "
                f"{'yes' if r['outputs_identical'] else 'NO'} |")
    text = [BEGIN,
            f"Runs {', '.join(runs)}: `memoplan run --json -n {meta.get('iters')} --seed "
            f"{meta.get('seed')}` per cell, one process each; latency is the median of the timed "
            "passes, planned and unplanned copies interleaved in the same process; RSS each copy's "
            "peak in a fresh process of its own.",
            "",
            "| run | model | what varies | threads | malloc | distinct shapes | passes fully planned "
            "| profiled passes | family plans | fallbacks | planned / unplanned ms | largest slab "
            "/ bound of largest shape MiB | peak RSS planned / unplanned MiB | outputs "
            "identical |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"] + rows + [END]
    if args.doc:
        with open(args.doc) as f:
            doc = f.read()
        if BEGIN in doc:
            doc = doc[:doc.index(BEGIN)] + "\n".join(text) + doc[doc.index(END) + len(END):]
        else:
            doc += "\n" + "\n".join(text) + "\n"
        with open(args.doc, "w") as f:
            f.write(doc)
    print("\n".join(text))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir")
    p.add_argument("--report")
    p.add_argument("--doc")
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memoplan", default="build/src/memoplan")
    args = p.parse_args()
    if args.run_dir:
        run_cells(args)
    if args.report:
        report(args)


if __name__ == "__main__":
    main()
