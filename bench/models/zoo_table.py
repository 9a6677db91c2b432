"""Prints the markdown table of docs/results/KERNELS.md from `memoplan run --json` lines (one object a line,
as bench/models/run_zoo.sh writes them).

    python3 bench/models/zoo_table.py out/zoo_run.jsonl
"""
import json
import os
import sys


def mib(n):
    return f"{n / 2**20:.1f}"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print("| model | input | iters | unplanned ms (median / p99) | planned ms (median / p99) "
          "| planned/unplanned | slab MiB | lower bound MiB | slab/bound "
          "| tensor mallocs/pass unplanned → planned | fallbacks | planning ms "
          "| outputs identical |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            name = os.path.splitext(os.path.basename(r["model"]))[0]
            ratio = r["planned_ms"] / r["unplanned_ms"] if r["unplanned_ms"] else 0
            bound = r["slab_bytes"] / r["lower_bound_bytes"] if r["lower_bound_bytes"] else 0
            print(f"| {name} | {r['input']} {r['dtype']} | {r['iters']} "
                  f"| {r['unplanned_ms']:.1f} / {r['unplanned_p99_ms']:.1f} "
                  f"| {r['planned_ms']:.1f} / {r['planned_p99_ms']:.1f} | {ratio:.3f} "
                  f"| {mib(r['slab_bytes'])} | {mib(r['lower_bound_bytes'])} | {bound:.3f} "
                  f"| {r['tensor_mallocs_per_pass_unplanned']:.0f} → "
                  f"{r['tensor_mallocs_per_pass_planned']:.0f} | {r['fallbacks']} "
                  f"| {r['planning_ms']:.2f} | {'yes' if r['outputs_identical'] else 'NO'} |")


if __name__ == "__main__":
    main()
