#!/usr/bin/python3
"""Report of a bench/run_best_alloc.py run: the graph pass against each cell's best allocator.

    bench/best_alloc_report.py bench/results/best_alloc_<stamp>                    # markdown out
    bench/best_alloc_report.py bench/results/best_alloc_<stamp> --doc docs/results/TORCH.md

Per cell (model, batch, threads): every configuration's median pass time over the rounds (each
round's figure is the median of that process's timed passes); the best allocator is the one with
the lowest of those. Speed-up = best allocator's time / graph pass's time, per round (the two
processes of a round ran back to back), summarized by the median and the interquartile range of
the rounds' ratios: the graph pass wins a cell when the lower quartile is above 1, loses it when
the upper quartile is below 1, and ties otherwise (the ratios' spread is the noise). Peak RSS:
each configuration's median ru_maxrss over the rounds; the graph pass against the lowest of the
allocators. With --doc, the tables replace the part of the document between
`<!-- BEGIN GENERATED: best-alloc -->` and `<!-- END GENERATED: best-alloc -->` (--marker names
another region).
"""
import argparse
import csv
import glob
import json
import math
import os
import re
import statistics

GRAPHS = {"graph-pass-tcmalloc": "the graph pass paired with tcmalloc (memoplan's default "
                                   "pairing: the plan serves the tensors, tcmalloc the rest)",
          "graph-pass": "the graph pass alone (glibc serves everything but the planned tensors)"}


def quartiles(values):
    v = sorted(values)
    if len(v) == 1:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def load(run_dir):
    header = open(os.path.join(run_dir, "header.csv")).read().strip().split(",")
    rows = {}
    loads = []
    for out in sorted(glob.glob(os.path.join(run_dir, "raw", "*.out"))):
        tag = os.path.basename(out)[:-4]
        m = re.match(r"r(\d+)_(.+)_b(\d+)_t(\d+)_(.+)$", tag)
        lines = [l for l in open(out).read().splitlines() if l.count(",") > 10]
        if not m or not lines:
            continue
        values = dict(zip(header, next(csv.reader([lines[-1]]))))
        meta = json.load(open(out[:-4] + ".meta"))
        loads.append(meta["load1"])
        round_index, model, batch, threads, config = m.groups()
        rows[(model, int(batch), int(threads), config, int(round_index))] = {
            "ms": float(values["median_ms"]), "rss_kib": int(values["maxrss_kib"]),
            "load": meta["load1"]}
    return rows, loads


def analyze(rows, graph):
    cells = sorted({k[:3] for k in rows})
    results = []
    for cell in cells:
        configs = sorted({k[3] for k in rows if k[:3] == cell})
        rounds = sorted({k[4] for k in rows if k[:3] == cell})
        med = {c: statistics.median(rows[cell + (c, r)]["ms"] for r in rounds
                                    if cell + (c, r) in rows) for c in configs}
        rss = {c: statistics.median(rows[cell + (c, r)]["rss_kib"] for r in rounds
                                    if cell + (c, r) in rows) for c in configs}
        allocators = [c for c in configs if not c.startswith("graph-pass")]
        if graph not in configs or not allocators:
            continue
        best = min(allocators, key=lambda c: med[c])
        lowest = min(allocators, key=lambda c: rss[c])
        ratios = [rows[cell + (best, r)]["ms"] / rows[cell + (graph, r)]["ms"] for r in rounds
                  if cell + (best, r) in rows and cell + (graph, r) in rows]
        q1, q3 = quartiles(ratios)
        verdict = "won" if q1 > 1 else "lost" if q3 < 1 else "tied"
        results.append(dict(cell=cell, med=med, rss=rss, best=best, lowest=lowest,
                            ratio=statistics.median(ratios), q1=q1, q3=q3, verdict=verdict,
                            rounds=len(ratios),
                            max_load=max(rows[k]["load"] for k in rows if k[:3] == cell)))
    return results


def summary(results, graph):
    out = []
    geo = math.exp(statistics.mean(math.log(r["ratio"]) for r in results))
    counts = {v: sum(r["verdict"] == v for r in results) for v in ("won", "tied", "lost")}
    rss_below = sum(r["rss"][graph] < r["rss"][r["lowest"]] for r in results)
    out.append(f"**`{graph}`**, {GRAPHS[graph]}:")
    out.append("")
    out.append(f"- speed-up over each cell's best allocator: geomean "
               f"**{geo:.3f}** over {len(results)} cells; won {counts['won']}, tied "
               f"{counts['tied']}, lost {counts['lost']} (won: the rounds' lower quartile above "
               "1; lost: their upper quartile below 1)")
    out.append(f"- peak RSS below the lowest allocator's in {rss_below} of {len(results)} cells")
    out.append("")
    out.append(f"| model | batch | threads | best allocator | its ms | {graph} ms | speed-up "
               f"(IQR) | verdict | lowest-RSS allocator | its MiB | {graph} MiB | max load |")
    out.append("|---|---:|---:|---|---:|---:|---|---|---|---:|---:|---:|")
    for r in results:
        model, batch, threads = r["cell"]
        out.append(
            f"| {model} | {batch} | {threads} | {r['best']} | {r['med'][r['best']]:.2f} | "
            f"{r['med'][graph]:.2f} | {r['ratio']:.3f} ({r['q1']:.3f}-{r['q3']:.3f}) | "
            f"{r['verdict']} | {r['lowest']} | {r['rss'][r['lowest']] / 1024:.1f} | "
            f"{r['rss'][graph] / 1024:.1f} | {r['max_load']:.2f} |")
    out.append("")
    return out


def config_table(title, results, configs, cell_text):
    out = [title, "", "| model | batch | threads | " + " | ".join(configs) + " |",
           "|---|---:|---:|" + "---:|" * len(configs)]
    for r in results:
        model, batch, threads = r["cell"]
        out.append(f"| {model} | {batch} | {threads} | " +
                   " | ".join(cell_text(r, c) if c in r["med"] else "-" for c in configs) + " |")
    out.append("")
    return out


def markdown(by_graph, loads, run_dir):
    out = [f"- raw: `{os.path.relpath(run_dir)}/` (settings.json, machine.json, one "
           "`raw/<round>_<cell>_<config>.out/.err/.meta` per process)",
           f"- load average at the start of each process: {min(loads):.2f} to {max(loads):.2f}",
           ""]
    for graph, results in by_graph.items():
        out += summary(results, graph)
    results = next(iter(by_graph.values()))
    configs = sorted({c for r in results for c in r["med"]})
    out += config_table("Median pass time (ms) of every configuration:", results, configs,
                        lambda r, c: f"{r['med'][c]:.2f}")
    out += config_table("Peak RSS (MiB, median of the rounds) of every configuration:", results,
                        configs, lambda r, c: f"{r['rss'][c] / 1024:.1f}")
    return "\n".join(out).rstrip() + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--doc", help="a markdown file with the best-alloc markers to fill in")
    p.add_argument("--marker", default="best-alloc",
                   help="the generated region's name in --doc (default best-alloc)")
    args = p.parse_args()
    rows, loads = load(args.run_dir)
    by_graph = {g: analyze(rows, g) for g in GRAPHS}
    by_graph = {g: r for g, r in by_graph.items() if r}
    if not by_graph:
        raise SystemExit("best_alloc_report: no cell has both an allocator and the graph pass")
    text = markdown(by_graph, loads, args.run_dir)
    if not args.doc:
        print(text, end="")
        return
    doc = open(args.doc).read()
    begin = f"<!-- BEGIN GENERATED: {args.marker} -->"
    end = f"<!-- END GENERATED: {args.marker} -->"
    if begin not in doc or end not in doc:
        raise SystemExit(f"best_alloc_report: {args.doc} has no {begin} ... {end}")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    open(args.doc, "w").write(head + begin + "\n" + text + end + tail)


if __name__ == "__main__":
    main()
