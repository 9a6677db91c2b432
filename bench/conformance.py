"""The conformance sweep (issue 49): models as users export them, run through `memoplan run`.

For every model x form (bench/models/graph_forms.py: traced, scripted, frozen; saved to a file
with its input) and every intra-op thread count: `memoplan run --kernels tuned --json` (stock,
planned and tuned copies interleaved pass by pass in one process, medians), its tuned/stock
latency, the outputs' distance from stock, the tuned coverage (tuned_flops_fraction and the ops
left on aten); then `memoplan run --memory min --json`: bit-identical outputs and the slab against
the offset plan's lower bound (the most bytes live at once without sharing, from the tuned run's
planned copy). One process at a time: nothing else runs beside the timed one.

Usage: /usr/bin/python3 bench/conformance.py [--models resnet18,densenet121|all|default]
       [--forms traced,scripted,frozen] [--threads 1,2] [--iters 20] [--size 224]
       [--out bench/results/conformance_STAMP] [--no-min] [--no-rss]
Writes OUT/rows.jsonl (one object per model, form and thread count) and OUT/table.md.
"""
import argparse
import datetime
import gc
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "models"))

import torch  # noqa: E402

import graph_forms  # noqa: E402

DEFAULT_MODELS = ("resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,densenet121,"
                  "shufflenet_v2_x1_0,regnet_x_400mf,squeezenet1_0,googlenet,convnext_tiny,"
                  "vit_b_16,fcn_resnet50,transformer_encoder,gpt_decoder")


def memoplan_run(binary, model, *options, rss=False, timeout=None):
    command = [binary, model, "--json", "--quiet", *options] + ([] if rss else ["--no-rss"])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over the {timeout} s limit"}
    try:
        # Exit 1 with a report: the planned outputs differ from the unplanned ones (the row keeps
        # the report and says so); anything else is an error.
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        text = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}")
        return {"error": text.splitlines()[-1][:300]}


def row_text(r):
    if "error" in r:
        return f"| {r['model']} | {r['form']} | {r['threads']} | error: {r['error']} |||||"
    left = ", ".join(f"{l['op']} {l['flops_fraction']:.2f} ({l['reason']})"
                     for l in r.get("left_on_aten", [])[:3])
    return (f"| {r['model']} | {r['form']} | {r['threads']} | {r['stock_ms']:.2f} | "
            f"{r['tuned_ms']:.2f} | {r['tuned_over_stock']:.3f} | {r['coverage']:.3f} | "
            f"{r['difference']:.1e} | {r.get('min_slab_bytes', 0) / 2**20:.2f} MiB, "
            f"{r.get('min_slab_over_bound', float('nan')):.3f} | "
            f"{r.get('min_identical', r.get('min_error', ''))} | {mib(r.get('rss_stock'))} | "
            f"{mib(r.get('rss_tuned'))} | {left} |")


def mib(n):
    return f"{n / 2**20:.0f}" if n else ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="default")
    parser.add_argument("--forms", default="traced,scripted,frozen")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "build", "src", "memoplan-run"))
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per memoplan run")
    parser.add_argument("--out")
    parser.add_argument("--no-min", action="store_true",
                        help="skip the memory min run (a second thread count after a sweep at one)")
    parser.add_argument("--no-rss", action="store_true", help="skip the per-copy peak RSS probes")
    args = parser.parse_args()
    models = {"default": DEFAULT_MODELS.split(","), "all": graph_forms.all_names()}.get(
        args.models) or args.models.split(",")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or os.path.join(HERE, "results", f"conformance_{stamp}")
    os.makedirs(out, exist_ok=True)
    rows = []
    header = ("| model | form | threads | stock ms | tuned ms | tuned/stock | tuned FLOPs | "
              "max rel. diff | min slab, / offset bound | min bit-identical | peak RSS stock MiB | "
              "peak RSS tuned MiB | left on aten |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(header, flush=True)
    rows_file = open(os.path.join(out, "rows.jsonl"), "w")  # a row at a time: partial sweeps count
    for name in models:
        for form in args.forms.split(","):
            torch.manual_seed(0)
            model, example = graph_forms.build(name, 1, args.size)
            path = os.path.join(out, f"{name}.{form}.pt")
            try:
                graph_forms.write(model, example, form, path, graph_forms.input_high(name))
            except Exception as error:  # noqa: BLE001 - a form this model cannot take
                r = {"model": name, "form": form, "threads": "-",
                     "error": "export: " + str(error).strip().splitlines()[0][:200]}
                rows.append(r)
                print(row_text(r), flush=True)
                rows_file.write(json.dumps(r) + "\n")
                continue
            finally:
                # The runs load the file themselves: this process's copy would only take memory
                # from them (regnet_y_128gf: 2.6 GB).
                del model, example
                gc.collect()
            minimum = {"error": "not run (--no-min)"} if args.no_min else memoplan_run(
                args.binary, path, "--memory", "min", "--iters", "3", timeout=args.timeout)
            for i, threads in enumerate(map(int, args.threads.split(","))):
                # Peak RSS (each copy in a process of its own) at the first thread count only.
                j = memoplan_run(args.binary, path, "--kernels", "tuned", "--iters",
                                 str(args.iters), "--intra-op", str(threads),
                                 rss=i == 0 and not args.no_rss,
                                 timeout=args.timeout)
                r = {"model": name, "form": form, "threads": threads}
                if "error" in j:
                    r["error"] = j["error"]
                else:
                    r.update(stock_ms=j["unplanned_ms"], tuned_ms=j["tuned_ms"],
                             tuned_over_stock=j["tuned_ms"] / j["unplanned_ms"],
                             coverage=j["tuned_flops_fraction"], gflops=j["flops_per_pass"] / 1e9,
                             difference=j["tuned_max_relative_difference"],
                             left_on_aten=j["left_on_aten"], kernel_shapes=j.get("kernel_shapes"),
                             rss_stock=j.get("peak_rss_bytes_unplanned"),
                             rss_planned=j.get("peak_rss_bytes_planned"),
                             rss_tuned=j.get("peak_rss_bytes_tuned"))
                    if not j.get("outputs_identical", True):
                        r["planned_difference"] = j.get("first_difference", "")
                    if "error" in minimum:
                        r["min_error"] = minimum["error"]
                    else:
                        # Against the offset plan's bound (the planned copy of the tuned run),
                        # as docs/results/MEMORY.md measures memory min.
                        r.update(min_slab_bytes=minimum["slab_bytes"],
                                 min_slab_over_bound=minimum["slab_bytes"] / j["lower_bound_bytes"],
                                 min_identical=minimum["outputs_identical"],
                                 min_coalesced=minimum.get("coalesced_bytes_fraction"))
                rows.append(r)
                print(row_text(r), flush=True)
                rows_file.write(json.dumps(r) + "\n")
                rows_file.flush()
            os.remove(path)
    rows_file.close()
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(header + "\n" + "\n".join(row_text(r) for r in rows) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
