#!/usr/bin/python3
"""memoplan's tuned kernels against ONNX Runtime in alternating bursts of two live processes.

    /usr/bin/python3 bench/ort_bursts.py --models resnet50 --batches 1 --threads 2
    /usr/bin/python3 bench/ort_bursts.py                 # the issue's 24 cells, 12 pairs each
    /usr/bin/python3 bench/ort_bursts.py --report-only bench/results/ort_bursts_<stamp>
    /usr/bin/python3 bench/ort_bursts.py --sweep --models shufflenet_v2_x1_0 --size 128 \
        --batches 1 --threads 1          # the conformance sweep's models, traced and scripted

Why: on a shared 2-vCPU VM the speed of the whole machine drifts by 20-30% over tens of seconds,
so bench/run_ort_compare.py's processes, run one after another, see different machines; a cell's
ratio then spreads 0.9-1.4 over three rounds (docs/results/KERNELS.md). Here both sides stay
loaded and warm and take turns in short bursts, so each pair of bursts sees nearly the same
machine: per cell, both processes start (ONNX Runtime: bench/ort/run_ort.mjs --serve 1, the
session of run_ort_compare.py; memoplan: this script with --memoplan-side, which loads
libmemoplan_torch.so, plans the zoo model with kernels="tuned" through the Python API,
torch.ops.memoplan.plan (the kernels `memoplan run --kernels tuned` runs) and runs it under
torch.inference_mode), each warms up, then --pairs times one burst of each, in alternating order
(ORT first in even pairs), 50 ms apart so that the other side's threads stop spinning: a burst is
one untimed pass then --burst timed ones, and its median is its time. Per pair the ratio
memoplan / ORT; per cell its median, quartiles and range, and the geometric mean of the cells'
medians. OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = T for both.

Accuracy, as run_ort_compare.py: ORT's first output (after its first burst) against the .pt file
run by torch on the same input; the tuned copy's output against a stock copy of the .pt file in
the memoplan process (max|tuned - stock| / max|stock|).

Results: --out (default bench/results/ort_bursts_<UTC stamp>/): meta.json, raw/<cell>.json (every
burst of both sides, the accuracy) and report.md.
"""
import argparse
import glob
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_matrix import ROOT  # noqa: E402
from run_ort_compare import (ORT_SCRIPT, ensure_onnx, ensure_ort, first_tensor,  # noqa: E402
                             fmt_range, make_input, manifest_entry, relative_difference,
                             sweep_entries, write_meta)

DEFAULT_MODELS = "resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,bert_encoder"
PAUSE_S = 0.05


def paired_arguments(description, name, models, batches, pairs, warmup):
    """The options of a paired benchmark (this one, ort_layers.py), and its memoplan side's."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--models", default=models)
    p.add_argument("--batches", default=batches)
    p.add_argument("--threads", default="1,2", help="intra-op threads of the one inference thread")
    p.add_argument("--pairs", type=int, default=pairs, help="bursts of each side per cell")
    p.add_argument("--burst", type=int, default=5, help="timed passes per burst")
    p.add_argument("--warmup", type=int, default=warmup, help="untimed passes per process first")
    p.add_argument("--lib", default=os.path.join(ROOT, "build", "torch_ext",
                                                 "libmemoplan_torch.so"))
    p.add_argument("--out", help=f"results directory (default bench/results/{name}_<stamp>)")
    p.add_argument("--report-only", metavar="DIR", help="only rewrite DIR/report.md from DIR/raw")
    p.add_argument("--sweep", action="store_true",
                   help="--models are the conformance sweep's, as run_ort_compare.py --sweep")
    p.add_argument("--forms", default="traced,scripted", help="with --sweep: the graph forms")
    p.add_argument("--size", type=int, default=224, help="with --sweep: the image side")
    # The memoplan side (started by the script).
    p.add_argument("--memoplan-side", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--shape", help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    return p


def parse_args():
    return paired_arguments(__doc__.split("\n")[0], "ort_bursts", DEFAULT_MODELS, "1,2", 12,
                            3).parse_args()


def cell_models(args, out):
    """The cells' models: {name: manifest-style entry} and name, batch -> its ONNX file; the
    zoo's, or with --sweep each sweep model in each form (run_ort_compare.py's, saved in OUT)."""
    if args.sweep:
        entries, onnx_for = sweep_entries(args, out)
        return entries, lambda m, b: onnx_for(entries[m]["sweep_model"], b)
    entries = {m: manifest_entry(m) for m in args.models.split(",")}
    return entries, lambda m, b: ensure_onnx(m)[0]


def tuned_model(args):
    """A memoplan side's input and its model planned with the tuned kernels (--threads intra-op
    threads, --lib loaded)."""
    import numpy
    import torch
    torch.set_num_threads(int(args.threads))
    torch.ops.load_library(args.lib)
    shape = [int(d) for d in args.shape.split("x")]
    dtype = numpy.int64 if args.dtype == "int64" else numpy.float32
    x = torch.from_numpy(numpy.fromfile(args.input, dtype=dtype).reshape(shape))
    tuned = torch.jit.load(args.model).eval()
    torch.ops.memoplan.plan(tuned._c, [x], kernels="tuned")
    return x, tuned


def memoplan_side(args):
    """Plans the model with the tuned kernels, answers one line of JSON when ready, then serves
    bursts as run_ort.mjs --serve does."""
    import torch
    x, tuned = tuned_model(args)
    stock = torch.jit.load(args.model).eval()
    with torch.inference_mode():
        for _ in range(args.warmup):
            out = tuned(x)
        expected = first_tensor(stock(x)).float()
        difference = float((first_tensor(out).float() - expected).abs().max() /
                           expected.abs().max())
        del stock
        print(json.dumps({"ready": True, "max_relative_difference": difference}), flush=True)
        for line in sys.stdin:
            n = int(line.strip() or 0)
            if n <= 0:
                break
            tuned(x)
            ms = []
            for _ in range(n):
                start = time.perf_counter()
                tuned(x)
                ms.append((time.perf_counter() - start) * 1e3)
            print(json.dumps({"pass_ms": ms}), flush=True)


class Side:
    """A live process that answers bursts: one line "N" in, one JSON line out."""

    def __init__(self, command, threads):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        self.command = command
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env)

    def read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{shlex.join(self.command)} ended (exit code "
                               f"{self.process.wait()})")
        return json.loads(line)

    def burst(self, n):
        self.process.stdin.write(f"{n}\n")
        self.process.stdin.flush()
        return statistics.median(self.read()["pass_ms"])

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write("0\n")
            self.process.stdin.close()
            self.process.wait(timeout=60)


def take_turns(ort, mp, args, record):
    """--pairs pairs of --burst bursts, ORT first in even pairs, PAUSE_S apart; each burst's
    median appended to record["ort_ms"] / record["memoplan_ms"]. Returns who went first."""
    order = []
    for pair in range(args.pairs):
        sides = [("ort", ort), ("memoplan", mp)]
        if pair % 2:
            sides.reverse()
        for name, side in sides:
            time.sleep(PAUSE_S)
            record[name + "_ms"].append(side.burst(args.burst))
        order.append(sides[0][0])
    return order


def measure_cell(args, ort_dir, onnx, entry, cell_input, threads):
    import numpy
    path, shape, reference = cell_input
    output = path + ".ort_out"
    ort = Side(["node", ORT_SCRIPT, "--ort-dir", ort_dir, "--model", onnx, "--input", path,
                "--shape", shape, "--dtype", entry["dtype"], "--threads", str(threads),
                "--warmup", str(args.warmup), "--serve", "1", "--output", output], threads)
    mp = Side([sys.executable, os.path.abspath(__file__), "--memoplan-side", "--lib", args.lib,
               "--model", os.path.join(ROOT, "models", entry["file"]), "--input", path,
               "--shape", shape, "--dtype", entry["dtype"], "--threads", str(threads),
               "--warmup", str(args.warmup)], threads)
    try:
        ready = mp.read()
        ort.burst(1)  # ORT's load and warm-up; writes its output
        record = {"ort_ms": [], "memoplan_ms": [],
                  "tuned_max_relative_difference": ready["max_relative_difference"],
                  "ort_max_relative_difference": relative_difference(
                      numpy.fromfile(output, dtype=numpy.float32), reference)}
        record["order"] = take_turns(ort, mp, args, record)
        return record
    finally:
        ort.close()
        mp.close()
        if os.path.exists(output):
            os.remove(output)


def measure(args, out):
    import torch
    if not os.path.exists(args.lib):
        sys.exit(f"ort_bursts: {args.lib} is missing (cmake --build build)")
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    ort_dir = ensure_ort()
    entries, onnx_for = cell_models(args, out)
    models = list(entries)
    onnx = {(m, b): onnx_for(m, b) for m in models for b in batches}
    write_meta(out, args, torch.__version__)
    with tempfile.TemporaryDirectory(prefix="ort_bursts_") as scratch:
        for m in models:
            for b in batches:
                cell_input = make_input(entries[m], b, scratch)
                for t in threads:
                    record = measure_cell(args, ort_dir, onnx[(m, b)], entries[m], cell_input,
                                          t)
                    record.update(model=m, batch=b, threads=t)
                    json.dump(record, open(os.path.join(out, "raw", f"{m}_b{b}_t{t}.json"), "w"),
                              indent=1)
                    ratios = [a / o for a, o in zip(record["memoplan_ms"], record["ort_ms"])]
                    print(f"{m} b{b} t{t}: memoplan / ORT {statistics.median(ratios):.3f} "
                          f"[{min(ratios):.3f}-{max(ratios):.3f}]", flush=True)


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def report(out):
    meta = json.load(open(os.path.join(out, "meta.json")))
    records = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "raw", "*.json")))]
    s = meta["settings"]
    lines = [
        "# memoplan's tuned kernels against ONNX Runtime, alternating bursts",
        "",
        f"`{meta['command']}`",
        "",
        f"- started {meta['started']}; CPU: {meta['cpu']} ({meta['simd']}), {meta['cores']} "
        f"cores; load average at start {meta['load_at_start']:.2f}; memoplan commit "
        f"{meta['commit']}; torch {meta['torch']}",
        f"- per cell {s['pairs']} pairs of bursts (ORT first in even pairs, 50 ms apart), a "
        f"burst one untimed and {s['burst']} timed passes, its median its time; both processes "
        f"live and warm ({s['warmup']} passes) throughout (bench/ort_bursts.py's docstring)",
        "- ms: median of the bursts' medians [min–max]; ratio: memoplan / ORT per pair, median "
        "[quartiles] (min-max); below 1: memoplan faster",
        "",
        "| model | batch | threads | ORT ms | memoplan tuned ms | tuned / ORT | ORT accuracy | "
        "tuned accuracy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    medians = []
    order = {m: i for i, m in enumerate(DEFAULT_MODELS.split(","))}
    records.sort(key=lambda r: (order.get(r["model"], 99), r["model"], r["batch"], r["threads"]))
    for r in records:
        ratios = [a / o for a, o in zip(r["memoplan_ms"], r["ort_ms"])]
        med = statistics.median(ratios)
        medians.append((med, r))
        q1, q3 = quartiles(ratios)
        tuned = r["tuned_max_relative_difference"]
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['threads']} | {fmt_range(r['ort_ms'], '%.2f')} | "
            f"{fmt_range(r['memoplan_ms'], '%.2f')} | {med:.3f} [{q1:.3f}-{q3:.3f}] ({min(ratios):.3f}-"
            f"{max(ratios):.3f}) | {r['ort_max_relative_difference']:.2g} | {tuned:.2g} "
            f"({'within' if tuned <= 1e-5 else 'OVER'} 1e-5) |")
    if medians:
        geomean = math.exp(sum(math.log(m) for m, _ in medians) / len(medians))
        worst, w = max(medians, key=lambda x: x[0])
        over = sum(1 for m, _ in medians if m > 1.10)
        lines += ["", f"Geometric mean of the {len(medians)} cells' median ratios: {geomean:.3f}; "
                  f"worst cell: {w['model']} b{w['batch']} t{w['threads']} ({worst:.3f}); "
                  f"cells over 1.10: {over}."]
    open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def run(args, side, measure_into, report_on, name):
    """A paired benchmark's main: the memoplan side it starts, --report-only, or a measurement
    into --out (default bench/results/<name>_<UTC stamp>) and its report."""
    if args.memoplan_side:
        side(args)
        return
    if args.report_only:
        report_on(args.report_only)
        return
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   name + "_" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    measure_into(args, out)
    report_on(out)


def main():
    run(parse_args(), memoplan_side, measure, report, "ort_bursts")


if __name__ == "__main__":
    main()
