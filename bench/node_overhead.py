#!/usr/bin/python3
"""Per-node cost of running a TorchScript graph, unplanned and planned (issue 52).

    /usr/bin/python3 bench/node_overhead.py                 # 500 nodes, 5 rounds
    /usr/bin/python3 bench/node_overhead.py --nodes 500 --rounds 5 --passes 2000

A scripted forward of N trivial out-of-place ops on a one-element tensor (alternately `x + 1.0`
and `x * 0.999`: each node allocates its output, as a DNN's nodes do) and the same module with
no node but the return, each loaded from a file (torch.jit.save / load) in four copies: stock
(LibTorch's interpreter and allocator), planned (`memoplan.plan`, kernels stock: the planning
runtime's marks and the slab), planned `memory="min"` (its ShareInputs nodes too), and tuned
(kernels tuned: nothing here to replace, so its cost is the rewrite's bookkeeping only). Per
round each copy runs --passes passes of both modules, copies and modules interleaved in a
rotating order; ns per node = (ms(N) - ms(0)) / N per pass. Reported: the median over the rounds
and its range, and the process's peak RSS. One intra-op thread; everything in one process (the
copies are tiny). The flat executor issue 52 asks for is measured against the planned rows.
"""
import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_matrix import ROOT, machine_info  # noqa: E402

import torch  # noqa: E402


def module_source(nodes):
    lines = ["def forward(self, x):"]
    for i in range(nodes):
        lines.append("    x = x + 1.0" if i % 2 == 0 else "    x = x * 0.999")
    lines.append("    return x")
    return "\n".join(lines) + "\n"


def make(nodes, path):
    m = type("Nodes%d" % nodes, (torch.jit.ScriptModule,), {})()  # a class of its own per N
    m.define(module_source(nodes))
    torch.jit.save(m, path)


def peak_rss_mib():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) / 1024


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--passes", type=int, default=2000)
    p.add_argument("--library", default=os.path.join(ROOT, "build", "torch_ext",
                                                      "libmemoplan_torch.so"))
    args = p.parse_args()
    machine = machine_info()  # the load at start
    torch.set_num_threads(1)
    torch.ops.load_library(args.library)
    x = torch.ones(1)
    tmp = tempfile.mkdtemp()
    paths = {n: os.path.join(tmp, "n%d.pt" % n) for n in (0, args.nodes)}
    for n, path in paths.items():
        make(n, path)
    configs = [("stock", None), ("planned", {}), ("planned, memory min", {"memory": "min"}),
               ("tuned", {"kernels": "tuned"})]
    copies = {}
    with torch.inference_mode():
        for name, options in configs:
            for n, path in paths.items():
                m = torch.jit.load(path)
                if options is not None:
                    torch.ops.memoplan.plan(m._c, [x], **options)
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
    print("# %d trivial nodes, %d rounds of %d passes, one thread; %s (%s, %d CPUs), torch %s, "
          "%s, memoplan %s, load %.2f at start" % (
              args.nodes, args.rounds, args.passes, machine["cpu"], machine["simd"],
              machine["cores"], torch.__version__, platform.python_version(), machine["commit"],
              machine["load_at_start"]))
    print("| copy | ns per node, median [range] | ms per pass of %d nodes | vs stock |"
          % args.nodes)
    print("|---|---|---|---|")
    stock = statistics.median(per_node["stock"])
    for name, _ in configs:
        v = per_node[name]
        med = statistics.median(v)
        print("| %s | %.0f [%.0f-%.0f] | %.3f | %.2fx |" % (
            name, med, min(v), max(v), statistics.median(per_pass[name]), med / stock))
    print("peak RSS of the process: %.0f MiB" % peak_rss_mib())


if __name__ == "__main__":
    sys.exit(main())
