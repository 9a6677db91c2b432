"""memoplan run --memory min against --memory offset over the model zoo (issue 22).

For each model and batch, `memoplan run --json` runs twice per round, the two settings
interleaved (offset, min, offset, min, ...): the slab of each, the offset lower bound of the
`offset` run's pass (today's bound: aten's temporaries included) and of the `min` run's pass
(convolutions and poolings in parts), the bound with sharing, the tensors that share bytes, the
ops computed in parts, the peak RSS of a planned process (each run's own probe), the planned and
unplanned latency, and whether the planned outputs were bit-identical to the unplanned ones in
every pass. The ratio is the `min` slab over the `offset` run's bound. Writes DIR/runs.jsonl
(every run) and DIR/table.md (medians over the rounds).

    /usr/bin/python3 bench/run_memory_min.py --models densenet121,googlenet --batches 1,8
    /usr/bin/python3 bench/run_memory_min.py --all --batches 1 --rounds 1 --iters 2 --no-rss
    /usr/bin/python3 bench/run_memory_min.py --models densenet121 --batches 1 --intra-op 2

Models come from models/ (bench/models/make_zoo.py makes them); a model missing there is made.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
from zoo_models import MODELS  # noqa: E402

DEFAULT_MODELS = "densenet121,googlenet,inception_v3,resnet50,mobilenet_v2,bert_encoder"


def input_shape(model_path, batch):
    """The model file's own input shape with its first dimension set to `batch`."""
    manifest = json.load(open(os.path.join(os.path.dirname(model_path), "manifest.json")))
    name = os.path.basename(model_path)[:-3]
    entry = next(m for m in manifest["models"] if m["name"] == name)
    shape = list(entry["input_shape"])
    shape[0] = batch
    return "x".join(str(d) for d in shape)


def run_once(binary, model_path, batch, memory, iters, rss, intra_op):
    command = [binary, model_path, "--input", input_shape(model_path, batch), "--memory", memory,
               "-n", str(iters), "--intra-op", str(intra_op), "--json", "--quiet"]
    if not rss:
        command.append("--no-rss")
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(" ".join(command) + " failed:\n" + done.stderr[-2000:])
    report = json.loads(done.stdout[done.stdout.index("{"):])
    report["batch"] = batch
    report["command"] = " ".join(command[1:])
    return report


def mib(n):
    return "%.2f" % (n / 2**20)


def table(runs):
    rows = ["| model | batch | slab offset (MiB) | slab min (MiB) | offset bound (MiB) | "
            "offset bound of min's pass (MiB) | bound with sharing (MiB) | min / offset bound | "
            "shared tensors | in parts per pass (conv, pool) | peak RSS offset (MiB) | "
            "peak RSS min (MiB) | planned ms offset | planned ms min | unplanned ms | "
            "outputs identical |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["model"], r["batch"]) for r in runs},
                  key=lambda k: (list(MODELS).index(os.path.basename(k[0])[:-3]), k[1]))
    for model, batch in keys:
        of = [r for r in runs if r["model"] == model and r["batch"] == batch and
              r["memory"] == "offset"]
        mn = [r for r in runs if r["model"] == model and r["batch"] == batch and
              r["memory"] == "min"]
        if not of or not mn:
            continue

        def med(rs, key):
            values = [r[key] for r in rs if r.get(key) is not None]
            return statistics.median(values) if values else None

        rss_o, rss_m = med(of, "peak_rss_bytes_planned"), med(mn, "peak_rss_bytes_planned")
        rows.append("| %s | %d | %s | %s | %s | %s | %s | %.3f | %d | %.0f, %.0f | %s | %s | %.2f "
                    "| %.2f | %.2f | %s |"
                    % (os.path.basename(model)[:-3], batch, mib(of[0]["slab_bytes"]),
                       mib(mn[0]["slab_bytes"]), mib(of[0]["offset_lower_bound_bytes"]),
                       mib(mn[0]["offset_lower_bound_bytes"]), mib(mn[0]["lower_bound_bytes"]),
                       mn[0]["slab_bytes"] / of[0]["offset_lower_bound_bytes"],
                       mn[0]["shared_tensors"], med(mn, "sliced_convolutions_per_pass") or 0,
                       med(mn, "sliced_poolings_per_pass") or 0, mib(rss_o) if rss_o else "-",
                       mib(rss_m) if rss_m else "-", med(of, "planned_ms"), med(mn, "planned_ms"),
                       med(of + mn, "unplanned_ms"),
                       "yes" if all(r["outputs_identical"] for r in of + mn) else "NO"))
    return "\n".join(rows) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--all", action="store_true", help="every zoo model")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--no-rss", action="store_true")
    parser.add_argument("--intra-op", type=int, default=1, help="intra-op threads (memoplan run)")
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "src", "memoplan-run"))
    parser.add_argument("--models-dir", default=os.path.join(ROOT, "models"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    names = list(MODELS) if args.all else args.models.split(",")
    missing = [n for n in names if not os.path.exists(os.path.join(args.models_dir, n + ".pt"))]
    if missing:
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models", "make_zoo.py"),
                        "--out", args.models_dir, "--only", ",".join(missing)], check=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    out = args.out or os.path.join(ROOT, "bench", "results", "memory_min_" + stamp)
    os.makedirs(out, exist_ok=True)
    runs = []
    with open(os.path.join(out, "runs.jsonl"), "w") as log:
        for name in names:
            path = os.path.join(args.models_dir, name + ".pt")
            for batch in [int(b) for b in args.batches.split(",")]:
                for round_index in range(args.rounds):
                    for memory in ("offset", "min"):
                        report = run_once(args.binary, path, batch, memory, args.iters,
                                          not args.no_rss, args.intra_op)
                        report["round"] = round_index
                        runs.append(report)
                        log.write(json.dumps(report) + "\n")
                        log.flush()
                        print("%-16s batch %d %-6s slab %s MiB, bounds %s / %s MiB, %.2f ms, "
                              "identical %s" % (name, batch, memory, mib(report["slab_bytes"]),
                                                mib(report["offset_lower_bound_bytes"]),
                                                mib(report["lower_bound_bytes"]),
                                                report["planned_ms"],
                                                report["outputs_identical"]), flush=True)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table(runs))
    print(table(runs))
    print("results in", out)


if __name__ == "__main__":
    main()
