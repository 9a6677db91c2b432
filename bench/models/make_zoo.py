"""Writes the model zoo: TorchScript files that `memoplan run` (and LibTorch) load without Python.

Run it with Debian's Python, the one that has torch and torchvision:

    /usr/bin/python3 bench/models/make_zoo.py                  # every model into models/
    /usr/bin/python3 bench/models/make_zoo.py --only resnet18  # one (comma-separated: several)
    /usr/bin/python3 bench/models/make_zoo.py --out DIR --force --list
    python3 bench/models/make_zoo.py --format pt2 --only resnet18,bert_encoder  # PyTorch >= 2.6

Random weights with a fixed seed (nothing is downloaded). Each model is exported with
torch.jit.script when that works (scripting succeeds and the scripted module runs its example
input), else with torch.jit.trace on the example input; the manifest says which and why. Each file
carries its default input in extra files of the archive (`input_shape`, e.g. `1x3x224x224`;
`input_dtype`, e.g. `float32`; `input_high` for token ids: they are drawn from [0, input_high)), so
`memoplan run MODEL.pt` needs no --input. DIR/manifest.json lists every model made so far: name,
file, input shape, dtype, export method. Existing files are kept unless --force.

--format pt2 (PyTorch >= 2.6: scripts/debian13.sh shell) writes AOTInductor packages instead,
NAME.pt2, as PyTorch documents them for C++ deployment: torch.export.export on the example, then
torch._inductor.aoti_compile_and_package, with the same input in the package's metadata
(inductor_configs "aot_inductor.metadata"), which memoplan run and memoplan-serve read. A package
runs the shapes it was exported for. Their manifest: DIR/manifest.pt2.json.
"""
import argparse
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_models import MODELS  # noqa: E402

SEED = 0
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models")


def shape_text(tensor):
    return "x".join(str(d) for d in tensor.shape)


def dtype_text(tensor):
    return str(tensor.dtype).replace("torch.", "")


def export(model, example):
    """Returns (TorchScript module, "script" or "trace", why it was traced or "")."""
    with torch.no_grad():
        try:
            with warnings.catch_warnings():
                # googlenet/inception_v3 warn that scripted they return their namedtuple.
                warnings.simplefilter("ignore")
                scripted = torch.jit.script(model)
                scripted(example)  # scripting can succeed on a module that then fails to run
            return scripted, "script", ""
        except Exception as error:  # noqa: BLE001 - any failure falls back to tracing
            reason = "torch.jit.script failed: " + str(error).strip().splitlines()[0][:200]
        # strict=False: dict outputs (the segmentation models) are allowed.
        traced = torch.jit.trace(model, example, check_trace=False, strict=False)
        return traced, "trace", reason


def package(model, example, metadata, path):
    """An AOTInductor package of `model` at `path` (atomically); returns (method, note)."""
    tmp = path + ".tmp.pt2"
    with torch.no_grad():
        exported = torch.export.export(model, (example,))
        torch._inductor.aoti_compile_and_package(
            exported, package_path=tmp, inductor_configs={"aot_inductor.metadata": metadata})
    os.replace(tmp, path)
    return "torch.export+aoti_compile_and_package", ""


def make(name, out_dir, force, fmt="pt"):
    """Writes OUT_DIR/NAME.pt (or .pt2) unless it is there; returns its manifest entry."""
    builder, high = MODELS[name]
    path = os.path.join(out_dir, name + "." + fmt)
    manifest = read_manifest(out_dir, fmt)
    if not force and os.path.exists(path) and name in manifest:
        return manifest[name], False
    torch.manual_seed(SEED)  # per model: the same file whatever else is made with it
    model, example = builder()
    started = time.monotonic()
    extra = {"input_shape": shape_text(example), "input_dtype": dtype_text(example)}
    if high is not None:
        extra["input_high"] = str(high)
    if fmt == "pt2":
        method, reason = package(model, example, extra, path)
    else:
        module, method, reason = export(model, example)
        tmp = path + ".tmp"
        module.save(tmp, _extra_files=extra)
        os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file
    entry = {
        "name": name,
        "file": os.path.basename(path),
        "input_shape": list(example.shape),
        "dtype": dtype_text(example),
        "export": method,
        "parameters": sum(p.numel() for p in model.parameters()),
        "bytes": os.path.getsize(path),
        "export_seconds": round(time.monotonic() - started, 1),
    }
    if high is not None:
        entry["input_high"] = high
    if reason:
        entry["note"] = reason
    return entry, True


def manifest_name(fmt):
    return "manifest.json" if fmt == "pt" else "manifest.pt2.json"


def read_manifest(out_dir, fmt="pt"):
    try:
        with open(os.path.join(out_dir, manifest_name(fmt))) as f:
            return {m["name"]: m for m in json.load(f)["models"]}
    except (OSError, ValueError, KeyError):
        return {}


def write_manifest(out_dir, entries, fmt="pt"):
    """Merges `entries` into DIR/manifest.json (manifest.pt2.json), in the zoo's order."""
    merged = read_manifest(out_dir, fmt)
    merged.update(entries)
    ordered = [merged[n] for n in MODELS if n in merged]
    # One line per model: the file reads as a table and diffs by model.
    rows = ",\n".join("    " + json.dumps(m) for m in ordered)
    text = (f'{{\n  "seed": {SEED},\n  "torch": {json.dumps(torch.__version__)},\n'
            f'  "models": [\n{rows}\n  ]\n}}\n')
    path = os.path.join(out_dir, manifest_name(fmt))
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: models/)")
    parser.add_argument("--only", default="", help="comma-separated model names (default: all)")
    parser.add_argument("--force", action="store_true", help="rebuild files that exist")
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    parser.add_argument("--format", choices=("pt", "pt2"), default="pt",
                        help="pt: TorchScript (default); pt2: AOTInductor packages (PyTorch "
                             ">= 2.6)")
    args = parser.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return 0
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"make_zoo: unknown model {', '.join(unknown)} (--list shows the models)",
              file=sys.stderr)
        return 2
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for name in names:
        entry, made = make(name, out_dir, args.force, args.format)
        write_manifest(out_dir, {name: entry}, args.format)  # after each: an interrupted run keeps what it made
        shape = "x".join(str(d) for d in entry["input_shape"])
        state = "made" if made else "kept"
        print(f"{name:20} {state} {os.path.join(out_dir, entry['file'])} {shape} "
              f"{entry['dtype']} {entry['export']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
