#!/usr/bin/python3
"""memoplan's tuned kernels against ONNX Runtime layer by layer, both profiled in alternating bursts.

    /usr/bin/python3 bench/ort_layers.py --models resnet18 --batches 1 --threads 1
    /usr/bin/python3 bench/ort_layers.py --report-only bench/results/ort_layers_<stamp>
    /usr/bin/python3 bench/ort_layers.py --sweep --forms traced --models mobilenet_v3_large \
        --size 128 --threads 1       # a conformance sweep model (ort_bursts.py's --sweep)

Why: bench/ort_bursts.py tells how far apart the two are per pass; this tells where. Both sides
run as there (live processes taking turns in short bursts, 50 ms apart, so that each pair of
bursts sees nearly the same machine), each with its profiler on for every timed pass:
  - ONNX Runtime: bench/ort/ort_profile.cc, the session of run_ort.mjs (same library, the one
    inside onnxruntime-node) driven through the C API with SessionOptions' profiling, which the
    node binding lacks. Built here with g++ against Debian 13's libonnxruntime-dev header (fetched
    once with apt-get download in the root scripts/debian13.sh makes; kept under
    ~/.cache/memoplan/ort-headers).
  - memoplan: torch.ops.memoplan.plan(kernels="tuned") as ort_bursts.py's memoplan side, under
    torch.profiler: memoplan's operators are profiler scopes of their own. Their operands' shapes
    come from one pass before the bursts: recorded during the timed passes they would keep each
    operand alive, and a convolution then cannot write over its dying residual.
Per layer the median over all timed passes of each side. Layers are matched by kind and by the
shapes of their first two operands (a convolution's input and weight, both logical N x C x H x W
and O x I x kh x kw), in order among equals; what has no counterpart is listed too (ORT's
reorders, memoplan's EndPass). The profilers cost a little on both sides: the pass times here
are for locating, bench/ort_bursts.py's for the ratio.

Results: --out (default bench/results/ort_layers_<UTC stamp>/): meta.json, raw/<cell>.json (both
sides' layers, the bursts) and report.md.
"""
import argparse
import collections
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_bursts import (Side, cell_models, paired_arguments, run, take_turns,  # noqa: E402
                        tuned_model)
from run_matrix import ROOT  # noqa: E402
from run_ort_compare import CACHE, ensure_ort, make_input, write_meta  # noqa: E402

PROFILER_SOURCE = os.path.join(ROOT, "bench", "ort", "ort_profile.cc")
HEADERS = os.path.join(CACHE, "ort-headers")
ORT_KINDS = {"Conv": "conv", "FusedConv": "conv", "MaxPool": "pool", "AveragePool": "pool",
             "GlobalAveragePool": "global_pool", "Gemm": "gemm", "MatMul": "gemm",
             "FusedMatMul": "gemm", "Add": "binary", "Mul": "binary", "Sum": "binary"}
MEMOPLAN_KINDS = {"memoplan::bconv": "conv", "memoplan::bpool": "pool",
                  "memoplan::badaptive_avg_pool": "global_pool", "memoplan::linear": "gemm",
                  "memoplan::addmm": "gemm", "memoplan::matmul": "gemm",
                  "memoplan::bbinary": "binary"}


def parse_args():
    p = paired_arguments(__doc__.split("\n")[0], "ort_layers", "resnet18,resnet50", "1", 10, 5)
    p.add_argument("--layers-out", help=argparse.SUPPRESS)
    return p.parse_args()


def top_level(events, scope):
    """Per `scope` event, the memoplan operators directly inside it, in order."""
    events = sorted(events, key=lambda e: e.time_range.start)
    passes = [e for e in events if e.name == scope]
    ops = [e for e in events if e.name.startswith("memoplan::")]
    out, i = [], 0
    for p in passes:
        top, end = [], -1
        while i < len(ops) and ops[i].time_range.start < p.time_range.start:
            i += 1
        while i < len(ops) and ops[i].time_range.start <= p.time_range.end:
            e = ops[i]
            i += 1
            if e.time_range.start >= end:  # not inside the previous one
                top.append(e)
                end = e.time_range.end
        out.append(top)
    return out


def memoplan_side(args):
    """ort_bursts.py's memoplan side, profiled; at the end writes each pass's top-level memoplan
    operators (name, operand shapes, ms) to --layers-out."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    x, model = tuned_model(args)
    scope = "memoplan_layers_pass"
    with torch.inference_mode():
        for _ in range(args.warmup):
            model(x)
        # The operands' shapes from one pass of their own: recording them makes the profiler hold
        # the operands, which keeps a convolution from writing over its dying residual (its
        # reference count tells), so the timed passes record none.
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            with record_function(scope):
                model(x)
        shapes = [[list(s) for s in (e.input_shapes or []) if s][:2]
                  for e in top_level(prof.events(), scope)[0]]
        print(json.dumps({"ready": True}), flush=True)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for line in sys.stdin:
                n = int(line.strip() or 0)
                if n <= 0:
                    break
                ms = []
                with record_function(scope):
                    model(x)  # untimed, as ort_bursts.py's sides
                for _ in range(n):
                    with record_function(scope):
                        start = time.perf_counter()
                        model(x)
                        ms.append((time.perf_counter() - start) * 1e3)
                print(json.dumps({"pass_ms": ms}), flush=True)
    layers = [[[e.name, shapes[j] if j < len(shapes) else [],
                (e.time_range.end - e.time_range.start) / 1e3] for j, e in enumerate(top)]
              for top in top_level(prof.events(), scope)]
    json.dump(layers, open(args.layers_out, "w"))


def ensure_profiler():
    """bench/ort/ort_profile.cc built against onnxruntime-node's library (rebuilt when newer)."""
    # The package's folder is named for its N-API level (napi-v3 up to 1.20, napi-v6 in 1.30).
    libs = sorted(glob.glob(os.path.join(ensure_ort(), "node_modules", "onnxruntime-node", "bin",
                                         "napi-v*", "linux", "x64", "libonnxruntime.so.1")))
    if not libs:
        sys.exit("ort_layers: no linux/x64 libonnxruntime.so.1 inside onnxruntime-node")
    ort_lib_dir = os.path.dirname(libs[-1])
    include = os.path.join(HEADERS, "usr", "include", "onnxruntime")
    if not os.path.exists(os.path.join(include, "onnxruntime_cxx_api.h")):
        fetch = os.path.join(ROOT, "build", "ort-headers-deb")
        os.makedirs(fetch, exist_ok=True)
        print("fetching libonnxruntime-dev (Debian 13) for onnxruntime's C API header", flush=True)
        subprocess.run([os.path.join(ROOT, "scripts", "debian13.sh"), "shell", "--", "bash", "-c",
                        "cd build/ort-headers-deb && apt-get download libonnxruntime-dev"],
                       check=True)
        deb = sorted(glob.glob(os.path.join(fetch, "libonnxruntime-dev_*.deb")))[-1]
        subprocess.run(["dpkg-deb", "-x", deb, HEADERS], check=True)
    binary = os.path.join(CACHE, "ort_profile")
    if (not os.path.exists(binary) or
            os.path.getmtime(binary) < os.path.getmtime(PROFILER_SOURCE)):
        subprocess.run(["g++", "-O2", "-std=c++17", "-I" + include, PROFILER_SOURCE, "-o", binary,
                        os.path.join(ort_lib_dir, "libonnxruntime.so.1"),
                        "-Wl,-rpath," + ort_lib_dir], check=True)
    return binary


def ort_layers(profile_path, skip_runs):
    """Per run of the ORT profile, its nodes (op, operand shapes, ms), the first skip_runs (the
    warm-up) left out."""
    events = json.load(open(profile_path))
    nodes = sorted((e for e in events
                    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")),
                   key=lambda e: e["ts"])
    run_spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("cat") == "Session" and e["name"] == "model_run")
    grouped = [[] for _ in run_spans]
    r = 0
    for e in nodes:
        while r < len(run_spans) and e["ts"] > run_spans[r][1]:
            r += 1
        if r == len(run_spans):
            break
        a = e.get("args", {})
        shapes = [next(iter(s.values())) for s in a.get("input_type_shape", [])][:2]
        grouped[r].append([a.get("op_name", "?"), shapes, e["dur"] / 1e3, e["name"][:-12]])
    return grouped[skip_runs:]


def medians(runs):
    """[(name, shapes, median ms, label)] in the order of the first run."""
    if not runs:
        return []
    n = min(len(r) for r in runs)
    return [(runs[0][i][0], runs[0][i][1], statistics.median(r[i][2] for r in runs),
             runs[0][i][3] if len(runs[0][i]) > 3 else "") for i in range(n)]


def match(ort, memoplan):
    """Rows (memoplan layer or None, ORT layer or None) in memoplan's order, then ORT's leftovers:
    equal kind and operand shapes, in order among equals."""
    def key(kind, shapes):
        return json.dumps([kind, shapes if kind == "conv" else shapes[:1]])
    pool = collections.defaultdict(collections.deque)
    for layer in ort:
        pool[key(ORT_KINDS.get(layer[0], layer[0]), layer[1])].append(layer)
    rows = []
    for layer in memoplan:
        q = pool.get(key(MEMOPLAN_KINDS.get(layer[0], layer[0]), layer[1]))
        rows.append((layer, q.popleft() if q else None))
    taken = {id(o) for _, o in rows if o is not None}
    rows += [(None, o) for o in ort if id(o) not in taken]
    return rows


def measure_cell(args, profiler, onnx, entry, cell_input, threads, scratch):
    path, shape, _ = cell_input
    prefix = os.path.join(scratch, "ort")
    layers_out = os.path.join(scratch, "memoplan_layers.json")
    ort = Side([profiler, onnx, path, shape, entry["dtype"], str(threads), str(args.warmup),
                prefix], threads)
    mp = Side([sys.executable, os.path.abspath(__file__), "--memoplan-side", "--lib", args.lib,
               "--model", os.path.join(ROOT, "models", entry["file"]), "--input", path,
               "--shape", shape, "--dtype", entry["dtype"], "--threads", str(threads),
               "--warmup", str(args.warmup), "--layers-out", layers_out], threads)
    record = {"ort_ms": [], "memoplan_ms": []}
    try:
        ort.read()
        mp.read()
        take_turns(ort, mp, args, record)
    finally:
        ort.process.stdin.write("0\n")
        ort.process.stdin.close()
        profile = json.loads(ort.process.stdout.readline())["profile"]
        ort.process.wait(timeout=60)
        mp.close()
    # Each ORT burst is one untimed and --burst timed runs (as ort_bursts.py's sides).
    runs = ort_layers(profile, args.warmup)
    timed = [r for i, r in enumerate(runs) if i % (args.burst + 1) != 0]
    record["ort_layers"] = medians(timed)
    mruns = json.load(open(layers_out))
    record["memoplan_layers"] = medians([r for i, r in enumerate(mruns)
                                         if i % (args.burst + 1) != 0])
    os.remove(profile)
    return record


def report(out):
    meta = json.load(open(os.path.join(out, "meta.json")))
    s = meta["settings"]
    lines = ["# memoplan's tuned kernels against ONNX Runtime, layer by layer", "",
             f"`{meta['command']}`", "",
             f"- started {meta['started']}; CPU: {meta['cpu']} ({meta['simd']}), {meta['cores']} "
             f"cores; memoplan commit {meta['commit']}; torch {meta['torch']}",
             f"- per cell {s['pairs']} pairs of bursts (one untimed and {s['burst']} timed passes "
             "each), both sides profiled throughout (bench/ort_layers.py's docstring); per layer "
             "the median of its timed passes", ""]
    for p in sorted(glob.glob(os.path.join(out, "raw", "*.json"))):
        r = json.load(open(p))
        ort_pass, mp_pass = statistics.median(r["ort_ms"]), statistics.median(r["memoplan_ms"])
        ratios = sorted(m / o for m, o in zip(r["memoplan_ms"], r["ort_ms"]))
        lines += [f"## {r['model']} batch {r['batch']}, {r['threads']} thread(s)", "",
                  f"Pass (profiled): ORT {ort_pass:.2f} ms, memoplan {mp_pass:.2f} ms; memoplan / "
                  f"ORT per pair median {statistics.median(ratios):.3f} "
                  f"({ratios[0]:.3f}-{ratios[-1]:.3f}).", "",
                  "| # | memoplan op | operands | memoplan ms | ORT node | ORT ms | memoplan - ORT |",
                  "|---:|---|---|---:|---|---:|---:|"]
        totals = collections.defaultdict(lambda: [0.0, 0.0])
        for i, (m, o) in enumerate(match(r["ort_layers"], r["memoplan_layers"])):
            kind = MEMOPLAN_KINDS.get(m[0], m[0]) if m else ORT_KINDS.get(o[0], o[0])
            m_ms, o_ms = (m[2] if m else 0.0), (o[2] if o else 0.0)
            totals[kind][0] += m_ms
            totals[kind][1] += o_ms
            shapes = " ".join("x".join(map(str, sh)) for sh in (m or o)[1])
            lines.append(f"| {i} | {m[0].replace('memoplan::', '') if m else '-'} | {shapes} | "
                         f"{m_ms:.3f} | {(o[0] + ' ' + o[3][-40:]) if o else '-'} | {o_ms:.3f} | "
                         f"{m_ms - o_ms:+.3f} |")
        lines += ["", "By kind (ms a pass): " + "; ".join(
            f"{k} memoplan {v[0]:.2f} / ORT {v[1]:.2f}" for k, v in sorted(totals.items())), ""]
    open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def measure(args, out):
    import torch
    if not os.path.exists(args.lib):
        sys.exit(f"ort_layers: {args.lib} is missing (cmake --build build)")
    profiler = ensure_profiler()
    write_meta(out, args, torch.__version__)
    with tempfile.TemporaryDirectory(prefix="ort_layers_") as scratch:
        entries, onnx_for = cell_models(args, out)
        for m, entry in entries.items():
            for b in (int(v) for v in args.batches.split(",")):
                onnx = onnx_for(m, b)
                cell_input = make_input(entry, b, scratch)
                for t in (int(v) for v in args.threads.split(",")):
                    record = measure_cell(args, profiler, onnx, entry, cell_input, t, scratch)
                    record.update(model=m, batch=b, threads=t)
                    json.dump(record, open(os.path.join(out, "raw", f"{m}_b{b}_t{t}.json"), "w"),
                              indent=1)
                    print(f"{m} b{b} t{t}: measured", flush=True)


if __name__ == "__main__":
    run(parse_args(), memoplan_side, measure, report, "ort_layers")
