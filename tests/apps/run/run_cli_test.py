"""End-to-end checks of `memoplan run` (run through the memoplan binary, which hands it to
memoplan-run). Standard library only, except make-models (Debian's python3 with torch).

    run_cli_test.py make-models SOURCE_DIR MODELS_DIR  # resnet18 by the zoo script, and tiny.pt
    run_cli_test.py json   MEMOPLAN MODELS_DIR  # resnet18 --json: fields, identical, fewer mallocs
    run_cli_test.py tiny   MEMOPLAN MODELS_DIR  # int64 input, tuple/dict/list outputs, --input
    run_cli_test.py varying MEMOPLAN MODELS_DIR # --input with ranges: shape families (issue 18)
    run_cli_test.py errors MEMOPLAN MODELS_DIR  # every bad input: one line, exit code 2
    run_cli_test.py aoti MEMOPLAN PACKAGES_DIR  # AOTInductor packages (LibTorch >= 2.6, issue 55)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
FIELDS = ["model", "input", "threads", "unplanned_ms", "planned_ms", "unplanned_p99_ms",
          "planned_p99_ms", "slab_bytes", "lower_bound_bytes",
          "tensor_mallocs_per_pass_unplanned", "tensor_mallocs_per_pass_planned", "fallbacks",
          "planning_ms", "outputs_identical", "peak_rss_bytes_unplanned",
          "peak_rss_bytes_planned", "runtime_rss_bytes"]



def run(memoplan, *args, env=None):
    result = subprocess.run([memoplan, "run", *args], capture_output=True, text=True, env=env,
                            timeout=110)
    return result.returncode, result.stdout, result.stderr


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)


def make_models(source_dir, models):
    try:
        import torch  # noqa: F401
    except ImportError:
        print("no torch in", sys.executable)
        return SKIP
    zoo = os.path.join(source_dir, "bench", "models", "make_zoo.py")
    subprocess.run([sys.executable, zoo, "--out", models, "--only", "resnet18"], check=True)
    tiny = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_tiny_model.py")
    subprocess.run([sys.executable, tiny, os.path.join(models, "tiny.pt")], check=True)
    return 0


def check_report(out, code, stderr):
    check(code == 0, f"exit code {code}: {stderr}")
    report = json.loads(out)  # one object, nothing else on stdout
    for field in FIELDS:
        check(field in report, f"field {field} missing from {out}")
    check(report["outputs_identical"] is True, f"outputs differ: {out}")
    check(report["fallbacks"] == 0, f"fallbacks: {out}")
    check(report["slab_bytes"] >= report["lower_bound_bytes"] > 0, f"slab vs bound: {out}")
    check(report["unplanned_ms"] > 0 and report["planned_ms"] > 0, f"latency: {out}")
    check(report["planned_p99_ms"] >= report["planned_ms"], f"p99 below the median: {out}")
    check(report["tensor_mallocs_per_pass_planned"] < report["tensor_mallocs_per_pass_unplanned"],
          f"planning did not reduce mallocs: {out}")
    return report


def check_json(memoplan, models):
    model = os.path.join(models, "resnet18.pt")
    with tempfile.TemporaryDirectory() as tmp:
        svg = os.path.join(tmp, "heap.svg")
        code, out, err = run(memoplan, model, "--json", "--iters", "8", "--threads", "2",
                             "--heapmap", svg)
        report = check_report(out, code, err)
        check(report["input"] == "1x3x224x224", f"input from the file: {out}")
        # LibTorch's TensorExpr fuser stays off unless --fuser (the planned copies cannot fuse).
        check(report["tensorexpr_fuser"] is False, f"fuser on by default: {out}")
        check(report["threads"] == 2 and report["passes_compared"] == 8, f"counts: {out}")
        check(report["planned_passes"] == report["replayed_passes"] == 8, f"replayed: {out}")
        # resnet18: every tensor but the output is planned.
        check(report["tensor_mallocs_per_pass_planned"] <= 1.0, f"planned mallocs: {out}")
        # Each copy's peak in a process of its own: the planned one below (issue 16; measured
        # 236 vs 249 MiB at 1 thread, 246 vs 252 at 2).
        unplanned, planned = report["peak_rss_bytes_unplanned"], report["peak_rss_bytes_planned"]
        check(unplanned and planned and unplanned > 100 << 20, f"peak RSS: {out}")
        check(planned < unplanned, f"planned peak RSS not below unplanned: {out}")
        # The process before the model: LibTorch's libraries and more (~190 MB), below the peak.
        runtime = report["runtime_rss_bytes"]
        check(runtime and 20 << 20 < runtime < unplanned, f"runtime RSS: {out}")
        with open(svg) as f:
            check(f.read(200).lstrip().startswith(("<svg", "<?xml")), "heap map is no SVG")
        # The text report: same run, for people.
        code, out, err = run(memoplan, model, "--iters", "2", "--warmup", "1", "-s", "best")
        check(code == 0 and "bit-identical in all 2 passes" in out, f"text report: {out}{err}")
        check("strategy best" in out, f"strategy: {out}")
    print("ok: json report of resnet18", report)
    return 0


def check_tiny(memoplan, models):
    model = os.path.join(models, "tiny.pt")
    code, out, err = run(memoplan, model, "--input", "3x7", "--dtype", "int64", "--json",
                         "--iters", "5")
    report = check_report(out, code, err)
    check(report["input"] == "3x7" and report["dtype"] == "int64", f"input: {out}")
    check(report["intra_op"] == 1 and report["warm_passes"] == 0, f"defaults: {out}")
    print("ok: tuple/dict/list outputs of an int64-input model", report)
    # Two intra-op threads, each timed pass after an untimed one of the same copy.
    code, out, err = run(memoplan, model, "--input", "3x7", "--dtype", "int64", "--json",
                         "--iters", "3", "--intra-op", "2", "--warm-passes", "1", "--no-rss")
    report = check_report(out, code, err)
    check(report["intra_op"] == 2 and report["warm_passes"] == 1, f"--intra-op: {out}")
    check(report["passes_compared"] == 3, f"passes: {out}")
    # Blocks: each copy times passes in a row; 5 iterations in blocks of 2 are 2 + 2 + 1 passes.
    code, out, err = run(memoplan, model, "--input", "3x7", "--dtype", "int64", "--json",
                         "--iters", "5", "--block", "2", "--warm-passes", "1", "--no-rss")
    report = check_report(out, code, err)
    check(report["block"] == 2 and report["passes_compared"] == 5 and
          report["planned_passes"] == 5 + 3, f"--block (3 blocks, a warm pass each): {out}")
    # The tuned copy's distance from stock over the same outputs, dicts included (segmentation
    # models return {"out": ...}): a number, not -1 ("structures differ").
    code, out, err = run(memoplan, model, "--input", "3x7", "--dtype", "int64", "--json",
                         "--iters", "3", "--kernels", "tuned", "--no-rss")
    report = check_report(out, code, err)
    check(0 <= report["tuned_max_relative_difference"] <= 1e-5, f"tuned difference: {out}")
    return 0


def check_varying(memoplan, models):
    # Batch and length drawn per pass: after three profiled shapes every other one is planned
    # from the family's formulas, on its first pass.
    model = os.path.join(models, "tiny.pt")
    # The default strategy: the family's learned placement order keeps every slab as small as
    # `best` would make it.
    args = [model, "--input", "1:6x4:40", "--dtype", "int64", "--json", "--iters", "40",
            "--seed", "3", "--no-rss"]
    code, out, err = run(memoplan, *args)
    report = check_report(out, code, err)
    check(report["input"] == "1:6x4:40" and report["seed"] == 3, f"input: {out}")
    check(report["distinct_shapes"] >= 20, f"distinct shapes: {out}")
    check(report["planned_pass_fraction"] >= 0.95, f"planned pass fraction: {out}")
    check(report["profiled_passes"] <= 6, f"profiled passes: {out}")
    check(report["family_plans"] >= report["distinct_shapes"] - 6, f"family plans: {out}")
    check(report["lower_bound_bytes_max"] > 0, f"lower bound of the largest: {out}")
    check(report["slab_bytes_max"] <= 1.1 * report["lower_bound_bytes_max"], f"slab max: {out}")
    # The same seed draws the same shapes: the same figures.
    code, again, err = run(memoplan, *args)
    again = check_report(again, code, err)
    for field in ["distinct_shapes", "profiled_passes", "family_plans", "largest_shape"]:
        check(again[field] == report[field], f"{field} differs between two runs: {out} {again}")
    print("ok: varying shapes of tiny.pt", report)
    # Lengths as requests bring them: most short, a long tail.
    code, out, err = run(memoplan, model, "--input", "1x4:200", "--dtype", "int64", "--json",
                         "--iters", "60", "--seed", "5", "--draw", "lognormal", "--no-rss")
    skewed = check_report(out, code, err)
    check(skewed["draw"] == "lognormal", f"draw: {out}")
    check(skewed["planned_pass_fraction"] >= 0.95, f"lognormal planned fraction: {out}")
    check(skewed["slab_bytes_max"] <= 1.1 * skewed["lower_bound_bytes_max"], f"slab max: {out}")
    print("ok: lognormal lengths of tiny.pt", skewed)
    return 0


def check_budget(memoplan, models):
    # resnet18 under half its weights + slab (a quarter is below its smallest feasible budget,
    # 18.7 MiB: layer4's 3x3 weight and its per-call reorder): the sampled peak under the budget, outputs
    # bit-identical, the weight file in the directory given.
    model = os.path.join(models, "resnet18.pt")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, MEMOPLAN_WEIGHTS_DIR=tmp)
        code, out, err = run(memoplan, model, "--json", "--iters", "3", "--warmup", "1",
                             "--budget", "50%", "--no-rss", env=env)
        report = check_report(out, code, err)
        check(report["budget"] == "50%" and report["page_cache"] == "warm", f"budget: {out}")
        weights = report["weights_bytes"]
        check(weights > 40 << 20, f"resnet18 weights: {out}")
        budget = report["budget_bytes"]
        check(abs(budget - 0.5 * (weights + report["slab_bytes"])) < 0.01 * budget,
              f"50% of weights + slab: {out}")
        check(0 < report["peak_resident_bytes"] <= budget, f"peak over the budget: {out}")
        check(report["budget_planned_peak_bytes"] <= budget, f"planned peak: {out}")
        check(report["budget_streamed_bytes"] > 0, f"nothing streamed: {out}")
        check(report["outputs_identical"] and report["passes_compared"] == 6, f"outputs: {out}")
        check(report["budgeted_ms"] > 0, f"budgeted_ms: {out}")
        check(report["weight_file"].startswith(tmp + "/"), f"weight file: {out}")
        # Below the smallest feasible budget: one line naming it.
        check_error(memoplan, [model, "--budget", "1MiB", "--iters", "1", "--no-rss", "-q"],
                    "below the smallest feasible budget", env=env)
    print("ok: resnet18 under a 50% budget", report)
    return 0


def check_error(memoplan, args, expect, env=None):
    code, out, err = run(memoplan, *args, env=env)
    # A phase that took over a second (loading, on a loaded machine) prints its time on its own
    # line before the error: not an error line.
    lines = [line for line in err.strip().splitlines()
             if not re.fullmatch(r"memoplan run: .* [0-9.]+ s", line)]
    check(code == 2, f"{args}: exit code {code}, stderr {err!r}")
    check(len(lines) == 1 and lines[0].startswith("memoplan run: error: "),
          f"{args}: not one error line: {err!r}")
    check(expect in lines[0], f"{args}: {expect!r} not in {lines[0]!r}")
    check(out == "", f"{args}: stdout {out!r}")
    print("ok:", args, "->", lines[0])


def check_errors(memoplan, models):
    resnet = os.path.join(models, "resnet18.pt")
    with tempfile.TemporaryDirectory() as tmp:
        garbage = os.path.join(tmp, "garbage.pt")
        with open(garbage, "wb") as f:
            f.write(os.urandom(4096))
        text = os.path.join(tmp, "notes.pt")
        with open(text, "w") as f:
            f.write("not a model\n")
        check_error(memoplan, [os.path.join(tmp, "missing.pt")], "missing.pt: no such file")
        check_error(memoplan, [tmp], "is a directory")
        check_error(memoplan, [garbage], "not a TorchScript file")
        # An AOTInductor package: which PyTorch it needs, or that .pt2 is not run yet (issue 55).
        package = os.path.join(tmp, "model.pt2")
        shutil.copy(garbage, package)
        check_error(memoplan, [package], "AOTInductor package (.pt2)")
        check_error(memoplan, [text], "not a TorchScript file")
        check_error(memoplan, [resnet, "--input", "1x3xfoo"], "bad input shape '1x3xfoo'")
        check_error(memoplan, [resnet, "--input", "1x0x224"], "bad input shape")
        check_error(memoplan, [resnet, "--input", "1x3x224:112x224"], "dim 2 has LO > HI")
        check_error(memoplan, [resnet, "--input", "1x3x:224x224"], "bad input '1x3x:224x224'")
        check_error(memoplan, [resnet, "--input", "100000x100000x100000"], "too large")
        check_error(memoplan, [resnet, "--input", "1x5x224x224"],
                    "does not run on input 1x5x224x224 float32")
        check_error(memoplan, [resnet, "--dtype", "complex32"], "unknown dtype")
        check_error(memoplan, [resnet, "--strategy", "nope"], "unknown strategy 'nope'")
        check_error(memoplan, [resnet, "--draw", "zipf"], "--draw: zipf not in")
        check_error(memoplan, [resnet, "--threads", "0"], "threads")
        check_error(memoplan, [resnet, "--intra-op", "0"], "intra-op")
        check_error(memoplan, [resnet, "--budget", "lots"], "--budget 'lots': expected bytes")
        check_error(memoplan, [resnet, "--budget", "0%"], "--budget '0%'")
        check_error(memoplan, [resnet, "--budget", "25%", "--threads", "2"],
                    "--budget runs one inference thread")
        check_error(memoplan, [os.path.join(models, "tiny.pt")], "carries no input shape")
        env = dict(os.environ, MEMOPLAN_MODELS=os.path.join(tmp, "nowhere"))
        check_error(memoplan, [], "make_zoo.py --only resnet18", env=env)
        # A memoplan binary with no memoplan-run beside it: a build without LibTorch.
        alone = os.path.join(tmp, "memoplan")
        shutil.copy(memoplan, alone)
        result = subprocess.run([alone, "run"], capture_output=True, text=True)
        check(result.returncode == 2 and "this build has no LibTorch: memoplan run is not "
              "available" in result.stderr, f"no memoplan-run: {result}")
        print("ok: no memoplan-run ->", result.stderr.strip())
    return 0


def check_aoti(memoplan, packages):
    """tiny_cnn.pt2 and tiny_bert.pt2 (tests/torch_ext/aoti/make_packages.py): their run() planned
    as one call, every timed pass fully planned, one tensor malloc a pass (the output), outputs
    bit-identical to the unplanned copy's, the input from the package's metadata; the options that
    rewrite a TorchScript graph refused."""
    for name in ("tiny_cnn", "tiny_bert"):
        package = os.path.join(packages, name + ".pt2")
        code, out, err = run(memoplan, package, "--json", "-q", "--iters", "12", "--warmup", "2",
                             "--threads", "2")
        report = check_report(out, code, err)
        check(report["format"] == "aot_inductor", f"{name}: format {report['format']}")
        check(report["input"] == {"tiny_cnn": "1x3x32x32", "tiny_bert": "1x16"}[name],
              f"{name}: input {report['input']} is not the package's metadata")
        check(report["planned_pass_fraction"] == 1.0,
              f"{name}: {report['planned_pass_fraction']} of the timed passes fully planned")
        check(report["tensor_mallocs_per_pass_planned"] == 1,
              f"{name}: {report['tensor_mallocs_per_pass_planned']} tensor mallocs a pass, "
              "expected the output's only")
        check(report["peak_rss_bytes_planned"] > 0 and report["peak_rss_bytes_unplanned"] > 0,
              f"{name}: peak RSS not measured: {report.get('rss_error')}")
        print(f"ok: {name}.pt2: {report['planned_tensors']} planned tensors a pass, slab "
              f"{report['slab_bytes']} B (bound {report['lower_bound_bytes']}), "
              f"{report['tensor_mallocs_per_pass_unplanned']:.0f} -> "
              f"{report['tensor_mallocs_per_pass_planned']:.0f} tensor mallocs a pass")
    package = os.path.join(packages, "tiny_cnn.pt2")
    for flags in (["--kernels", "tuned"], ["--memory", "min"], ["--budget", "50%"],
                  ["--heapmap", "x.svg"]):
        check_error(memoplan, [package, *flags], "an AOTInductor package runs Inductor's kernels")
    # AOTInductor checks no input shape: memoplan run checks them against the metadata's.
    check_error(memoplan, [package, "--input", "1x3x16x16"],
                "was exported for input 1x3x32x32 float32, not 1x3x16x16 float32")
    check_error(memoplan, [package, "--input", "1x3x8:32x32"], "was exported for input")
    return 0


def main():
    command, first, models = sys.argv[1:4]
    if command == "make-models":
        return make_models(first, models)
    if command == "aoti":
        return check_aoti(first, models)
    if not os.path.exists(os.path.join(models, "resnet18.pt")):
        print("no models (run.make_models was skipped)")
        return SKIP
    checks = {"json": check_json, "tiny": check_tiny, "varying": check_varying,
              "errors": check_errors, "budget": check_budget}
    return checks[command](first, models)


if __name__ == "__main__":
    sys.exit(main())
