"""MiniMalloc's "challenging" benchmark (tests/data/minimalloc, 154-454 buffers each): memoplan's
`exact` strategy against MiniMalloc's own solver (Moffitt, ASPLOS 2023), each run as a process and
timed from outside, on the same machine, interleaved and repeated; prints a markdown table.

    /usr/bin/python3 bench/run_minimalloc_compare.py --memoplan build/src/memoplan \
        [--minimalloc /work/minimalloc-build/minimalloc] [--runs 3] [--json out.json]

Per instance and run, in this order: `memoplan plan FILE -s exact --capacity 1048576
--time-limit 10 --json` (a plan within the capacity), MiniMalloc's command of its
scripts/run-challenging.sh (`minimalloc --capacity=1048576 --input=FILE --output=OUT`), and
`memoplan plan FILE -s exact --time-limit 10 --json` (the smallest slab it can find and prove).
memoplan validates its own plans; MiniMalloc's output offsets are checked here. Times are wall
seconds of each whole process (reading the CSV included), min and median over the runs.
Building MiniMalloc: docs/PLANNER.md ("exact"). Standard library only.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

INSTANCES = "ABCDEFGHIJK"
CAPACITY = 1048576


def timed(cmd):
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def run_memoplan(binary, path, time_limit, capacity):
    cmd = [binary, "plan", path, "-s", "exact", "--time-limit", str(time_limit), "--json"]
    if capacity:
        cmd += ["--capacity", str(capacity)]
    seconds, proc = timed(cmd)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("{")), None)
    if line is None:
        sys.exit(f"memoplan failed on {path} (exit {proc.returncode}): {proc.stderr.strip()}")
    out = json.loads(line)
    return {"seconds": seconds, "slab": out["slab_bytes"], "status": out["status"],
            "valid": out["valid"], "lower_bound": out["lower_bound_bytes"],
            "fits": proc.returncode == 0 and out["slab_bytes"] <= (capacity or out["slab_bytes"]),
            "note": out["note"], "cmd": cmd}


def minimalloc_height(input_path, output_path):
    """The height of MiniMalloc's output, after checking that no two live buffers overlap."""
    with open(input_path) as f:
        buffers = {row["id"]: row for row in csv.DictReader(f)}
    with open(output_path) as f:
        placed = list(csv.DictReader(f))
    if len(placed) != len(buffers):
        return None
    rows = [(int(r["lower"]), int(r["upper"]), int(r["size"]), int(r["offset"])) for r in placed]
    for i, (lo, up, size, off) in enumerate(rows):
        for lo2, up2, size2, off2 in rows[i + 1:]:
            if lo < up2 and lo2 < up and off < off2 + size2 and off2 < off + size:
                return None
    return max(off + size for _, _, size, off in rows)


def run_minimalloc(binary, path, capacity):
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "out.csv")
        cmd = [binary, f"--capacity={capacity}", f"--input={path}", f"--output={output}"]
        seconds, proc = timed(cmd)
        height = minimalloc_height(path, output) if proc.returncode == 0 else None
    return {"seconds": seconds, "height": height, "fits": height is not None and height <= capacity,
            "stderr": proc.stderr.strip(), "cmd": cmd}


def summary(samples, key="seconds"):
    values = [s[key] for s in samples]
    return min(values), statistics.median(values)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memoplan", required=True, help="the memoplan executable")
    parser.add_argument("--minimalloc", help="MiniMalloc's executable (its column is left out "
                        "without it)")
    parser.add_argument("--data", default=os.path.join(here, "..", "tests", "data", "minimalloc"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=10)
    parser.add_argument("--capacity", type=int, default=CAPACITY)
    parser.add_argument("--instances", default=INSTANCES, help="letters, e.g. ABC")
    parser.add_argument("--json", help="write every sample here")
    args = parser.parse_args()

    samples = {name: {"fit": [], "min": [], "mm": []} for name in args.instances}
    for run in range(args.runs):
        for name in args.instances:
            path = os.path.join(args.data, f"{name}.{CAPACITY}.csv")
            s = samples[name]
            s["fit"].append(run_memoplan(args.memoplan, path, args.time_limit, args.capacity))
            if args.minimalloc:
                s["mm"].append(run_minimalloc(args.minimalloc, path, args.capacity))
            s["min"].append(run_memoplan(args.memoplan, path, args.time_limit, 0))
            print(f"run {run + 1}/{args.runs} {name}: memoplan {s['fit'][-1]['seconds']:.3f} s"
                  + (f", MiniMalloc {s['mm'][-1]['seconds']:.3f} s" if args.minimalloc else "")
                  + f", minimize {s['min'][-1]['seconds']:.3f} s", file=sys.stderr)

    mm = bool(args.minimalloc)
    print(f"Capacity {args.capacity} bytes, time limit {args.time_limit} s, {args.runs} runs "
          "interleaved; wall seconds per process, min / median.\n")
    head = ["instance", "buffers", "memoplan --capacity: slab", "time"]
    if mm:
        head += ["MiniMalloc: height", "time", "speed-up (median)"]
    head += ["memoplan minimize: slab (lower bound)", "status", "time"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    totals = {"fit": [0.0, 0.0], "mm": [0.0, 0.0], "min": [0.0, 0.0]}
    all_fit = True
    for name in args.instances:
        s = samples[name]
        with open(os.path.join(args.data, f"{name}.{CAPACITY}.csv")) as f:
            buffers = sum(1 for _ in f) - 1
        fit_min, fit_med = summary(s["fit"])
        slabs = {r["slab"] for r in s["fit"]}
        fits = all(r["fits"] and r["valid"] for r in s["fit"])
        all_fit = all_fit and fits
        row = [name, str(buffers), "/".join(map(str, sorted(slabs))) + ("" if fits else " (over)"),
               f"{fit_min:.3f} / {fit_med:.3f}"]
        totals["fit"][0] += fit_min
        totals["fit"][1] += fit_med
        if mm:
            mm_min, mm_med = summary(s["mm"])
            heights = {r["height"] for r in s["mm"]}
            mm_fits = all(r["fits"] for r in s["mm"])
            row += ["/".join(str(h) for h in sorted(heights, key=lambda h: h or 0))
                    + ("" if mm_fits else " (failed)"), f"{mm_min:.3f} / {mm_med:.3f}",
                    f"{mm_med / fit_med:.1f}x"]
            totals["mm"][0] += mm_min
            totals["mm"][1] += mm_med
        min_min, min_med = summary(s["min"])
        totals["min"][0] += min_min
        totals["min"][1] += min_med
        best = min(r["slab"] for r in s["min"])
        statuses = sorted({r["status"] for r in s["min"]})
        row += [f"{best} ({s['min'][0]['lower_bound']})", "/".join(statuses),
                f"{min_min:.3f} / {min_med:.3f}"]
        print("| " + " | ".join(row) + " |")
    total = ["total", "", "all fit" if all_fit else "NOT ALL FIT",
             f"{totals['fit'][0]:.3f} / {totals['fit'][1]:.3f}"]
    if mm:
        total += ["", f"{totals['mm'][0]:.3f} / {totals['mm'][1]:.3f}",
                  f"{totals['mm'][1] / totals['fit'][1]:.1f}x"]
    total += ["", "", f"{totals['min'][0]:.3f} / {totals['min'][1]:.3f}"]
    print("| " + " | ".join(total) + " |")
    print("\nCommands (FILE: each instance):")
    print(f"    {args.memoplan} plan FILE -s exact --capacity {args.capacity} "
          f"--time-limit {args.time_limit:g} --json")
    if mm:
        print(f"    {args.minimalloc} --capacity={args.capacity} --input=FILE --output=OUT")
    print(f"    {args.memoplan} plan FILE -s exact --time-limit {args.time_limit:g} --json")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(samples, f, indent=1)
    return 0 if all_fit else 1


if __name__ == "__main__":
    sys.exit(main())
