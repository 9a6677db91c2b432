#!/usr/bin/env python3
"""The tuned kernels against what a user would pick instead, in one process per thread count.

Per model, five copies of the same TorchScript module, run interleaved (one pass of each per
iteration, the order rotated every iteration), medians over the iterations:

  stock      the module as loaded (aten with OpenBLAS / oneDNN)
  optimized  torch.jit.optimize_for_inference (frozen; oneDNN convolutions with weights packed once)
  planned    memoplan's plan (memory only: the slab), stock kernels
  tuned      memoplan's plan with kernels="tuned" (GEMM ops, convolution layouts)
  optimized+tuned  memoplan's tuned plan of the optimized module

Every output is compared with stock's (max |x - stock| / max |stock|). Thread count: set
OPENBLAS_NUM_THREADS to the same number before this script starts (aten's set_num_threads does
not reach OpenBLAS's own pool), which bench/run_kernels_bench.sh does.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/tuned_baselines.py \
      --lib build-bench/torch_ext/libmemoplan_torch.so --threads 1 --iters 20 \
      --models resnet18,mobilenet_v2 --json out.json
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

MODEL_FILES = {"transformer_encoder": "bench/results/tmp/models/transformer_encoder.pt"}


def model_input(name):
    manifest = json.load(open("models/manifest.json"))
    for entry in manifest["models"]:
        if entry["name"] == name:
            shape = entry["input_shape"]
            if entry["dtype"] == "int64":
                return torch.randint(0, entry.get("input_high", 1000), shape)
            return torch.randn(*shape)
    if name == "transformer_encoder":
        return torch.randn(1, 128, 256)
    raise SystemExit(f"unknown model {name}")


def load(name):
    path = MODEL_FILES.get(name, f"models/{name}.pt")
    return torch.jit.load(path).eval()


def first_tensor(out):
    while isinstance(out, (tuple, list)):
        out = out[0]
    if isinstance(out, dict):
        out = next(iter(out.values()))
    return out


def relative_difference(got, want):
    got, want = first_tensor(got), first_tensor(want)
    return ((got - want).abs().max() / want.abs().max()).item()


def measure(name, threads, iters):
    x = model_input(name)
    configs = {}
    notes = {}
    configs["stock"] = load(name)
    configs["optimized"] = torch.jit.optimize_for_inference(load(name))
    for label, kernels in (("planned", "stock"), ("tuned", "tuned")):
        m = load(name)
        torch.ops.memoplan.plan(m._c, [x], kernels=kernels)
        configs[label] = m
    try:
        m = torch.jit.optimize_for_inference(load(name))
        torch.ops.memoplan.plan(m._c, [x], kernels="tuned")
        configs["optimized+tuned"] = m
    except RuntimeError as e:  # reported, not hidden
        notes["optimized+tuned"] = str(e).splitlines()[0]
    reference = configs["stock"](x)
    for m in configs.values():
        for _ in range(3):
            m(x)
    times = {label: [] for label in configs}
    worst = {label: 0.0 for label in configs}
    labels = list(configs)
    for i in range(iters):
        order = labels[i % len(labels):] + labels[:i % len(labels)]
        for label in order:
            start = time.perf_counter()
            out = configs[label](x)
            times[label].append((time.perf_counter() - start) * 1000)
            worst[label] = max(worst[label], relative_difference(out, reference))
    medians = {label: statistics.median(t) for label, t in times.items()}
    return {
        "model": name,
        "input": "x".join(str(s) for s in x.shape),
        "threads": threads,
        "iters": iters,
        "median_ms": medians,
        "max_relative_difference": worst,
        "notes": notes,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True)
    parser.add_argument("--models", default="bert_encoder,gpt_decoder,resnet18,mobilenet_v2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    if os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        print(f"warning: OPENBLAS_NUM_THREADS is {os.environ.get('OPENBLAS_NUM_THREADS')}, "
              f"not {args.threads}: OpenBLAS uses its own thread count", file=sys.stderr)
    torch.ops.load_library(args.lib)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = []
    with torch.no_grad():
        for name in args.models.split(","):
            r = measure(name, args.threads, args.iters)
            results.append(r)
            ms = r["median_ms"]
            print(f"{name} threads {args.threads}: " +
                  ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()), flush=True)
    report = torch.ops.memoplan.kernel_report()
    if args.json:
        json.dump({"results": results, "kernel_report": report}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
