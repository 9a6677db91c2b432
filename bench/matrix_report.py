#!/usr/bin/python3
"""Turns a run directory of bench/run_matrix.py into one CSV, Markdown tables and PNG plots.

    bench/matrix_report.py RUN_DIR                    # writes RUN_DIR/report.md and RUN_DIR/img/
    bench/matrix_report.py RUN_DIR --doc docs/results/TORCH.md --only-marked    # plots: RUN_DIR/img/

With --doc, the generated sections replace what lies between `<!-- BEGIN GENERATED: NAME -->`
and `<!-- END GENERATED: NAME -->` in that file (the hand-written text around them stays); a
section missing from the file is appended. Also writes bench/results/<run>.csv: every timing
process's rows with round, command and load average, machine information first as `#` lines.

Latency ratios: for each round, model, batch, size and thread count, the median pass time of a
configuration's process divided by the median of the jemalloc process of the same round (run
next to it); the table gives the mean of those per-round ratios +- their standard error
(sd / sqrt(rounds)). Plots need gnuplot (gnuplot-nox); without it the tables are still written.
"""
import argparse
import csv
import glob
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_matrix import BASELINE, CONFIGS, ROOT  # noqa: E402
from matrix_plots import heapmaps, plot_memory, plot_ratios  # noqa: E402
from matrix_stats import fmt_ratio, geomean, mean_se, num  # noqa: E402

SHIM_RE = {"plans": r"memoplan: passes \d+, plans (\d+)",
           "steady_hits": r"steady-state hits (\d+)",
           "steady_fallbacks": r"steady-state fallbacks (\d+)",
           "shim_slab_bytes": r"memoplan: slab bytes (\d+)"}


def read_rows(run_dir, kind):
    header = subprocess.run([os.path.join(ROOT, "build-bench", "bench", "torch_alloc_bench"),
                             "--header"], capture_output=True, text=True).stdout.strip()
    if not header:  # the bench is not built here: the header of the first run is all we need
        sys.exit("matrix_report: build-bench/bench/torch_alloc_bench --header gave nothing")
    fields = header.split(",")
    rows = []
    for out in sorted(glob.glob(os.path.join(run_dir, "raw", kind + "__*.out"))):
        tag = os.path.basename(out)[:-4]
        _, round_, config, model, batch, size = tag.split("__")
        meta = json.load(open(out[:-4] + ".meta"))
        err = open(out[:-4] + ".err").read()
        shim = {k: (int(m.group(1)) if (m := re.search(p, err)) else "")
                for k, p in SHIM_RE.items()}
        for line in open(out).read().splitlines():
            if not line.strip():
                continue
            row = dict(zip(fields, next(csv.reader([line]))))
            row.update(round=int(round_[1:]), batch=int(batch[1:]), size=int(size[1:]),
                       load1=meta["load1"], command=meta["command"], **shim)
            row["threads"] = int(row["threads"])
            rows.append(row)
    return fields, rows


class Matrix:
    def __init__(self, rows, configs):
        self.configs = [c for c in configs if any(r["config"] == c for r in rows)]
        self.by_key = {}
        for r in rows:
            key = (r["model"], r["batch"], r["size"], r["threads"], r["config"])
            self.by_key.setdefault(key, {})[r["round"]] = r
        self.points = sorted({k[:4] for k in self.by_key})
        self.models = list(dict.fromkeys(p[0] for p in self.points))

    def rows_of(self, point, config):
        return self.by_key.get(point + (config,), {})

    def ratios(self, point, config):
        base = self.rows_of(point, BASELINE)
        out = []
        for round_, r in self.rows_of(point, config).items():
            if round_ in base and num(base[round_]["median_ms"]):
                out.append(float(r["median_ms"]) / float(base[round_]["median_ms"]))
        return out

    def median_of(self, point, config, field):
        values = [num(r.get(field)) for r in self.rows_of(point, config).values()]
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None


def latency_tables(m):
    out = []
    for model in m.models:
        out.append(f"\n#### {model}\n")
        out.append("| batch | size | threads | jemalloc ms | " +
                   " | ".join(c for c in m.configs if c != BASELINE) + " | rounds |")
        out.append("|---" * (4 + len(m.configs)) + "|")
        for point in [p for p in m.points if p[0] == model]:
            base = m.median_of(point, BASELINE, "median_ms")
            cells = [fmt_ratio(*mean_se(m.ratios(point, c))) for c in m.configs if c != BASELINE]
            rounds = len(m.rows_of(point, BASELINE))
            out.append(f"| {point[1]} | {point[2]} | {point[3]} | "
                       f"{base:.1f} | " + " | ".join(cells) + f" | {rounds} |" if base else
                       f"| {point[1]} | {point[2]} | {point[3]} | — | " + " | ".join(cells) +
                       f" | {rounds} |")
    return "\n".join(out)


def summary_table(m):
    """Geometric mean over every batch and size of the mean per-round ratio, per thread count."""
    threads = sorted({p[3] for p in m.points})
    out = ["| model | config | " + " | ".join(f"{t} thr" for t in threads) + " |",
           "|---" * (2 + len(threads)) + "|"]
    for model in m.models:
        for c in m.configs:
            if c == BASELINE:
                continue
            cells = []
            for t in threads:
                pts = [p for p in m.points if p[0] == model and p[3] == t]
                g = geomean([mean_se(m.ratios(p, c))[0] for p in pts])
                cells.append(f"{g:.2f} ({len(pts)})" if g else "—")
            out.append(f"| {model} | {c} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def memory_table(m):
    out = ["| model | batch | size | threads | " + " | ".join(m.configs) + " |",
           "|---" * (4 + len(m.configs)) + "|"]
    for point in m.points:
        if point[3] not in (1, 4):
            continue
        cells = []
        for c in m.configs:
            hwm = m.median_of(point, c, "hwm_passes_kib")
            avg = m.median_of(point, c, "avg_rss_kib")
            cells.append(f"{hwm / 1024:.0f} / {avg / 1024:.0f}" if hwm and avg else "—")
        out.append(f"| {point[0]} | {point[1]} | {point[2]} | {point[3]} | " +
                   " | ".join(cells) + " |")
    return "\n".join(out)


def jemalloc_table(m):
    out = ["| model | batch | size | threads | config | mapped MiB (avg) | active MiB (avg) | "
           "mutex ops / pass | waits / pass | wait ms / pass | page faults / pass |",
           "|---" * 11 + "|"]
    for point in m.points:
        if point[1] != 1:
            continue
        for c in ("jemalloc", "jemalloc-thesis"):
            rows = list(m.rows_of(point, c).values())
            if not rows or not num(rows[0].get("je_mapped_avg_kib")):
                continue
            passes = [int(r["threads"]) * int(r["passes"]) for r in rows]
            per = lambda f: statistics.median(float(r[f]) / n for r, n in zip(rows, passes))
            out.append(
                f"| {point[0]} | {point[1]} | {point[2]} | {point[3]} | {c} | "
                f"{m.median_of(point, c, 'je_mapped_avg_kib') / 1024:.0f} | "
                f"{m.median_of(point, c, 'je_active_avg_kib') / 1024:.0f} | "
                f"{per('je_mutex_ops'):.0f} | {per('je_mutex_waits'):.2f} | "
                f"{per('je_mutex_wait_ms'):.3f} | "
                f"{m.median_of(point, c, 'minor_faults_per_pass'):.0f} |")
    return "\n".join(out)


def memoplan_table(m):
    out = ["| model | batch | size | graph-pass slab MiB / thread | lower bound MiB | "
           "slab / bound | graph-pass fallbacks | shim plans | shim steady hits | "
           "shim steady fallbacks |", "|---" * 10 + "|"]
    for model, batch, size in dict.fromkeys(p[:3] for p in m.points):
        pts = [p for p in m.points if p[:3] == (model, batch, size)]
        g = [r for p in pts for r in m.rows_of(p, "graph-pass").values()]
        s = {r["round"]: r for p in pts for r in m.rows_of(p, "shim").values()}.values()
        slab = [float(r["graph_slab_bytes"]) / r["threads"] for r in g
                if num(r.get("graph_slab_bytes"))]
        lb = [float(r["graph_lower_bound_bytes"]) for r in g if num(r.get("graph_lower_bound_bytes"))]
        fb = sum(int(r["graph_fallbacks"]) for r in g if num(r.get("graph_fallbacks")) is not None)
        cell = lambda key: sum(int(r[key]) for r in s if r.get(key) != "")
        slab_m = max(slab) if slab else None
        lb_m = max(lb) if lb else None
        out.append(f"| {model} | {batch} | {size} | "
                   f"{slab_m / 2**20:.2f} | {lb_m / 2**20:.2f} | {slab_m / lb_m:.3f} | {fb} | "
                   f"{cell('plans')} | {cell('steady_hits')} | {cell('steady_fallbacks')} |"
                   if slab_m and lb_m else f"| {model} | {batch} | {size} | — | — | — | {fb} | "
                   f"{cell('plans')} | {cell('steady_hits')} | {cell('steady_fallbacks')} |")
    return "\n".join(out)


def counts_table(rows, behind_rows):
    """One row per model and configuration (one thread; two threads count the same per thread)."""
    behind = {(r["model"], r["threads"]): r for r in behind_rows}
    out = ["| model | config | allocations / pass | frees / pass | MiB requested / pass | "
           "reaching the allocator behind the shim: calls / MiB per pass |", "|---" * 6 + "|"]
    for r in sorted(rows, key=lambda r: (r["model"], list(CONFIGS).index(r["config"]))):
        if num(r.get("allocs_per_pass")) is None or r["threads"] != 1:
            continue
        b = behind.get((r["model"], 1)) if r["config"] == "shim" else None
        passed = (f"{float(b['allocs_per_pass']):,.0f} / "
                  f"{float(b['bytes_per_pass']) / 2**20:.1f}" if b else "")
        out.append(f"| {r['model']} | {r['config']} | {float(r['allocs_per_pass']):,.0f} | "
                   f"{float(r['frees_per_pass']):,.0f} | "
                   f"{float(r['bytes_per_pass']) / 2**20:.1f} | {passed} |")
    return "\n".join(out)


def outputs_identical(rows):
    digests = {}
    for r in rows:
        digests.setdefault((r["model"], r["batch"], r["size"]), set()).add(r["output_fnv1a"])
    bad = [k for k, d in digests.items() if len(d) > 1]
    return (f"Outputs: the FNV-1a digest of the last output is identical in all {len(rows)} "
            f"timing rows of each model, batch and size." if not bad else
            f"Outputs: DIFFERENT digests for {bad}.")


def skipped_text(run_dir, settings):
    cal = json.load(open(os.path.join(run_dir, "calibration.json")))
    wanted = [int(t) for t in str(settings["threads"]).split(",")]
    lines = []
    for key, value in sorted(cal.items()):
        if value and len(value["threads"]) < len(wanted):
            left = [t for t in wanted if t not in value["threads"]]
            lines.append(f"{key.replace('__', ' ')} ({value['pass_ms']:.0f} ms per pass): "
                         f"{', '.join(map(str, left))} threads")
    if not lines:
        return "Every thread count of every model, batch and size was measured."
    return ("Left out (estimated phase time over the budget of "
            f"{settings['phase_budget_s']} s, the same for every configuration):\n\n- " +
            "\n- ".join(lines))


def planner_table(run_dir):
    path = os.path.join(run_dir, "planner.csv")
    if not os.path.exists(path):
        return "No planner stage in this run."
    lines = open(path).read().splitlines()
    command = lines[0][2:] if lines[0].startswith("#") else ""
    rows = list(csv.DictReader(lines[1:] if command else lines))
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    cell = {(r["trace"], r["strategy"]): r for r in rows}
    out = [f"`{command}`\n", "Slab / lower bound (planning ms); `*` = proven optimal.\n",
           "| trace | lower bound MiB | " + " | ".join(strategies) + " |",
           "|---" * (2 + len(strategies)) + "|"]
    for t in traces:
        lb = next(float(r["lower_bound_bytes"]) for r in rows if r["trace"] == t)
        cells = []
        for s in strategies:
            r = cell.get((t, s))
            if not r or r["error"]:
                cells.append("—")
                continue
            star = "*" if r["status"] == "optimal" else ""
            cells.append(f"{float(r['ratio']):.3f}{star} ({float(r['planning_ms']):.2g})")
        out.append(f"| {t} | {lb / 2**20:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def serve_section(run_dir):
    mds = sorted(glob.glob(os.path.join(run_dir, "serve_bench_*.md")))
    if not mds:
        return "No serving stage in this run."
    text = re.sub(r"^# .*\n", "", open(mds[-1]).read())  # its own title goes
    return re.sub(r"^## ", "#### ", text, flags=re.M)  # under this document's "### Serving"


def machine_text(run_dir, settings):
    info = json.load(open(os.path.join(run_dir, "machine.json")))
    s = info["sessions"][0]
    lines = [f"- CPU: {s['cpu']} ({s['simd']}), {s['cores']} cores, {s['memory_gib']} GiB, "
             f"kernel {s['kernel']}", "- packages: " + ", ".join(s["packages"])]
    for session in info["sessions"]:
        lines.append(f"- `{session['command']}` at commit {session['commit']}: load average "
                     f"{session['load_at_start']:.2f} at the start, "
                     f"{session.get('load_at_end', float('nan')):.2f} at the end")
    lines.append(f"- settings: {settings['rounds']} rounds, {settings['warmup']} warm-up passes "
                 f"per thread, {settings['timed_total']} timed passes per phase split over its "
                 f"threads (at least one each), phase budget {settings['phase_budget_s']} s")
    return "\n".join(lines)


def write_csv(run_dir, fields, rows, settings):
    name = os.path.basename(os.path.normpath(run_dir))
    path = os.path.join(ROOT, "bench", "results", name + ".csv")
    info = json.load(open(os.path.join(run_dir, "machine.json")))
    with open(path, "w", newline="") as f:
        for s in info["sessions"]:
            f.write(f"# {json.dumps(s)}\n")
        f.write(f"# settings {json.dumps(settings)}\n")
        w = csv.DictWriter(f, fieldnames=["round", "batch", "size"] + fields +
                           list(SHIM_RE) + ["load1", "command"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return os.path.relpath(path, ROOT)


def splice(doc_path, sections, only_marked=False):
    text = open(doc_path).read() if os.path.exists(doc_path) else ""
    for name, make_body in sections.items():
        begin, end = f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"
        marked = begin in text and end in text
        if only_marked and not marked:
            continue
        block = f"{begin}\n{make_body().strip()}\n{end}"
        if marked:
            text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
        else:
            text += f"\n\n## {name}\n\n{block}\n"
    with open(doc_path, "w") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--doc", help="a Markdown file whose generated sections to replace")
    p.add_argument("--img", help="where plots go (default RUN_DIR/img)")
    p.add_argument("--only-marked", action="store_true",
                   help="fill only the sections the document has markers for")
    p.add_argument("--memory-threads", type=int, default=0,
                   help="the phase the memory plots show (default: the most threads)")
    args = p.parse_args()
    run_dir = os.path.abspath(args.run_dir)
    settings = json.load(open(os.path.join(run_dir, "settings.json")))
    img_dir = os.path.abspath(args.img or os.path.join(run_dir, "img"))
    os.makedirs(img_dir, exist_ok=True)
    doc = os.path.abspath(args.doc) if args.doc else os.path.join(run_dir, "report.md")
    rel = os.path.relpath(img_dir, os.path.dirname(doc))
    fields, rows = read_rows(run_dir, "time")
    _, count_rows = read_rows(run_dir, "count")
    _, behind_rows = read_rows(run_dir, "countbehind")
    m = Matrix(rows, list(CONFIGS))
    csv_path = write_csv(run_dir, fields, rows, settings)
    run = os.path.relpath(run_dir, ROOT)
    # Each section is made only when it is written (plots and heap maps take a while).
    sections = {
        "machine": lambda: machine_text(run_dir, settings) +
        f"\n- raw: `{run}/`; all rows: `{csv_path}`" + f"\n- report: `bench/matrix_report.py {run}" +
        (f" --doc {os.path.relpath(doc, ROOT)} --img {os.path.relpath(img_dir, ROOT)}`"
         if args.doc else "`"),
        "latency summary": lambda: summary_table(m) + "\n\n" + plot_ratios(m, img_dir, rel) +
        "\n\n" + skipped_text(run_dir, settings) + "\n\n" + outputs_identical(rows),
        "latency matrix": lambda: latency_tables(m),
        "memory": lambda: memory_table(m) + "\n\n" + plot_memory(run_dir, img_dir, rel,
                                                                 args.memory_threads),
        "memoplan slabs": lambda: memoplan_table(m),
        "jemalloc": lambda: jemalloc_table(m),
        "allocator calls": lambda: counts_table(count_rows, behind_rows),
        "planner quality": lambda: planner_table(run_dir),
        "heap maps": lambda: heapmaps(img_dir, rel),
        "serving": lambda: serve_section(run_dir),
    }
    splice(doc, sections, args.only_marked)
    for f in glob.glob(os.path.join(img_dir, "*.dat")):
        os.remove(f)
    print(f"matrix_report: {os.path.relpath(doc, ROOT)}, {csv_path}, plots in "
          f"{os.path.relpath(img_dir, ROOT)}")


if __name__ == "__main__":
    main()
