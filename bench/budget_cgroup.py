"""A memory budget under a real memory limit (issue 51, docs/BUDGET.md "Under a memory cgroup"):
one process per run, inside a cgroup v1 memory group whose limit counts the page cache, as a
container's does. The limit is the runtime's baseline (the group's usage once torch and memoplan
are loaded, before the model, in the first run of a fresh group: later runs find shared library
pages charged already and read up to 40 MiB lower) + the budget + a slack stated in the table; the
budget is a share of the model's weights plus its stock slab (`memoplan run --budget 25%`'s rule).

For each model, configuration (budget, stock) and page cache (cold: the weight file evicted
before every pass; warm: left to the kernel), rounds interleaved:
- `--limit-at after-plan` (default): the limit is set once the model is loaded and planned, as a
  server that loads and then serves under its limit.
- `--limit-at start`: the limit from before the model is loaded. Loading puts every weight in
  anonymous memory first (torch::jit::load): the load then fits only where the kernel can reclaim
  other pages (the runtime's code) meanwhile.
Reported per run: whether the limit could be set (the kernel refuses one below what it cannot
reclaim), OOM kills (memory.oom_control), the group's failcnt and peak usage under the limit,
major faults per pass, pass latency (median and quartiles), and outputs against an unlimited
stock run (bit-identical expected).

Needs root (it makes /sys/fs/cgroup/memory/memoplan-budget-PID and removes it).

    sudo /usr/bin/python3 bench/budget_cgroup.py --models resnet18 resnet50 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CGROUP_ROOT = "/sys/fs/cgroup/memory"
MIB = 1 << 20


# ---- the child: one model in one process ----

def child(args):
    def say(tag, **fields):
        print(json.dumps(dict(fields, tag=tag)), flush=True)

    def wait(tag):
        line = sys.stdin.readline().strip()
        if line != tag:
            sys.exit("expected %r, got %r" % (tag, line))

    def majflt():
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[9])

    wait("start")
    import torch
    torch.set_num_threads(1)
    torch.ops.load_library(os.path.join(ROOT, args.lib))
    say("runtime")
    wait("go")
    model = torch.jit.load(os.path.join(ROOT, "models", args.model + ".pt")).eval()
    torch.manual_seed(0)
    x = torch.randn([int(d) for d in args.shape.split("x")])
    with torch.inference_mode():
        if args.budget:
            summary = torch.ops.memoplan.plan(model._c, [x], budget=args.budget)
        else:
            summary = torch.ops.memoplan.plan(model._c, [x])
        memory = torch.ops.memoplan.module_memory(model._c)
        say("planned", slab_bytes=summary["slab_bytes"], weight_bytes=memory["weight_bytes"])
        wait("run")
        weight_files = []
        if args.weights_dir:
            weight_files = [os.path.join(args.weights_dir, f) for f in os.listdir(args.weights_dir)]
        times, faults = [], []
        out = None
        for _ in range(args.passes):
            if args.cache == "cold":
                for path in weight_files:
                    fd = os.open(path, os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
            before = majflt()
            start = time.perf_counter()
            out = model(x)
            times.append((time.perf_counter() - start) * 1e3)
            faults.append(majflt() - before)
        torch.save(out, args.output)
        say("done", ms=times, majflt=faults)


# ---- the parent ----

class Cgroup:
    def __init__(self):
        self.path = os.path.join(CGROUP_ROOT, "memoplan-budget-%d" % os.getpid())
        os.mkdir(self.path)

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def number(self, name):
        return int(self.read(name).split()[0])

    def oom_kills(self):
        for line in self.read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def remove(self):
        try:
            self.write("memory.force_empty", 0)
        except OSError:
            pass
        os.rmdir(self.path)


def one_run(args, cgroup, model, budget, cache, limit_fn, stock_output):
    """Runs one child; returns its record."""
    weights_dir = tempfile.mkdtemp(prefix="memoplan-cgroup-weights-")
    output = os.path.join(weights_dir, "out.pt")
    command = [sys.executable, os.path.abspath(__file__), "--child", "--model", model,
               "--shape", args.shape, "--budget", str(budget), "--cache", cache,
               "--passes", str(args.passes), "--lib", args.lib, "--output", output,
               "--weights-dir", weights_dir if budget else ""]
    env = dict(os.environ, MEMOPLAN_WEIGHTS_DIR=weights_dir)
    cgroup.write("memory.limit_in_bytes", -1)
    kills_before = cgroup.oom_kills()
    record = {"model": model, "config": "budget %d%%" % args.percent if budget else "stock",
              "budget_bytes": budget, "cache": cache, "limit_at": args.limit_at}
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)
    cgroup.write("cgroup.procs", proc.pid)

    def send(tag):
        proc.stdin.write(tag + "\n")
        proc.stdin.flush()

    def receive(tag):
        line = proc.stdout.readline()
        if not line:
            return None
        got = json.loads(line)
        assert got["tag"] == tag, got
        return got

    try:
        send("start")
        receive("runtime")
        baseline = cgroup.number("memory.usage_in_bytes")
        limit = limit_fn(baseline)
        if limit > 0 and args.baseline:
            limit = limit - baseline + args.baseline
        record.update(baseline_bytes=baseline, limit_bytes=limit,
                      limit_baseline_bytes=args.baseline or baseline)
        if args.limit_at == "start":
            cgroup.write("memory.limit_in_bytes", limit)
            cgroup.write("memory.max_usage_in_bytes", 0)
        send("go")
        planned = receive("planned")
        if planned is None:
            raise EOFError("died loading or planning")
        record["peak_before_limit_bytes"] = cgroup.number("memory.max_usage_in_bytes")
        if args.limit_at == "after-plan":
            try:
                cgroup.write("memory.limit_in_bytes", limit)
                record["limit_set"] = True
            except OSError as e:  # EBUSY: more than the kernel could reclaim
                record["limit_set"] = False
                record["limit_error"] = e.strerror
            cgroup.write("memory.max_usage_in_bytes", 0)
        send("run")
        done = receive("done")
        if done is None:
            raise EOFError("died in its passes")
        ms = sorted(done["ms"])
        q = statistics.quantiles(ms, n=4)
        record.update(ms_median=statistics.median(ms), ms_q1=q[0], ms_q3=q[2],
                      majflt_per_pass=statistics.mean(done["majflt"]))
        import torch
        got = torch.load(output)
        record["identical"] = bool(stock_output is not None and torch.equal(got, stock_output))
        record["output"] = got
    except (EOFError, BrokenPipeError) as e:
        record["died"] = str(e)
    finally:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        record["returncode"] = proc.wait(timeout=600)
        record["oom_kills"] = cgroup.oom_kills() - kills_before
        record["failcnt"] = cgroup.number("memory.failcnt")
        record["peak_under_limit_bytes"] = cgroup.number("memory.max_usage_in_bytes")
        cgroup.write("memory.failcnt", 0)
        subprocess.run(["rm", "-rf", weights_dir])
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model")
    parser.add_argument("--models", nargs="+", default=["resnet18"])
    parser.add_argument("--shape", default="1x3x224x224")
    parser.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--cache", default="warm", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("--weights-dir", default="", help=argparse.SUPPRESS)
    parser.add_argument("--percent", type=float, default=25,
                        help="the budget: this share of the weights plus the stock slab")
    parser.add_argument("--slack-mib", type=int, nargs="+", default=[48, 96],
                        help="added to the limit: the interpreter, graphs, oneDNN and OpenMP "
                             "buffers, input and output (one table row set per value)")
    parser.add_argument("--limit-at", choices=["after-plan", "start"], default="after-plan")
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lib", default="build/torch_ext/libmemoplan_torch.so")
    parser.add_argument("--out", help="writes the records (JSON lines) here")
    args = parser.parse_args()
    args.baseline = 0
    if args.child:
        return child(args)
    if os.geteuid() != 0:
        sys.exit("needs root: it makes a memory cgroup")
    cgroup = Cgroup()
    records = []
    try:
        for model in args.models:
            # Unlimited runs, stock first: the reference output and latencies.
            args.baseline = 0
            unlimited = one_run(args, cgroup, model, 0, "warm", lambda base: -1, None)
            stock_output = unlimited.pop("output")
            # The runtime's baseline: the first run's in a fresh group, every page it touched charged
            # to it (later runs find shared pages charged already and read lower, by up to 40 MiB).
            args.baseline = unlimited["baseline_bytes"]
            # The stock plan's slab and the weights: what the budget is a share of.
            probe = subprocess.run(
                [sys.executable, "-c",
                 "import torch,sys; torch.set_num_threads(1); "
                 "torch.ops.load_library(sys.argv[1]); m=torch.jit.load(sys.argv[2]).eval(); "
                 "x=torch.randn([int(d) for d in sys.argv[3].split('x')]);\n"
                 "with torch.inference_mode(): s=torch.ops.memoplan.plan(m._c,[x]); "
                 "w=torch.ops.memoplan.module_memory(m._c)['weight_bytes']\n"
                 "print(s['slab_bytes'], w)",
                 os.path.join(ROOT, args.lib), os.path.join(ROOT, "models", model + ".pt"),
                 args.shape], capture_output=True, text=True, check=True)
            slab, weights = (int(v) for v in probe.stdout.split())
            footprint = slab + weights
            budget = int(footprint * args.percent / 100)
            print("%s: weights %.1f MiB, stock slab %.1f MiB, budget %.1f MiB (%g%%)"
                  % (model, weights / MIB, slab / MIB, budget / MIB, args.percent), flush=True)
            for r in range(args.rounds):
                for slack in [None] + args.slack_mib:  # None: no limit
                    for cache in ("cold", "warm"):
                        for b in (budget, 0):
                            if slack is None and cache == "cold" and b == 0:
                                continue  # cold means nothing to stock's heap weights
                            rec = one_run(args, cgroup, model, b, cache,
                                          (lambda base: -1) if slack is None else
                                          (lambda base, s=slack: base + budget + s * MIB),
                                          stock_output)
                            rec.pop("output", None)
                            rec.update(round=r, weights_bytes=weights, stock_slab_bytes=slab,
                                       slack_mib=slack)
                            records.append(rec)
                            print(json.dumps(rec), flush=True)
    finally:
        cgroup.remove()
    if args.out:
        with open(args.out, "w") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
    table(records)


def table(records):
    print("\n| model | config | cache | limit MiB (baseline + budget + slack) | limit set | OOM kills "
          "| failcnt | peak under limit MiB | ms median [q1, q3] | major faults / pass "
          "| outputs identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    groups = {}
    for r in records:
        groups.setdefault((r["model"], r["slack_mib"] or 0, r["config"], r["cache"]), []).append(r)
    for (model, slack, config, cache), runs in sorted(groups.items()):
        ok = [r for r in runs if "ms_median" in r]
        ms = statistics.median(r["ms_median"] for r in ok) if ok else None
        limit = ("none" if not slack else
                 "%.0f (%.0f + %.0f + %d)" % (runs[0]["limit_bytes"] / MIB,
                                              runs[0]["limit_baseline_bytes"] / MIB,
                                              (runs[0]["budget_bytes"] or 0) / MIB, slack))
        print("| %s | %s | %s | %s | %d/%d | %d | %d | %s | %s | %s | %s |"
              % (model, config, cache, limit,
                 sum(1 for r in runs if r.get("limit_set", True)), len(runs),
                 sum(r["oom_kills"] for r in runs), sum(r["failcnt"] for r in runs),
                 "%.0f" % (max(r["peak_under_limit_bytes"] for r in runs) / MIB),
                 "%.1f [%.1f, %.1f]" % (ms, statistics.median(r["ms_q1"] for r in ok),
                                        statistics.median(r["ms_q3"] for r in ok)) if ok else
                 "died: " + runs[0].get("died", "?"),
                 "%.1f" % statistics.median(r["majflt_per_pass"] for r in ok) if ok else "-",
                 "%d/%d" % (sum(1 for r in ok if r["identical"]), len(runs))))


if __name__ == "__main__":
    sys.exit(main())
