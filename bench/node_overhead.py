#!/usr/bin/python3
"""Per-node cost of running a TorchScript graph, unplanned and planned (issue 52).

    /usr/bin/python3 bench/node_overhead.py                 # 500 nodes, 5 rounds
    /usr/bin/python3 bench/node_overhead.py --nodes 500 --rounds 5 --passes 2000
    /usr/bin/python3 bench/node_overhead.py --graph conv     # 100 tiny conv + relu layers

A scripted forward of N trivial out-of-place ops on a one-element tensor (alternately `x + 1.0`
and `x * 0.999`: each node allocates its output, as a DNN's nodes do) and the same module with
no node but the return, each loaded from a file (torch.jit.save / load) in four copies: stock
(LibTorch's interpreter and allocator), planned (`memoplan.plan`, kernels stock: the planning
runtime's marks and the slab), planned `memory="min"` (its ShareInputs nodes too), and tuned
(kernels tuned: nothing here to replace, so its cost is the rewrite's bookkeeping only). Per
round each copy runs --passes passes of both modules, copies and modules interleaved in a
rotating order; ns per node = (ms(N) - ms(0)) / N per pass. Reported: the median over the rounds
and its range, and the process's peak RSS. One intra-op thread; everything in one process (the
copies are tiny). The "flat" rows are copies planned with MEMOPLAN_EXECUTOR=flat, so memoplan's
flat executor (torch_ext/planning/flat_executor.h) runs their planned graph; the others run on
LibTorch's interpreter.
`--graph conv`: N layers of a 16-channel 1x1 convolution and a relu on a 1x16x4x4 input (traced,
as a user exports it), so that a layer's time is its per-call cost, not its arithmetic (a few
hundred FLOPs): the tuned copy's memoplan::bconv (relu fused) against aten's two nodes. With
--ort, the same two chains exported to ONNX (opset 17) run in ONNX Runtime too (onnxruntime-node,
bench/run_ort_compare.py's install and runner, one process per chain and round, after memoplan's
rounds: never two runtimes timing at once).
"""
import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_matrix import ROOT, machine_info  # noqa: E402
import run_ort_compare  # noqa: E402

import torch  # noqa: E402


def module_source(nodes):
    lines = ["def forward(self, x):"]
    for i in range(nodes):
        lines.append("    x = x + 1.0" if i % 2 == 0 else "    x = x * 0.999")
    lines.append("    return x")
    return "\n".join(lines) + "\n"


def make(nodes, path, graph):
    if graph == "conv":
        layers = []
        for _ in range(nodes):
            layers += [torch.nn.Conv2d(16, 16, 1), torch.nn.ReLU()]
        with torch.no_grad():
            torch.jit.trace(torch.nn.Sequential(*layers).eval(), example(graph)).save(path)
        return
    m = type("Nodes%d" % nodes, (torch.jit.ScriptModule,), {})()  # a class of its own per N
    m.define(module_source(nodes))
    torch.jit.save(m, path)


def example(graph):
    return torch.ones(1, 16, 4, 4) if graph == "conv" else torch.ones(1)


def peak_rss_mib():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) / 1024


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", choices=["add", "conv"], default="add")
    p.add_argument("--nodes", type=int, help="default: 500 add/mul nodes, 100 conv layers")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--passes", type=int, default=2000)
    p.add_argument("--ort", action="store_true", help="--graph conv: ONNX Runtime's row too")
    p.add_argument("--library", default=os.path.join(ROOT, "build", "torch_ext",
                                                      "libmemoplan_torch.so"))
    args = p.parse_args()
    if args.nodes is None:
        args.nodes = 100 if args.graph == "conv" else 500
    machine = machine_info()  # the load at start
    torch.set_num_threads(1)
    torch.ops.load_library(args.library)
    torch.manual_seed(0)
    x = example(args.graph)
    tmp = tempfile.mkdtemp()
    paths = {n: os.path.join(tmp, "n%d.pt" % n) for n in (0, args.nodes)}
    for n, path in paths.items():
        make(n, path, args.graph)
    # The "flat" rows are planned with MEMOPLAN_EXECUTOR=flat (memoplan's flat executor runs the
    # planned graph); the others on LibTorch's interpreter, the default.
    configs = [("stock", None), ("planned", {}), ("planned, flat", {"executor": "flat"}),
               ("planned, memory min", {"memory": "min"}), ("tuned", {"kernels": "tuned"}),
               ("tuned, flat", {"kernels": "tuned", "executor": "flat"})]
    copies = {}
    with torch.inference_mode():
        for name, options in configs:
            for n, path in paths.items():
                m = torch.jit.load(path)
                if options is not None:
                    options = dict(options)
                    executor = options.pop("executor", None)
                    if executor:
                        os.environ["MEMOPLAN_EXECUTOR"] = executor
                    torch.ops.memoplan.plan(m._c, [x], **options)
                    os.environ.pop("MEMOPLAN_EXECUTOR", None)
                for _ in range(50):
                    m(x)
                copies[(name, n)] = m
        per_node = {name: [] for name, _ in configs}
        per_pass = {name: [] for name, _ in configs}
        order = list(copies)
        for r in range(args.rounds):
            ms = {}
            rotated = order[r % len(order):] + order[:r % len(order)]
            for key in rotated:
                m = copies[key]
                start = time.perf_counter()
                for _ in range(args.passes):
                    m(x)
                ms[key] = (time.perf_counter() - start) * 1e3 / args.passes
            for name, _ in configs:
                per_pass[name].append(ms[(name, args.nodes)])
                per_node[name].append((ms[(name, args.nodes)] - ms[(name, 0)]) * 1e6 / args.nodes)
    what = "layers of a 1x1 16-channel conv + relu" if args.graph == "conv" else "trivial nodes"
    print("# %d %s, %d rounds of %d passes, one thread; %s (%s, %d CPUs), torch %s, "
          "%s, memoplan %s, load %.2f at start" % (
              args.nodes, what, args.rounds, args.passes, machine["cpu"], machine["simd"],
              machine["cores"], torch.__version__, platform.python_version(), machine["commit"],
              machine["load_at_start"]))
    unit = "layer" if args.graph == "conv" else "node"
    print("| copy | ns per %s, median [range] | ms per pass of %d %ss | vs stock |"
          % (unit, args.nodes, unit))
    print("|---|---|---|---|")
    stock = statistics.median(per_node["stock"])
    for name, _ in configs:
        v = per_node[name]
        med = statistics.median(v)
        print("| %s | %.0f [%.0f-%.0f] | %.3f | %.2fx |" % (
            name, med, min(v), max(v), statistics.median(per_pass[name]), med / stock))
    print("peak RSS of the process: %.0f MiB" % peak_rss_mib())
    if args.ort and args.graph == "conv":
        ort_rows(args, paths, tmp)


def ort_rows(args, paths, tmp):
    """ONNX Runtime's ns per layer on the same chains, one process per chain and round."""
    ort_dir = run_ort_compare.ensure_ort()
    x = example("conv")
    data = os.path.join(tmp, "x.bin")
    x.numpy().tofile(data)
    onnx = {}
    for n, path in paths.items():
        onnx[n] = os.path.join(tmp, "n%d.onnx" % n)
        with warnings.catch_warnings():  # a traced module's input format: nothing to decide
            warnings.simplefilter("ignore")
            torch.onnx.export(torch.jit.load(path), x, onnx[n], opset_version=17,
                              input_names=["x"], output_names=["y"])
    per_layer, per_pass = [], []
    for r in range(args.rounds):
        ms = {}
        for n in (paths if r % 2 == 0 else reversed(list(paths))):
            record = run_ort_compare.run_process(
                ["node", run_ort_compare.ORT_SCRIPT, "--ort-dir", ort_dir, "--model", onnx[n],
                 "--input", data, "--shape", "1x16x4x4", "--dtype", "float32", "--threads", "1",
                 "--warmup", "200", "--iters", str(args.passes)], 1)
            if record["returncode"] != 0:
                sys.exit("ONNX Runtime failed: " + record["stderr_tail"])
            ms[n] = statistics.median(record["report"]["pass_ms"])
        per_pass.append(ms[args.nodes])
        per_layer.append((ms[args.nodes] - ms[0]) * 1e6 / args.nodes)
    print("| ONNX Runtime %s (its own process) | %.0f [%.0f-%.0f] | %.3f | |" % (
        json.load(open(run_ort_compare.ORT_PACKAGE))["dependencies"]["onnxruntime-node"],
        statistics.median(per_layer), min(per_layer), max(per_layer), statistics.median(per_pass)))


if __name__ == "__main__":
    sys.exit(main())
