#!/usr/bin/python3
"""`memoplan run --kernels tuned` against ONNX Runtime's CPU build, same machine, same run.

    /usr/bin/python3 bench/run_ort_compare.py                      # defaults below, 3 rounds
    /usr/bin/python3 bench/run_ort_compare.py --models resnet18,bert_encoder --batches 1 \
        --threads 1 --rounds 1 --iters 5 --warmup 2                # a smoke test
    /usr/bin/python3 bench/run_ort_compare.py --report-only bench/results/ort_<stamp>

A cell is a model of the zoo, a batch and a count T of intra-op threads (one inference thread).
In every round each cell runs two processes, ONNX Runtime's first in even rounds and memoplan's
first in odd ones, both with OPENBLAS_NUM_THREADS=T and OMP_NUM_THREADS=T:

- ONNX Runtime 1.30.0, the npm package onnxruntime-node (its CPU build; the package carries
  libonnxruntime.so), run by bench/ort/run_ort.mjs: every graph optimization, memory pattern and
  CPU arena on, sequential execution, T intra-op threads, one inter-op thread; --warmup passes,
  then --iters passes each timed on its own. The package is installed on first use with
  `npm install --ignore-scripts` of bench/ort/package.json into ~/.cache/memoplan/ort-node (its
  install script fetches GPU binaries and fails; the CPU library needs none of it).
- `memoplan run models/M.pt --kernels tuned --json --input BxCxHxW --iters N --warmup W
  --intra-op T --block N --warm-passes 3 --no-rss -q`. Its stock (unplanned TorchScript),
  planned and tuned copies each run 3 untimed passes and then their N timed ones in a row, as
  ORT's process does (until 2026-12-02 they alternated pass by pass, each pass after one warm
  pass of its copy: a small model's pass after another copy's is slow for several passes, warm
  pass or not; traced mobilenet_v3_small at 128x128, tuned, 1.03 ms against 0.55 back to back);
  the JSON's `tuned_ms` (median) is compared, `stock_ms` is reported for context.

--memory also measures memory: memoplan run without --no-rss (its probe processes: the tuned and
planned copies' peak RSS, each in a process of its own, and the RSS before the model is loaded)
and ORT's VmHWM and its VmRSS before the InferenceSession is made. Net = peak - that RSS before
the model: what the model costs each runtime, apart from node's and LibTorch's own start.

Per process the median pass; per cell the per-round ratio memoplan tuned ms / ORT ms (below 1:
memoplan is faster), its median and range over the rounds, then the geometric mean of the cells'
median ratios and the worst cell.

--also-env NAME=VALUE adds a third process per cell and round, memoplan's again with NAME=VALUE
in its environment (e.g. MEMOPLAN_REGION_LAYOUT=blocked: the blocked region without the layout
plan), in the same rotation; the report then has a second table, memoplan's default against it.

--sweep runs the conformance sweep's models instead of the zoo's (issue 52's harness on issue 49's
sweep): each of --models (bench/models/graph_forms.py's names; `default`: bench/conformance.py's
list) in each of --forms (default traced,scripted), saved to OUT/models/ as a user exports it
(seed SEED, example batch 1 at --size), and exported to ONNX once per batch from the same module
with static shapes (no dynamic axis: what a user exporting for ORT at a fixed batch does; ORT's
transformer fusions, a Python-side offline tool, are not applied). ORT runs once per model, batch,
threads and round; each form's memoplan process is compared with that run.

Accuracy, each side against stock TorchScript on its own input: ORT's first output against the
model's .pt file run by torch here on the same input (written raw for node, read back from the
raw float32 node writes): max|ort - torch| / max|torch|; memoplan's `tuned_max_relative_difference`
(tuned copy against its stock copy, inside its run) and `tuned_within_tolerance` (<= 1e-5).

ONNX files: torch.onnx.export (opset 13; 14 for gpt_decoder, whose causal mask needs Trilu) of the
zoo builder's module made with make_zoo.py's seed, so the weights are the .pt file's (checked: the
module and the .pt file give the same output on the example input), with a dynamic batch axis;
cached with a .json beside it in ~/.cache/memoplan/onnx/ and made again when the .pt file changes.
bert_encoder (and gpt_decoder): torch 1.13's TransformerEncoderLayer takes its fused fast path
(aten::_transformer_encoder_layer_fwd, which has no ONNX export) in eval mode only when grad is
off or no argument requires grad, so the export runs with grad on (not under torch.no_grad) and
traces the op-by-op path; under torch.no_grad the export fails on that operator.

Results: --out (default bench/results/ort_<UTC stamp>/): meta.json (command, machine, settings),
raw/<round>_<model>_b<batch>_t<threads>_<side>.json (one per process: its command, environment,
exit code, the parsed JSON and, for ORT, the accuracy) and report.md. Needs Debian's
/usr/bin/python3 (torch, torchvision, numpy), node and npm, the zoo models (made with
bench/models/make_zoo.py when missing) and build/src/memoplan; --report-only needs neither torch
nor the binaries.
"""
import argparse
import glob
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_matrix import ROOT, machine_info  # noqa: E402

CACHE = os.path.expanduser("~/.cache/memoplan")
ORT_PACKAGE = os.path.join(ROOT, "bench", "ort", "package.json")
ORT_SCRIPT = os.path.join(ROOT, "bench", "ort", "run_ort.mjs")
OPSET = {"gpt_decoder": 14}  # aten::triu exports as Trilu, added in opset 14; the rest take 13
SEED = 0  # make_zoo.py's: the module exported is the .pt file's
INPUT_SEED = 1
TIMEOUT_S = 3600


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", help="the zoo's resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,"
                   "efficientnet_b0,bert_encoder; with --sweep, `default` (the sweep's list)")
    p.add_argument("--batches", default="1,2")
    p.add_argument("--threads", default="1,2", help="intra-op threads of the one inference thread")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=20, help="timed passes per process")
    p.add_argument("--warmup", type=int, default=3, help="untimed passes per process first")
    p.add_argument("--memoplan", default=os.path.join(ROOT, "build", "src", "memoplan"))
    p.add_argument("--out", help="results directory (default bench/results/ort_<UTC stamp>)")
    p.add_argument("--report-only", metavar="DIR", help="only rewrite DIR/report.md from DIR/raw")
    p.add_argument("--memory", action="store_true",
                   help="also each side's peak RSS and net memory (memoplan's probe processes)")
    p.add_argument("--also-env", metavar="NAME=VALUE",
                   help="a third side: memoplan run with NAME=VALUE in its environment")
    p.add_argument("--sweep", action="store_true",
                   help="--models are the conformance sweep's (bench/models/graph_forms.py; "
                        "'default': bench/conformance.py's list), each saved in every --forms "
                        "as a user exports it, ONNX exported with static shapes per batch")
    p.add_argument("--forms", default="traced,scripted", help="with --sweep: the graph forms")
    p.add_argument("--size", type=int, default=224,
                   help="with --sweep: the image side (graph_forms.build's)")
    args = p.parse_args()
    if args.also_env and "=" not in args.also_env:
        p.error("--also-env takes NAME=VALUE")
    if args.models is None:
        args.models = ("default" if args.sweep else
                       "resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,bert_encoder")
    return args


def ensure_ort():
    """The directory onnxruntime-node is installed in (installed there when missing)."""
    target = os.path.join(CACHE, "ort-node")
    wanted = json.load(open(ORT_PACKAGE))["dependencies"]["onnxruntime-node"]
    installed = os.path.join(target, "node_modules", "onnxruntime-node", "package.json")
    if os.path.exists(installed) and json.load(open(installed))["version"] == wanted:
        return target
    os.makedirs(target, exist_ok=True)
    shutil.copy(ORT_PACKAGE, os.path.join(target, "package.json"))
    print(f"installing onnxruntime-node {wanted} into {target}", flush=True)
    subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=target,
                   check=True)
    return target


def manifest_entry(name):
    """The zoo manifest's entry of NAME, making models/NAME.pt first when it is missing."""
    path = os.path.join(ROOT, "models", name + ".pt")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models", "make_zoo.py"),
                        "--only", name], check=True)
    with open(os.path.join(ROOT, "models", "manifest.json")) as f:
        return next(m for m in json.load(f)["models"] if m["name"] == name)


def first_tensor(value):
    """The first tensor of a model's output (a tensor, or one inside tuples, lists and dicts)."""
    import torch
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return next((t for t in map(first_tensor, value) if t is not None), None)
    return None  # None (googlenet's aux logits in eval mode), numbers


def relative_difference(actual, expected):
    """max|actual - expected| / max|expected| of two float arrays of the same size."""
    return float(abs(actual - expected).max() / abs(expected).max())


def ensure_onnx(name):
    """~/.cache/memoplan/onnx/NAME.onnx and its description, exported when missing or stale."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
    from zoo_models import MODELS
    pt = os.path.join(ROOT, "models", name + ".pt")
    source = {"pt_bytes": os.path.getsize(pt), "pt_mtime_ns": os.stat(pt).st_mtime_ns}
    path = os.path.join(CACHE, "onnx", name + ".onnx")
    described = os.path.join(CACHE, "onnx", name + ".json")
    if os.path.exists(path) and os.path.exists(described):
        info = json.load(open(described))
        if all(info.get(k) == v for k, v in source.items()):
            return path, info
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.manual_seed(SEED)
    model, example = MODELS[name][0]()
    with torch.no_grad():
        module_out = first_tensor(model(example)).numpy()
        pt_out = first_tensor(torch.jit.load(pt).eval()(example)).numpy()
    agreement = relative_difference(module_out, pt_out)
    if agreement > 1e-4:
        raise RuntimeError(f"{name}: the module built with seed {SEED} is not {pt}'s "
                           f"(relative difference {agreement:.3g}): make the .pt file again")
    started = time.monotonic()
    # Grad on (no torch.no_grad): see the docstring, the transformer layers' fast path.
    torch.onnx.export(model, example, path + ".tmp", opset_version=OPSET.get(name, 13),
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    os.replace(path + ".tmp", path)
    info = dict(source, name=name, opset=OPSET.get(name, 13), torch=torch.__version__,
                seed=SEED, module_vs_pt_relative_difference=agreement,
                export_seconds=round(time.monotonic() - started, 1))
    json.dump(info, open(described, "w"), indent=1)
    return path, info


def sweep_entries(args, out):
    """--sweep: {key: entry} for every model x form, saved in OUT/models/ as graph_forms makes
    it (torch.jit.trace(model, example) and nothing else for traced; the example batch 1), and
    a function (name, batch) -> the ONNX file of the same module (seed SEED), static shapes."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
    import graph_forms
    from conformance import DEFAULT_MODELS
    names = DEFAULT_MODELS.split(",") if args.models == "default" else args.models.split(",")
    folder = os.path.join(out, "models")
    os.makedirs(folder, exist_ok=True)
    entries = {}
    for name in names:
        for form in args.forms.split(","):
            torch.manual_seed(SEED)
            model, example = graph_forms.build(name, 1, args.size)
            path = os.path.join(folder, f"{name}.{form}.pt")
            if not os.path.exists(path):
                graph_forms.write(model, example, form, path, graph_forms.input_high(name))
            entries[f"{name}.{form}"] = {
                "name": f"{name}.{form}", "file": path, "sweep_model": name,
                "dtype": str(example.dtype).replace("torch.", ""),
                "input_shape": list(example.shape), "input_high": graph_forms.input_high(name)}

    def onnx_for(name, batch):
        path = os.path.join(folder, f"{name}_b{batch}.onnx")
        if not os.path.exists(path):
            torch.manual_seed(SEED)
            model, example = graph_forms.build(name, batch, args.size)
            # Grad on (no torch.no_grad): see the docstring, the transformer layers' fast path.
            torch.onnx.export(model, example, path + ".tmp", opset_version=OPSET.get(name, 13),
                              input_names=["input"], output_names=["output"])
            os.replace(path + ".tmp", path)
        return path
    return entries, onnx_for


def make_input(entry, batch, scratch):
    """Writes the (model, batch) input raw and returns (its path, shape text, torch's output of
    the .pt file on it as a flat float32 array)."""
    import torch
    shape = [batch] + entry["input_shape"][1:]
    generator = torch.Generator().manual_seed(INPUT_SEED)
    if entry["dtype"] == "int64":
        data = torch.randint(0, entry["input_high"], shape, generator=generator)
    else:
        data = torch.randn(shape, generator=generator)
    path = os.path.join(scratch, f"{entry['name']}_b{batch}.bin")
    data.numpy().tofile(path)
    module = torch.jit.load(os.path.join(ROOT, "models", entry["file"])).eval()  # abs: as is
    with torch.inference_mode():
        reference = first_tensor(module(data)).float().numpy().ravel()
    return path, "x".join(map(str, shape)), reference


def run_process(command, threads, extra_env=None):
    extra_env = extra_env or {}
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               **extra_env)
    record = {"command": shlex.join(command),
              "env": {k: env[k] for k in ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", *extra_env]},
              "load_at_start": os.getloadavg()[0]}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    record.update(returncode=done.returncode, stderr_tail=done.stderr[-2000:])
    start = done.stdout.find("{")
    if start >= 0:
        record["report"] = json.loads(done.stdout[start:])
    return record


def run_ort(ort_dir, onnx, entry, cell_input, threads, args):
    path, shape, reference = cell_input
    output = path + ".ort_out"
    record = run_process(["node", ORT_SCRIPT, "--ort-dir", ort_dir, "--model", onnx, "--input",
                          path, "--shape", shape, "--dtype", entry["dtype"], "--threads",
                          str(threads), "--warmup", str(args.warmup), "--iters", str(args.iters),
                          "--output", output], threads)
    if record["returncode"] == 0:
        import numpy
        record["ms"] = statistics.median(record["report"]["pass_ms"])
        record["max_relative_difference"] = relative_difference(
            numpy.fromfile(output, dtype=numpy.float32), reference)
        os.remove(output)
    return record


def run_memoplan(entry, shape, threads, args, extra_env=None):
    command = [args.memoplan, "run", os.path.join(ROOT, "models", entry["file"]), "--kernels",
               "tuned", "--json", "--input", shape, "--iters", str(args.iters), "--warmup",
               str(args.warmup), "--intra-op", str(threads), "--block", str(args.iters),
               "--warm-passes", "3", "-q"]
    if not args.memory:
        command.append("--no-rss")
    record = run_process(command, threads, extra_env)
    if "report" in record:  # exit code 1 with a report: planned and stock outputs differed
        record["ms"] = record["report"]["tuned_ms"]
    return record


def write_meta(out, args, torch_version):
    """OUT/meta.json (the command, the machine, the settings) and OUT/raw/."""
    meta = dict(machine_info(), command=shlex.join([sys.executable] + sys.argv),
                started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                torch=torch_version, settings=vars(args))
    os.makedirs(os.path.join(out, "raw"), exist_ok=True)
    json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)


def measure(args, out):
    models = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    if not os.path.exists(args.memoplan):
        sys.exit(f"run_ort_compare: {args.memoplan} is missing (cmake --build build)")
    import torch
    ort_dir = ensure_ort()
    if args.sweep:
        entries, onnx_for = sweep_entries(args, out)
        models = list(entries)
        args.models = ",".join(models)  # the report's order
    else:
        entries = {m: manifest_entry(m) for m in models}
        onnx = {}
        for m in models:
            onnx[m], onnx_info = ensure_onnx(m)
            print(f"{m}: {onnx[m]} (opset {onnx_info['opset']}; module vs .pt "
                  f"{onnx_info['module_vs_pt_relative_difference']:.2g})", flush=True)

        def onnx_for(m, batch):
            return onnx[m]
    write_meta(out, args, torch.__version__)
    with tempfile.TemporaryDirectory(prefix="ort_compare_") as scratch:
        inputs = {(m, b): make_input(entries[m], b, scratch) for m in models for b in batches}
        cells = [(m, b, t) for m in models for b in batches for t in threads]
        also = {}
        if args.also_env:
            name, value = args.also_env.split("=", 1)
            also = {name: value}
        for round_index in range(args.rounds):
            sides = ["ort", "memoplan"] + (["memoplan_env"] if also else [])
            if round_index % 2:
                sides.reverse()
            ort_runs = {}  # --sweep: ORT runs a model once a round, compared with every form
            for m, b, t in cells:
                ort_key = (entries[m].get("sweep_model", m), b, t)
                for side in sides:
                    if side == "ort" and ort_key in ort_runs:
                        record = dict(ort_runs[ort_key])
                    elif side == "ort":
                        record = run_ort(ort_dir, onnx_for(ort_key[0], b), entries[m],
                                         inputs[m, b], t, args)
                        ort_runs[ort_key] = dict(record)
                    else:
                        record = run_memoplan(entries[m], inputs[m, b][1], t, args,
                                              also if side == "memoplan_env" else None)
                    record.update(side=side, model=m, batch=b, threads=t, round=round_index,
                                  order=sides.index(side))
                    tag = f"r{round_index}_{m}_b{b}_t{t}_{side}"
                    json.dump(record, open(os.path.join(out, "raw", tag + ".json"), "w"),
                              indent=1)
                    print(f"{tag}: " + ("%.2f ms" % record["ms"] if "ms" in record else
                          f"failed (exit code {record['returncode']}): "
                          f"{record['stderr_tail'].strip()[-300:]}"), flush=True)


def fmt_range(values, pattern="%.3f"):
    if not values:
        return "-"
    text = pattern % statistics.median(values)
    if len(values) > 1:
        text += f" [{pattern % min(values)}–{pattern % max(values)}]"
    return text


def report(out):
    meta = json.load(open(os.path.join(out, "meta.json")))
    records = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "raw", "*.json")))]
    cells = {}
    for r in records:
        cells.setdefault((r["model"], r["batch"], r["threads"]), {}).setdefault(
            r["side"], {})[r["round"]] = r
    settings = meta["settings"]
    models = settings["models"].split(",")
    ort_versions = sorted({r["report"]["ort_version"] for r in records
                           if r["side"] == "ort" and "report" in r})
    lines = [
        "# memoplan run --kernels tuned against ONNX Runtime (CPU)", "",
        f"`{meta['command']}`", "",
        f"- started {meta['started']}; CPU: {meta['cpu']} ({meta['simd']}), {meta['cores']} cores;"
        f" load average at start {meta['load_at_start']:.2f}",
        f"- ONNX Runtime {', '.join(ort_versions) or '?'} (onnxruntime-node, CPU execution "
        f"provider); torch {meta['torch']} (export and the ORT accuracy reference); memoplan "
        f"commit {meta['commit']}; {'; '.join(meta['packages'])}",
        f"- rounds: {settings['rounds']}; per process {settings['warmup']} warm-up then "
        f"{settings['iters']} timed passes (memoplan: its stock, planned and tuned copies each "
        "run 3 untimed passes, then their timed passes in a row: `--block`); one inference "
        "thread with T intra-op threads, OPENBLAS_NUM_THREADS = "
        "OMP_NUM_THREADS = T; ORT first in even rounds, memoplan first in odd ones",
        "- ms: median over the rounds of each process's median pass; ratio: memoplan tuned ms / "
        "ORT ms of the same round, median [min–max] over the rounds (below 1: memoplan faster)",
        "- accuracy: ORT's first output against the .pt file run by torch on the same input, "
        "max|ort - torch| / max|torch| (worst round); memoplan's tuned_max_relative_difference "
        "(tuned against stock TorchScript inside its run; worst round), and whether it is within "
        "1e-5", "",
        "| model | batch | threads | ORT ms | memoplan tuned ms | tuned / ORT | stock ms | "
        "ORT accuracy | tuned accuracy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    medians, notes = {}, []
    for key in sorted(cells, key=lambda k: (models.index(k[0]) if k[0] in models else 99, k[1:])):
        ort, mp = cells[key].get("ort", {}), cells[key].get("memoplan", {})
        failed = [r for r in list(ort.values()) + list(mp.values()) if "ms" not in r]
        notes += [f"- {key[0]} b{key[1]} t{key[2]} round {r['round']} {r['side']}: exit code "
                  f"{r['returncode']}: {r['stderr_tail'].strip()[-200:]}" for r in failed]
        ratios = [mp[i]["ms"] / ort[i]["ms"] for i in sorted(ort)
                  if i in mp and "ms" in mp[i] and "ms" in ort[i]]
        if ratios:
            medians[key] = statistics.median(ratios)
        ort_ms = [r["ms"] for r in ort.values() if "ms" in r]
        mp_reports = [r["report"] for r in mp.values() if "ms" in r]
        ort_acc = max((r["max_relative_difference"] for r in ort.values() if "ms" in r),
                      default=None)
        mp_acc = max((p["tuned_max_relative_difference"] for p in mp_reports), default=None)
        within = all(p["tuned_within_tolerance"] for p in mp_reports)
        differed = any(not p["outputs_identical"] for p in mp_reports)
        lines.append("| %s | %d | %d | %s | %s | %s | %s | %s | %s |" % (
            *key, fmt_range(ort_ms, "%.2f"), fmt_range([p["tuned_ms"] for p in mp_reports],
                                                       "%.2f"),
            fmt_range(ratios), fmt_range([p["stock_ms"] for p in mp_reports], "%.2f"),
            "-" if ort_acc is None else "%.2g" % ort_acc,
            "-" if mp_acc is None else "%.2g (%s)%s" % (
                mp_acc, "within 1e-5" if within else "over 1e-5",
                "; planned outputs differed" if differed else "")))
    lines.append("")
    if medians:
        geomean = math.exp(statistics.fmean(math.log(v) for v in medians.values()))
        worst = max(medians, key=medians.get)
        lines.append(f"Geometric mean of the {len(medians)} cells' median ratios: {geomean:.3f}; "
                     f"worst cell: {worst[0]} b{worst[1]} t{worst[2]} ({medians[worst]:.3f}).")
    if settings.get("also_env"):
        lines += report_also(cells, models, settings["also_env"])
    if settings.get("memory"):
        lines += report_memory(cells, models)
    lines += [""] + notes if notes else []
    text = "\n".join(lines).rstrip() + "\n"
    open(os.path.join(out, "report.md"), "w").write(text)
    return text


def report_memory(cells, models):
    """The memory table: each side's peak RSS and net (peak - RSS before the model), MiB."""
    mib = 1 << 20
    lines = ["", "Memory, MiB, median over the rounds: peak RSS (VmHWM) of the process and net = "
             "peak - its RSS before the model (ORT: before the InferenceSession; memoplan: the "
             "probe's before torch::jit::load). memoplan's figures come from `memoplan run`'s "
             "probes, one process per copy.", "",
             "| model | batch | threads | ORT peak | ORT net | tuned peak | tuned net | "
             "stock planned peak | stock planned net | tuned net / ORT net |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in sorted(cells, key=lambda k: (models.index(k[0]) if k[0] in models else 99, k[1:])):
        ort = [r["report"] for r in cells[key].get("ort", {}).values()
               if "report" in r and r["report"].get("peak_rss_bytes")]
        mp = [r["report"] for r in cells[key].get("memoplan", {}).values()
              if "report" in r and r["report"].get("peak_rss_bytes_tuned")]
        if not ort or not mp:
            continue
        med = statistics.median
        ort_peak = med(r["peak_rss_bytes"] for r in ort)
        ort_net = med(r["peak_rss_bytes"] - r["rss_before_session_bytes"] for r in ort)
        tuned_peak = med(r["peak_rss_bytes_tuned"] for r in mp)
        tuned_net = med(r["peak_rss_bytes_tuned"] - r["runtime_rss_bytes"] for r in mp)
        planned_peak = med(r["peak_rss_bytes_planned"] for r in mp)
        planned_net = med(r["peak_rss_bytes_planned"] - r["runtime_rss_bytes"] for r in mp)
        lines.append("| %s | %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f |" % (
            *key, ort_peak / mib, ort_net / mib, tuned_peak / mib, tuned_net / mib,
            planned_peak / mib, planned_net / mib, tuned_net / ort_net))
    return lines


def report_also(cells, models, also_env):
    """The second table: memoplan's default against memoplan with --also-env, per round."""
    lines = ["", f"memoplan tuned against memoplan tuned with `{also_env}` (same rounds; ratio: "
             "default / with it, median [min–max]; below 1: the default is faster):", "",
             f"| model | batch | threads | memoplan ms | with {also_env} ms | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    ratios_all = []
    for key in sorted(cells, key=lambda k: (models.index(k[0]) if k[0] in models else 99, k[1:])):
        mp, env = cells[key].get("memoplan", {}), cells[key].get("memoplan_env", {})
        ratios = [mp[i]["ms"] / env[i]["ms"] for i in sorted(env)
                  if i in mp and "ms" in mp[i] and "ms" in env[i]]
        if ratios:
            ratios_all.append(statistics.median(ratios))
        lines.append("| %s | %d | %d | %s | %s | %s |" % (
            *key, fmt_range([r["ms"] for r in mp.values() if "ms" in r], "%.2f"),
            fmt_range([r["ms"] for r in env.values() if "ms" in r], "%.2f"), fmt_range(ratios)))
    if ratios_all:
        geomean = math.exp(statistics.fmean(math.log(v) for v in ratios_all))
        lines += ["", f"Geometric mean of the {len(ratios_all)} cells' median ratios: "
                  f"{geomean:.3f}."]
    return lines


def main():
    args = parse_args()
    if args.report_only:
        print(report(args.report_only), end="")
        return
    # Absolute: the sweep's model paths are made from it and read from other directories.
    out = os.path.abspath(args.out or os.path.join(ROOT, "bench", "results",
                                                   time.strftime("ort_%Y%m%dT%H%M%SZ",
                                                                 time.gmtime())))
    measure(args, out)
    print(report(out), end="")
    print(f"run_ort_compare: {os.path.join(out, 'report.md')}")


if __name__ == "__main__":
    main()
