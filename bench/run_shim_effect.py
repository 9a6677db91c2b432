#!/usr/bin/python3
"""How much of a real program the LD_PRELOAD shim plans, and what it costs (issue 17's table).

    bench/run_shim_effect.py                                   # every cell, 2 rounds
    bench/run_shim_effect.py --models resnet18 --modes eager --rounds 1
    bench/run_shim_effect.py --resume bench/results/shim_effect_<stamp>
    bench/run_shim_effect.py --report bench/results/shim_effect_<stamp> [--doc docs/results/SHIM.md]

A cell is a zoo model, a mode (eager: the torch.nn module; traced: it through torch.jit.trace;
scripted: the zoo's TorchScript file; frozen: torch.jit.freeze of it scripted, saved and loaded),
intra-op threads and inference threads; `--work` cells also do a request's parsing and a response's
formatting between passes (bench/shim_effect_workload.py). Each configuration of a cell runs in a
process of its own: glibc, jemalloc, tcmalloc and mimalloc (LD_PRELOAD) and the shim
(MEMOPLAN_CONF=stats_print:true, whatever else --shim-conf says; `shim+glibc`: with fallback:next,
glibc behind it; `shim+ALLOCATOR`: that allocator preloaded after the shim); OPENBLAS_NUM_THREADS=1 in all
(OpenBLAS's own threads would oversubscribe the cores). Each process runs --passes
passes per inference thread; the latency of a process is the median of its last half of passes
(all threads), its warm-up the time of its first ten passes in units of that median (10.0: none),
and its memory ru_maxrss. For the shim the statistics it prints at exit give the share
of steady-state requests of min_size or more served from the slab and the fallbacks by reason;
outputs (a digest of the last pass's output) must equal glibc's.
Order: round-major; in a round a cell's configurations run back to back, rotated by one per round
and cell. A process starts only when the 1-minute load average is at most --max-load (the core
count); the load at each start is kept. Standard library only; the zoo must exist
(/usr/bin/python3 bench/models/make_zoo.py --only ...).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_best_alloc import wait_for_load  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = "/usr/lib/x86_64-linux-gnu"
TORCH_PYTHON = "/usr/bin/python3"
# mimalloc 2 on Debian 12, mimalloc 3 on Debian 13 (scripts/debian13.sh).
MIMALLOC = next((f"{LIB}/{n}" for n in ("libmimalloc.so.2", "libmimalloc.so.3")
                 if os.path.exists(f"{LIB}/{n}")), f"{LIB}/libmimalloc.so.2")
ALLOCATORS = {"glibc": "", "jemalloc": f"{LIB}/libjemalloc.so.2",
              "tcmalloc": f"{LIB}/libtcmalloc_minimal.so.4", "mimalloc": MIMALLOC}
DEFAULTS = dict(models="resnet18,mobilenet_v2,efficientnet_b0,bert_encoder,gpt_decoder",
                modes="eager,scripted", cells="1x1,2x1,1x2,1x1w", rounds=2, passes=100)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for key, value in DEFAULTS.items():
        p.add_argument("--" + key, type=type(value), default=value)
    p.add_argument("--configs", default="glibc,jemalloc,tcmalloc,mimalloc,shim")
    p.add_argument("--shim-conf", default="")
    p.add_argument("--build-dir", default="build")
    p.add_argument("--max-load", type=float, default=float(os.cpu_count()))
    p.add_argument("--wait-s", type=float, default=300.0)
    p.add_argument("--run-dir")
    p.add_argument("--resume")
    p.add_argument("--report", help="only write the report of this run directory")
    p.add_argument("--doc", help="with --report: replace the table in this markdown file")
    p.add_argument("--shim-config", default="shim",
                   help="with --report: the shim configuration to compare (shim, shim+mimalloc...)")
    args = p.parse_args()
    if args.resume:
        for key, value in json.load(open(os.path.join(args.resume, "settings.json"))).items():
            setattr(args, key, value)
        args.run_dir = args.resume
    return args


def cells_of(args):
    """(model, mode, intra, infer, work) for every cell: INTRAxINFER, 'w' for other work."""
    out = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            for spec in args.cells.split(","):
                m = re.fullmatch(r"(\d+)x(\d+)(w?)", spec)
                out.append((model, mode, int(m.group(1)), int(m.group(2)), bool(m.group(3))))
    return out


def cell_name(cell):
    model, mode, intra, infer, work = cell
    return f"{model}_{mode}_i{intra}_t{infer}{'_work' if work else ''}"


def environment(args, config):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("MEMOPLAN_CONF", None)
    # Debian's torch uses OpenBLAS built with pthreads: its own threads on top of the intra-op
    # ones oversubscribe the cores (the BERT-like encoder at two intra-op threads: 510 ms a pass
    # against 144 at one). One OpenBLAS thread, as a server would set.
    env["OPENBLAS_NUM_THREADS"] = "1"
    if config in ALLOCATORS:
        if ALLOCATORS[config]:
            env["LD_PRELOAD"] = ALLOCATORS[config]
    else:  # shim (its default fallback), shim+glibc (fallback:next) or shim+ALLOCATOR (composed)
        shim = os.path.join(ROOT, args.build_dir, "interpose", "libmemoplan_preload.so")
        behind = config.split("+")[1] if "+" in config else ""
        env["LD_PRELOAD"] = " ".join(x for x in (shim, ALLOCATORS.get(behind, "")) if x)
        conf = ["stats_print:true", args.shim_conf, "fallback:next" if behind == "glibc" else ""]
        env["MEMOPLAN_CONF"] = ",".join(x for x in conf if x)
    return env


def run(args):
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_dir = args.run_dir or os.path.join(ROOT, "bench", "results", f"shim_effect_{stamp}")
    os.makedirs(os.path.join(run_dir, "raw"), exist_ok=True)
    settings = {k: getattr(args, k) for k in ("models", "modes", "cells", "rounds", "passes",
                                              "configs", "shim_conf", "build_dir", "max_load",
                                              "wait_s")}
    json.dump(settings, open(os.path.join(run_dir, "settings.json"), "w"), indent=1)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    torch_version = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    json.dump({"commit": commit, "cpu": cpu, "cores": os.cpu_count(), "torch": torch_version,
               "command": " ".join(sys.argv)},
              open(os.path.join(run_dir, "machine.json"), "w"), indent=1)
    configs = args.configs.split(",")
    cells = cells_of(args)
    for r in range(args.rounds):
        for index, cell in enumerate(cells):
            shift = (r + index) % len(configs)
            for config in configs[shift:] + configs[:shift]:
                tag = f"r{r}_{cell_name(cell)}_{config}"
                out = os.path.join(run_dir, "raw", tag + ".json")
                if os.path.exists(out):
                    continue
                if not wait_for_load(args):
                    sys.exit(f"run_shim_effect: load above {args.max_load}; stopped before {tag}")
                load = os.getloadavg()[0]
                model, mode, intra, infer, work = cell
                argv = [TORCH_PYTHON, os.path.join(ROOT, "bench", "shim_effect_workload.py"),
                        model, mode, str(args.passes), str(intra), str(infer), out + ".part"]
                if work:
                    argv.append("--work")
                started = time.time()
                proc = subprocess.run(argv, env=environment(args, config), cwd=ROOT,
                                      capture_output=True, text=True)
                with open(os.path.join(run_dir, "raw", tag + ".err"), "w") as f:
                    f.write(proc.stderr)
                if proc.returncode != 0 or not os.path.exists(out + ".part"):
                    print(f"{tag}: exit {proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                result = json.load(open(out + ".part"))
                result.update({"config": config, "round": r, "load": load,
                               "wall_s": round(time.time() - started, 1)})
                result.update(shim_stats(proc.stderr))
                json.dump(result, open(out, "w"))
                os.remove(out + ".part")
                print(f"{tag}: {summary(result)}", flush=True)
    return run_dir


def shim_stats(text):
    """The numbers of the shim's exit statistics (empty when it printed none). Only the last
    process's: torch.compile's compile workers are processes of their own and print theirs first."""
    stats = {}
    starts = [m.start() for m in re.finditer(r"^memoplan: options ", text, re.M)]
    if len(starts) > 1:
        text = text[starts[-1]:]
    m = re.search(r"requests of min_size or more (\d+): in steady state (\d+) \(escaping (\d+)\), "
                  r"before it \(profiling, warm-up\) (\d+)(?: \(of them under plans later "
                  r"re-detected (\d+)\))?, outside marked passes (\d+), on threads that plan "
                  r"nothing (\d+)", text)
    if m:
        keys = ("requests", "steady", "steady_escaping", "before", "retracted", "outside",
                "unplanned")
        stats.update({k: int(v or 0) for k, v in zip(keys, m.groups())})
    m = re.search(r"planned ([0-9.]+)% of (\d+) steady-state requests", text)
    if m:
        stats["served_percent"] = float(m.group(1))
    m = re.search(r"steady-state hits (\d+), steady-state fallbacks (\d+)", text)
    if m:
        stats["steady_hits"], stats["steady_fallbacks"] = map(int, m.groups())
    m = re.search(r"memoplan: fallbacks (.*)", text)
    if m:
        stats["fallbacks"] = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", m.group(1))}
    for key in ("plans", "redetections", "plan failures"):
        m = re.search(key + r" (\d+)", text)
        if m:
            stats[key.replace(" ", "_")] = int(m.group(1))
    m = re.search(r"slab bytes (\d+)(?: \((\d+) of them for escaping blocks\))?, lower bound (\d+)",
                  text)
    if m:
        stats["slab_bytes"], stats["lower_bound_bytes"] = int(m.group(1)), int(m.group(3))
        stats["escaping_bytes"] = int(m.group(2) or 0)
    return stats


def latency(result):
    """Median of the last half of every thread's passes, and the warm-up: the first ten passes'
    time in units of that median, worst thread (10.0: no warm-up cost)."""
    tail = [t for times in result["times_ms"] for t in times[len(times) // 2:]]
    median = statistics.median(tail)
    warm = max(sum(times[:10]) / median for times in result["times_ms"])
    return median, warm


def paired(shim_rows, other_rows):
    """The shim's latency over another configuration's in the same round: median over the rounds
    both ran, min, max (None when no round has both)."""
    other = {r["round"]: latency(r)[0] for r in other_rows}
    ratios = [latency(r)[0] / other[r["round"]] for r in shim_rows if r["round"] in other]
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios)


def summary(result):
    median, warm = latency(result)
    text = f"{median:.2f} ms, first 10 passes {warm:.1f} medians, {result['maxrss_kib'] // 1024} MiB"
    if "steady" in result:
        text += f", served {share(result):.1f}%"
    return text


def share(result):
    """The shim's verdict (steady-state requests served), as it printed it."""
    if "served_percent" in result:
        return result["served_percent"]
    return 100.0 * result.get("steady_hits", 0) / max(1, result.get("steady", 0))


def calibration(by_cell, shim_config):
    """What "level with the best" can mean in this run: every configuration (the four allocators
    and the shim) against the best of the other four in the same cells, so that each faces the
    same selection (the per-cell minimum of four noisy medians favours the field over any one),
    and the shim against each allocator alone."""
    def cell_median(rs):
        return statistics.median(latency(r)[0] for r in rs)

    def cell_rss(rs):
        return statistics.median(r["maxrss_kib"] for r in rs) / 1024
    field = list(ALLOCATORS) + [shim_config]
    control, head_to_head = [], []
    for name in field:
        ratios, above_mib = [], []
        for configs in by_cell.values():
            others = [c for c in field if c != name and c in configs]
            if name in configs and len(others) == len(field) - 1:
                ratios.append(cell_median(configs[name]) /
                              min(cell_median(configs[c]) for c in others))
                above_mib.append(cell_rss(configs[name]) -
                                 min(cell_rss(configs[c]) for c in others))
        # Issue 53's bars, met by each configuration against the other four: latency at least
        # 0.98 of the best (a ratio of 1/0.98 or less), RSS at or below the lowest, 5 MiB above.
        if ratios:
            control.append(f"{name} {statistics.geometric_mean(ratios):.3f} "
                           f"({sum(r > 1.10 for r in ratios)} cells above 1.10, "
                           f"{sum(r <= 1 / 0.98 for r in ratios)} of {len(ratios)} within 0.98 "
                           f"of the best; RSS at or below the lowest in "
                           f"{sum(m <= 0 for m in above_mib)}, over 5 MiB above in "
                           f"{sum(m > 5 for m in above_mib)})")
        pairs = [cell_median(configs[shim_config]) / cell_median(configs[name])
                 for configs in by_cell.values() if shim_config in configs and name in configs]
        if pairs and name != shim_config:
            head_to_head.append(f"{name} {statistics.geometric_mean(pairs):.3f}")
    return [f"Control: each configuration against the best of the other four in the same cells "
            f"(geomean): {'; '.join(control)}. The shim against each allocator alone (geomean of "
            f"the cell medians' ratios): {'; '.join(head_to_head)}."]


def report(run_dirs, doc=None, shim_config="shim"):
    """The table of one run, or of several (comma-separated: e.g. the CNN and the transformer
    cells run apart); written to the first run's directory."""
    run_dirs = run_dirs.split(",")
    rows, runs = [], []
    for run_dir in run_dirs:
        raw = os.path.join(run_dir, "raw")
        for f in sorted(os.listdir(raw)):
            if not f.endswith(".json"):
                continue
            row = json.load(open(os.path.join(raw, f)))
            err = os.path.join(raw, f[:-len(".json")] + ".err")
            if os.path.exists(err):  # the statistics as the shim printed them, parsed anew
                row.update(shim_stats(open(err).read()))
            rows.append(row)
        settings = json.load(open(os.path.join(run_dir, "settings.json")))
        machine = json.load(open(os.path.join(run_dir, "machine.json")))
        rounds = len({f.split("_", 1)[0] for f in os.listdir(raw) if f.endswith(".json")})
        runs.append(f"`{os.path.relpath(run_dir, ROOT)}` at commit {machine['commit']} "
                    f"({machine['cpu']}, {machine['cores']} cores"
                    f"{', PyTorch ' + machine['torch'] if machine.get('torch') else ''}; "
                    f"{settings['models']}: "
                    f"{rounds} round{'s' if rounds > 1 else ''})")
    by_cell = {}
    for row in rows:
        cell = (row["model"], row["mode"], row["intra"], row["infer"], row.get("work", False))
        by_cell.setdefault(cell, {}).setdefault(row["config"], []).append(row)
    lines = [
        f"Run{'s' if len(runs) > 1 else ''} {'; '.join(runs)}: {settings['passes']} passes per "
        f"inference thread, one process per configuration and round. Latency: median over rounds "
        f"of each process's median of its last half of passes (min..max over rounds); best: the "
        f"fastest of glibc, jemalloc, tcmalloc and mimalloc in that cell by that median. Warm-up: "
        f"the first ten passes' time in units of the process's median (10.0: no warm-up cost; "
        f"worst thread, median over rounds). Served: steady-state requests of min_size (4 KiB) "
        f"or more served from a slab (the shim's exit statistics; an escaping block served from "
        f"its slab place counts as served, one left to the fallback as not). Paired: the shim's "
        f"latency over that best allocator's in the same round (their processes ran back to "
        f"back), median over rounds (min..max): drift between rounds cancels. RSS: ru_maxrss, "
        f"median over rounds.",
        "",
        "| cell | served | steady requests | fallbacks (whole run, by reason) | shim ms | best ms (who) | shim/best "
        "| paired | warm-up shim / best | RSS shim / lowest MiB | outputs |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios, paired_ratios = [], []
    for cell in sorted(by_cell, key=lambda c: (DEFAULTS["models"].split(",").index(c[0])
                                               if c[0] in DEFAULTS["models"] else 99, c[1:])):
        configs = by_cell[cell]
        shim_rows = configs.get(shim_config, [])
        if not shim_rows:
            continue
        def med(rs):
            values = [latency(r)[0] for r in rs]
            return statistics.median(values), min(values), max(values)
        base = {c: med(rs) for c, rs in configs.items() if c in ALLOCATORS}
        if not base:
            continue
        best = min(base, key=lambda c: base[c][0])
        shim_ms = med(shim_rows)
        ratio = shim_ms[0] / base[best][0]
        ratios.append(ratio)
        pair = paired(shim_rows, configs[best])
        if pair:
            paired_ratios.append(pair[0])
        rss = {c: statistics.median(r["maxrss_kib"] for r in rs) / 1024
               for c, rs in configs.items()}
        lowest = min((c for c in rss if c in ALLOCATORS), key=lambda c: rss[c])
        served = statistics.median(share(r) for r in shim_rows)
        steady = statistics.median(r.get("steady", 0) for r in shim_rows)
        fb = {}
        for r in shim_rows:
            for k, v in r.get("fallbacks", {}).items():
                fb[k] = fb.get(k, 0) + v
        fallback_text = ", ".join(f"{k} {v // len(shim_rows)}" for k, v in fb.items() if v) or "0"
        reference = {d for r in configs.get("glibc", []) for d in r["digests"]}
        shim_digests = {d for r in shim_rows for d in r["digests"]}
        outputs = "same" if reference and shim_digests <= reference else "DIFFER"
        model, mode, intra, infer, work = cell
        name = f"{model} {mode} {intra}i/{infer}t{' +work' if work else ''}"
        warm = (statistics.median(latency(r)[1] for r in shim_rows),
                statistics.median(latency(r)[1] for r in configs[best]))
        pair_text = f"{pair[0]:.3f} ({pair[1]:.3f}..{pair[2]:.3f})" if pair else "-"
        lines.append(
            f"| {name} | {served:.1f}% | {steady:.0f} | {fallback_text} | {shim_ms[0]:.2f} "
            f"({shim_ms[1]:.2f}..{shim_ms[2]:.2f}) | {base[best][0]:.2f} ({best}) | {ratio:.3f} | "
            f"{pair_text} | "
            f"{warm[0]:.1f} / {warm[1]:.1f} | {rss[shim_config]:.0f} / {rss[lowest]:.0f} ({lowest}) | "
            f"{outputs} |")
    if ratios:
        geo = statistics.geometric_mean(ratios)
        lines += ["", f"Geomean shim/best over {len(ratios)} cells: {geo:.3f} (below 1: the shim "
                      f"is faster); cells above 1.10: {sum(r > 1.10 for r in ratios)}."]
        if paired_ratios:
            lines += [f"Paired per round: geomean {statistics.geometric_mean(paired_ratios):.3f}; "
                      f"within 0.98 of the best (1/0.98 or less) in "
                      f"{sum(r <= 1 / 0.98 for r in paired_ratios)} of {len(paired_ratios)} cells."]
        lines += [""]
        lines += calibration(by_cell, shim_config)
    if shim_config != "shim":
        behind = ("glibc (fallback:next)" if shim_config == "shim+glibc" else
                  "that allocator preloaded after it")
        lines.insert(0, f"Shim configuration compared: `{shim_config}` (the shim with {behind}).\n")
    text = "\n".join(lines) + "\n"
    name = "report.md" if shim_config == "shim" else f"report_{shim_config.replace('+', '_')}.md"
    with open(os.path.join(run_dirs[0], name), "w") as f:
        f.write(text)
    if doc:
        content = open(doc).read()
        begin, end = "<!-- shim_effect table -->", "<!-- /shim_effect table -->"
        if begin in content:
            head, rest = content.split(begin, 1)
            content = head + begin + "\n" + text + end + rest.split(end, 1)[1]
        else:
            content += f"\n{begin}\n{text}{end}\n"
        open(doc, "w").write(content)
    print(text)


def main():
    args = parse_args()
    if args.report:
        report(args.report, args.doc, args.shim_config)
        return
    run_dir = run(args)
    report(run_dir)


if __name__ == "__main__":
    main()
