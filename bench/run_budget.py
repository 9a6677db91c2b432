"""memoplan run --budget over budgets and page-cache states (issue 23): the latency-memory curve.

For each model, page cache (warm, cold) and budget (a share of the unbudgeted weights + slab),
`memoplan run --budget P% --json` runs once per round: the budgeted copy's median latency beside
the planned copy's (same process, interleaved passes), the peak resident bytes (slab + the most
weight pages resident at a step of 3 sampled passes), the planned peak, pinned / streamed bytes,
sliced layers, and whether the outputs were bit-identical in every pass. A budget below the
smallest feasible one is recorded with that smallest budget. Writes DIR/runs.jsonl, DIR/table.md
and DIR/budget_curve.png (gnuplot: budgeted/planned latency against peak resident MiB).

    /usr/bin/python3 bench/run_budget.py --out bench/results/budget_DATE
    /usr/bin/python3 bench/run_budget.py --models resnet50 --budgets 25 --caches warm --iters 5

Models come from models/ (bench/models/make_zoo.py makes them).
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(binary, model, budget, cache, iters):
    command = [binary, os.path.join(ROOT, "models", model + ".pt"), "--budget", "%g%%" % budget,
               "--page-cache", cache, "-n", str(iters), "--no-rss", "--json", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    record = {"model": model, "budget_percent": budget, "page_cache": cache,
              "command": "memoplan run " + " ".join(command[1:]).replace(ROOT + "/", "")}
    if done.returncode == 2 and "smallest feasible budget" in done.stderr:
        record["infeasible"] = True
        record["smallest_budget_bytes"] = int(re.search(r"in bytes: (\d+)", done.stderr).group(1))
        return record
    if done.returncode != 0:
        raise RuntimeError(" ".join(command) + " failed:\n" + done.stderr[-2000:])
    report = json.loads(done.stdout[done.stdout.index("{"):])
    report["model_file"] = report.pop("model")
    record.update(report)
    return record


def mib(n):
    return "%.1f" % (n / 2**20)


def table(runs):
    rows = ["| model | cache | budget | budget (MiB) | peak resident (MiB) | planned peak (MiB) | "
            "pinned (MiB) | streamed / pass (MiB) | work arena (MiB) | sliced | planned ms | "
            "budgeted ms | budgeted / planned | identical |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["model"], r["page_cache"], r["budget_percent"]) for r in runs},
                  key=lambda k: (k[0], k[1], -k[2]))
    for model, cache, budget in keys:
        group = [r for r in runs if (r["model"], r["page_cache"], r["budget_percent"]) ==
                 (model, cache, budget)]
        if group[0].get("infeasible"):
            rows.append("| %s | %s | %g%% | infeasible: smallest feasible %s MiB | | | | | | | | | | |"
                        % (model, cache, budget, mib(group[0]["smallest_budget_bytes"])))
            continue
        med = lambda key: statistics.median(r[key] for r in group)  # noqa: E731
        ratio = statistics.median(r["budgeted_ms"] / r["planned_ms"] for r in group)
        rows.append("| %s | %s | %g%% | %s | %s | %s | %s | %s | %s | %d | %.1f | %.1f | %.3f | %s |" % (
            model, cache, budget, mib(group[0]["budget_bytes"]), mib(max(
                r["peak_resident_bytes"] for r in group)), mib(group[0]["budget_planned_peak_bytes"]),
            mib(group[0]["budget_pinned_bytes"]), mib(group[0]["budget_streamed_bytes"]),
            mib(group[0].get("budget_work_bytes", 0)), group[0]["budget_sliced_groups"], med("planned_ms"), med("budgeted_ms"), ratio,
            all(r["outputs_identical"] for r in group)))
    return "\n".join(rows) + "\n"


def plot(runs, out_dir):
    """One line per model and page cache: per budget, the median over the rounds of the latency
    ratio against the highest sampled peak, labelled with the budget."""
    series = []
    colors = ["#1b6ac9", "#d0402b", "#2a9d3a", "#8a4fc2"]
    for index, model in enumerate(sorted({r["model"] for r in runs})):
        for cache in ("warm", "cold"):
            points = {}
            for r in runs:
                if r["model"] == model and r["page_cache"] == cache and not r.get("infeasible"):
                    points.setdefault(r["budget_percent"], []).append(r)
            if not points:
                continue
            path = os.path.join(out_dir, "curve_%s_%s.dat" % (model, cache))
            with open(path, "w") as f:
                for budget, group in sorted(points.items()):
                    f.write("%.2f %.4f %g\n" % (
                        max(r["peak_resident_bytes"] for r in group) / 2**20,
                        statistics.median(r["budgeted_ms"] / r["planned_ms"] for r in group),
                        budget))
            style = "lc rgb '%s' dt %d pt 7" % (colors[index % len(colors)],
                                                 1 if cache == "warm" else 2)
            series.append((path, "%s, %s page cache" % (model, cache), style))
    script = os.path.join(out_dir, "budget_curve.gp")
    with open(script, "w") as f:
        f.write('set terminal pngcairo size 1000,560 noenhanced font "sans,10"\n'
                'set output "%s"\n' % os.path.join(out_dir, "budget_curve.png"))
        f.write('set logscale x\nset xlabel "peak resident weights + activations (MiB, sampled)"\n'
                'set ylabel "latency, budgeted / unbudgeted (planned copy, same run)"\n'
                'set key outside right top\nset grid\nset yrange [0.9:*]\n')
        f.write("plot " + ", ".join(
            '"%s" using 1:2 with linespoints %s title "%s", "%s" using 1:2:(sprintf("%%g%%%%", $3))'
            ' with labels offset 0,0.8 font "sans,8" notitle' % (p, s, t, p)
            for p, t, s in series) + "\n")
    subprocess.run(["gnuplot", script], check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="vgg16,resnet50,bert_encoder")
    parser.add_argument("--budgets", default="100,50,25,10", help="percent of weights + slab")
    parser.add_argument("--caches", default="warm,cold")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "src", "memoplan-run"))
    parser.add_argument("--replot", action="store_true",
                        help="only remake table.md and the plot from OUT/runs.jsonl")
    parser.add_argument("--out", default=os.path.join(
        ROOT, "bench", "results", "budget_" + datetime.date.today().strftime("%Y%m%d")))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    runs = []
    if args.replot:
        with open(os.path.join(args.out, "runs.jsonl")) as log:
            runs = [json.loads(line) for line in log]
        for r in runs:  # runs logged before the report's "model" became "model_file"
            r["model"] = os.path.basename(r["model"])[:-3] if r["model"].endswith(".pt") else r["model"]
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write(table(runs))
        plot(runs, args.out)
        print(table(runs))
        return
    with open(os.path.join(args.out, "runs.jsonl"), "w") as log:
        for round_index in range(args.rounds):
            for model in args.models.split(","):
                for cache in args.caches.split(","):
                    for budget in (float(b) for b in args.budgets.split(",")):
                        record = run_once(args.binary, model, budget, cache, args.iters)
                        record["round"] = round_index
                        runs.append(record)
                        log.write(json.dumps(record) + "\n")
                        log.flush()
                        print(model, cache, "%g%%" % budget,
                              "infeasible" if record.get("infeasible") else
                              "%.1f ms / %.1f ms, peak %s MiB" % (
                                  record["budgeted_ms"], record["planned_ms"],
                                  mib(record["peak_resident_bytes"])), flush=True)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table(runs))
    plot(runs, args.out)
    print(table(runs))


if __name__ == "__main__":
    main()
