"""Summarizes one run of bench/run_torch_alloc_bench.sh: raw CSV and markdown tables.

Usage: python3 torch_alloc_report.py RAW_DIR OUT.csv OUT.md (standard library only).
RAW_DIR holds one KIND__rROUND__CONFIG__MODEL__tTHREADS.{cmd,out,err} per process (KIND: time,
count = malloc counter first in LD_PRELOAD, behind = counter behind the shim), header.csv (the
bench's CSV header), machine.txt, configs.txt and models.txt (the order of the tables).
"""
import csv
import glob
import os
import re
import statistics
import sys

STAT_RE = {
    "shim_passes": r"memoplan: passes (\d+)",
    "plans": r" plans (\d+)",
    "plan_failures": r"plan failures (\d+)",
    "planned_hits": r"planned hits (\d+)",
    "steady_hits": r"steady-state hits (\d+)",
    "steady_fallbacks": r"steady-state fallbacks (\d+)",
    "not_planned": r"not_planned (\d+)",
    "escaping": r"escaping (\d+)",
    "overlap": r"overlap (\d+)",
    "alignment": r"alignment (\d+)",
    "guard_full": r"guard_full (\d+)",
    "slab_bytes": r"slab bytes (\d+)",
    "lower_bound": r"lower bound (\d+)",
    "passthrough": r"outside marked passes (\d+)",
}


def read_runs(raw):
    header = open(os.path.join(raw, "header.csv")).read().strip().split(",")
    runs = []
    for path in sorted(glob.glob(os.path.join(raw, "*.out"))):
        tag = os.path.basename(path)[:-4]
        kind, round_, config, model, threads = tag.split("__")
        lines = [l for l in open(path).read().splitlines() if l.strip()]
        if len(lines) != 1:
            sys.exit(f"torch_alloc_report: {path}: expected one CSV row, got {len(lines)}")
        row = {"kind": kind, "round": int(round_[1:])}
        row.update(dict(zip(header, next(csv.reader(lines)))))
        err = open(os.path.join(raw, tag + ".err")).read()
        row["stats_text"] = "\n".join(l for l in err.splitlines() if l.startswith("memoplan: ")
                                      and not l.startswith("memoplan: options"))
        for key, pattern in STAT_RE.items():
            m = re.search(pattern, err) if row["stats_text"] else None
            row[key] = int(m.group(1)) if m else ""
        row["load1"] = open(os.path.join(raw, tag + ".load")).read().strip()
        row["command"] = open(os.path.join(raw, tag + ".cmd")).read().strip()
        runs.append(row)
    return header, runs


def write_csv(path, machine, header, runs):
    fields = ["kind", "round"] + header + list(STAT_RE) + ["load1", "command"]
    with open(path, "w", newline="") as f:
        for line in machine:
            f.write("# " + line + "\n")
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in runs:
            w.writerow(r)


def fmt_ms(v):
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def mib(kib_values):
    return f"{statistics.median(kib_values) / 1024:.0f}"


def summarize(machine, runs, order, order_models):
    models = [m for m in order_models if any(r["model"] == m for r in runs)]
    out = ["# LibTorch forward passes under each allocator", "", "Machine and run:", ""]
    out += ["    " + line for line in machine] + [""]
    out += ["Latency: median over the rounds of each process's median per-pass latency (all its "
            "threads' timed passes pooled), [min..max] of those medians, ms. Ratio: to glibc, "
            "same model and threads; in parentheses the ratio of the fastest processes' medians, "
            "less sensitive to other processes on the machine. Page faults: the worker threads' "
            "minor page faults per timed pass (median over the rounds). Peak RSS: VmHWM reset "
            "after loading the model (the peak while the passes ran; in parentheses how much it "
            "grew over the RSS after loading) / ru_maxrss (the whole process), medians, MiB. "
            "Calls per pass (one thread's pass; malloc counter first in LD_PRELOAD, separate "
            "runs): allocations / frees. To allocator: allocations (and MiB requested) that reach "
            "the allocator; behind the shim, those it does not serve from its slab (counter "
            "behind it). Shim: steady-state hits / steady-state fallbacks, summed over the "
            "timing processes.", ""]

    def cell(config, model, threads, kind="time"):
        return [r for r in runs if r["config"] == config and r["model"] == model
                and r["threads"] == threads and r["kind"] == kind]

    for model in models:
        thread_counts = sorted({r["threads"] for r in runs if r["model"] == model}, key=int)
        first = next(r for r in runs if r["model"] == model)
        out += [f"## {model} (input {first['input']})", ""]
        out.append("| threads | config | latency ms | ratio (of mins) | page faults per pass "
                   "| peak RSS MiB: passes (+ over loaded) / process "
                   "| allocs / frees per pass | to allocator: allocs (MiB) per pass "
                   "| shim hits / fallbacks |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for threads in thread_counts:
            glibc = [float(r["median_ms"]) for r in cell("glibc", model, threads)]
            base = statistics.median(glibc) if glibc else None
            for config in order:
                timed = cell(config, model, threads)
                if not timed:
                    continue
                meds = [float(r["median_ms"]) for r in timed]
                mm = statistics.median(meds)
                latency = f"{fmt_ms(mm)} [{fmt_ms(min(meds))}..{fmt_ms(max(meds))}] n={len(meds)}"
                ratio = f"{mm / base:.2f}x ({min(meds) / min(glibc):.2f}x)" if base else "-"
                faults = statistics.median(float(r["minor_faults_per_pass"]) for r in timed)
                grown = [int(r["hwm_passes_kib"]) - int(r["rss_after_load_kib"]) for r in timed]
                rss = (f"{mib([int(r['hwm_passes_kib']) for r in timed])} "
                       f"(+{mib(grown)}) / {mib([int(r['maxrss_kib']) for r in timed])}")
                count = [r for r in cell(config, model, threads, "count")
                         if r["allocs_per_pass"]]
                calls = (f"{float(count[0]['allocs_per_pass']):.0f} / "
                         f"{float(count[0]['frees_per_pass']):.0f}" if count else "-")
                # Without a shim every call reaches the allocator; behind the shim, only those
                # it does not serve from its slab.
                behind = [r for r in cell(config, model, threads, "behind")
                          if r["allocs_per_pass"]] or count
                reaching = (f"{float(behind[0]['allocs_per_pass']):.0f} "
                            f"({float(behind[0]['bytes_per_pass']) / 2**20:.2f})"
                            if behind else "-")
                shim = "-"
                if timed[0]["stats_text"]:
                    hits = sum(r["steady_hits"] or 0 for r in timed)
                    falls = sum(r["steady_fallbacks"] or 0 for r in timed)
                    shim = f"{hits} / {falls}"
                out.append(f"| {threads} | {config} | {latency} | {ratio} | {faults:.0f} | {rss} | "
                           f"{calls} | {reaching} | {shim} |")
        out.append("")

    out += ["## Outputs", ""]
    for model in models:
        sums = sorted({r["output_fnv1a"] for r in runs if r["model"] == model})
        verdict = "identical in every process" if len(sums) == 1 else "DIFFER between processes"
        out.append(f"- {model}: FNV-1a of the last output's bytes {', '.join(sums)}: {verdict} "
                   f"({sum(r['model'] == model for r in runs)} processes, every configuration).")
    out.append("")
    out += ["## The shim's statistics (stats_print) of each timing process", ""]
    out.append("| model | threads | config | processes | plans | plan failures | steady-state "
               "hits | steady-state fallbacks | not_planned / escaping / overlap / alignment / "
               "guard_full | slab bytes (lower bound) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    shim_rows = [r for r in runs if r["kind"] == "time" and r["stats_text"]]
    keys = sorted({(r["model"], r["threads"], r["config"]) for r in shim_rows},
                  key=lambda k: (order_models.index(k[0]), int(k[1]), order.index(k[2])))
    for model, threads, config in keys:
        rs = [r for r in shim_rows if (r["model"], r["threads"], r["config"]) ==
              (model, threads, config)]
        total = {k: sum(r[k] or 0 for r in rs) for k in STAT_RE}
        out.append(
            f"| {model} | {threads} | {config} | {len(rs)} | {total['plans']} | "
            f"{total['plan_failures']} | {total['steady_hits']} | {total['steady_fallbacks']} | "
            f"{total['not_planned']} / {total['escaping']} / {total['overlap']} / "
            f"{total['alignment']} / {total['guard_full']} | {rs[0]['slab_bytes']} "
            f"({rs[0]['lower_bound']}) |")
    out += ["", "Slab bytes are those of the first round's process (all threads' slabs). The "
            "stats lines of each configuration's first-round process:", "", "```"]
    for model, threads, config in keys:
        r = min((r for r in shim_rows if (r["model"], r["threads"], r["config"]) ==
                 (model, threads, config)), key=lambda r: r["round"])
        out.append(f"== {config} {model} threads={threads}: {r['command']}")
        out += r["stats_text"].splitlines()
    out.append("```")
    return "\n".join(out) + "\n"


def main():
    raw, csv_path, summary_path = sys.argv[1:4]
    machine = open(os.path.join(raw, "machine.txt")).read().splitlines()
    order = open(os.path.join(raw, "configs.txt")).read().split()
    header, runs = read_runs(raw)
    write_csv(csv_path, machine, header, runs)
    models = open(os.path.join(raw, "models.txt")).read().split()
    text = summarize(machine, runs, order, models)
    open(summary_path, "w").write(text)
    print(text)
    print(f"raw rows: {csv_path}\nsummary: {summary_path}\nraw output, stderr, commands: {raw}")


if __name__ == "__main__":
    main()
