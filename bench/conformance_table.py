"""One line per model from conformance sweeps (bench/conformance.py's rows.jsonl): each form's
tuned/stock, the lowest coverage and largest tuned difference over its forms, memory min's slab
over the offset bound per form, whether every memory-min run was bit-identical, and peak RSS
(stock and tuned, traced form). Flags what issue 49 judges: coverage < 0.9, tuned/stock > 1.02,
a difference > 1e-5, planned outputs not bit-identical to the unplanned ones, memory min not
bit-identical or above the bound, an error.

Usage: python3 bench/conformance_table.py OUT_DIR [OUT_DIR ...] > table.md
"""
import json
import os
import re
import sys


def load(dirs):
    rows = []
    for d in dirs:
        with open(os.path.join(d, "rows.jsonl")) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def layout(row):
    """The layout plan's activation layouts and its modelled time, from the kernel report."""
    for line in row.get("kernel_shapes") or []:
        m = re.search(r"of (\d+) activations (.*?); modelled .* -> ([\d.]+) ms", line)
        if m:
            return m.group(2), float(m.group(3))
    return None


def same_plan(by_form):
    """Traced against scripted: the same layouts chosen, or the modelled times' ratio."""
    a, b = (layout(by_form[f]) if f in by_form and "error" not in by_form[f] else None
            for f in ("traced", "scripted"))
    if not a or not b:
        return "-"
    if a[0] == b[0]:
        return "same layouts"
    return f"{a[0]} / {b[0]} (modelled {a[1] / b[1]:.2f}x)"


def main():
    rows = load(sys.argv[1:])
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    print("| model | tuned/stock traced, scripted, frozen | tuned FLOPs (lowest) | max rel. diff | "
          "min slab / offset bound traced, scripted, frozen | min bit-identical | "
          "peak RSS stock / tuned MiB | tuned plan traced vs scripted | flags |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in models:
        by_form = {r["form"]: r for r in rows if r["model"] == m}
        ok = [r for r in by_form.values() if "error" not in r]
        flags = [f"{f}: {r['error'][:80]}" for f, r in by_form.items() if "error" in r]
        if not ok:
            print(f"| {m} | | | | | | | | {'; '.join(flags)} |")
            continue
        ratio = ", ".join(f"{by_form[f]['tuned_over_stock']:.2f}" if f in by_form and
                          "error" not in by_form[f] else "-" for f in ("traced", "scripted", "frozen"))
        coverage = min(r["coverage"] for r in ok)
        diff = max(r["difference"] for r in ok)
        slab = ", ".join(f"{by_form[f]['min_slab_over_bound']:.3f}" if f in by_form and
                         "min_slab_over_bound" in by_form[f] else "-"
                         for f in ("traced", "scripted", "frozen"))
        identical = all(r.get("min_identical") is True for r in ok)
        first = by_form.get("traced", ok[0])
        rss = (f"{first['rss_stock'] / 2**20:.0f} / {first['rss_tuned'] / 2**20:.0f}"
               if first.get("rss_stock") and first.get("rss_tuned") else "")
        if coverage < 0.9:
            left = {l["op"] + " (" + l["reason"] + ")" for r in ok for l in r["left_on_aten"]}
            flags.append("coverage: " + ", ".join(sorted(left))[:120])
        if any(r["tuned_over_stock"] > 1.02 for r in ok):
            flags.append("tuned slower")
        if diff > 1e-5:
            flags.append("difference")
        planned = {r["planned_difference"] for r in ok if r.get("planned_difference")}
        if planned:
            flags.append("planned outputs differ: " + "; ".join(sorted(planned))[:160])
        if not identical:
            flags.append("memory min: " + "; ".join(str(r.get("min_error", r.get("min_identical")))
                                                    for r in ok if r.get("min_identical") is not True))
        print(f"| {m} | {ratio} | {coverage:.3f} | {diff:.1e} | {slab} | {identical} | {rss} | "
              f"{same_plan(by_form)} | {'; '.join(flags)} |")


if __name__ == "__main__":
    main()
