#!/usr/bin/python3
"""Record the tensor allocations of one inference pass of torchvision models.

Run with Debian's interpreter, which has torch 1.13 and torchvision 0.14:

    /usr/bin/python3 scripts/record_torch_traces.py --gzip --check

For each model (random weights, fixed seed, nothing downloaded) the script
runs a few warm-up passes, then profiles ONE forward pass with
``torch.profiler.profile(activities=[CPU], profile_memory=True)``.  The
memory events are read from
``prof.profiler.kineto_results.experimental_event_tree()``: nodes whose
``tag`` is ``torch._C._profiler._EventType.Allocation`` carry
``extra_fields.ptr``, ``extra_fields.alloc_size`` (negative = free) and
``extra_fields.total_allocated``; their ``parent`` is the innermost
enclosing op.  The events are converted to the columnar "memoplan-trace"
version 1 format (docs/FORMATS.md); see docs/TRACES.md.
"""

import argparse
import gc
import gzip
import hashlib
import json
import os
import sys
import time

import torch
import torchvision
from torch import nn
from torch.profiler import ProfilerActivity, profile

NO_OP = "(no op)"          # op name of allocations made outside any aten op
CALLSITE_MASK = (1 << 53) - 1  # keep hashes exact for double-based JSON readers


def build_transformer():
    """A small transformer encoder: d_model 256, 4 heads, 4 layers."""
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=4)


def model_table():
    """Map model name -> (constructor, input kind).  Input kind 'image' uses
    --size (inception_v3 forces 299), 'seq' is (batch, 128, 256)."""
    m = torchvision.models
    seg = torchvision.models.segmentation
    table = {
        "resnet18": (lambda: m.resnet18(weights=None), "image"),
        "resnet50": (lambda: m.resnet50(weights=None), "image"),
        "googlenet": (lambda: m.googlenet(weights=None, aux_logits=False,
                                          init_weights=False), "image"),
        "squeezenet1_0": (lambda: m.squeezenet1_0(weights=None), "image"),
        "mnasnet0_75": (lambda: m.mnasnet0_75(weights=None), "image"),
        "mobilenet_v2": (lambda: m.mobilenet_v2(weights=None), "image"),
        "efficientnet_b0": (lambda: m.efficientnet_b0(weights=None), "image"),
        "densenet121": (lambda: m.densenet121(weights=None), "image"),
        "inception_v3": (lambda: m.inception_v3(weights=None, aux_logits=False,
                                                init_weights=False), "image299"),
        "vgg16": (lambda: m.vgg16(weights=None), "image"),
        "regnet_x_8gf": (lambda: m.regnet_x_8gf(weights=None), "image"),
        "fcn_resnet50": (lambda: seg.fcn_resnet50(weights=None, weights_backbone=None,
                                                  aux_loss=False), "image"),
        "transformer_encoder": (build_transformer, "seq"),
    }
    if hasattr(m, "swin_t"):
        table["swin_t"] = (lambda: m.swin_t(weights=None), "image")
    return table


def make_input(kind, batch, size):
    """Random input tensor for a model's input kind."""
    if kind == "seq":
        return torch.randn(batch, 128, 256)
    side = 299 if kind == "image299" else size
    return torch.randn(batch, 3, side, side)


def fingerprint(model):
    """First 16 hex chars of the sha1 of the state_dict (names, dtypes, shapes, bytes)."""
    h = hashlib.sha1()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().contiguous().cpu()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def profile_one_pass(model, x, warmup):
    """Warm up, then profile one forward pass; return the raw memory events.

    Each event is a dict with ptr, size (negative = free), total (the
    allocator's running total), tid, op (innermost op name) and stack (op
    names from the outermost to the innermost), in time order.
    """
    with torch.inference_mode():
        for _ in range(warmup):
            out = model(x)
            del out
        gc.collect()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = model(x)
        del out
    events = []
    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk = [root]
        while walk:  # pre-order DFS: record order within one thread
            node = walk.pop()
            walk.extend(reversed(node.children))
            if node.tag != torch._C._profiler._EventType.Allocation:
                continue
            ef = node.extra_fields
            stack, p = [], node.parent
            while p is not None:
                stack.append(p.name)
                p = p.parent
            stack.reverse()
            events.append({"ptr": ef.ptr, "size": ef.alloc_size, "total": ef.total_allocated,
                           "time": node.start_time_ns, "tid": node.start_tid,
                           "op": stack[-1] if stack else NO_OP, "stack": stack,
                           "seq": len(events)})
    events.sort(key=lambda e: (e["time"], e["seq"]))
    return events


def callsite_hash(stack):
    """64-bit FNV-1a of the op-name chain, masked to 53 bits."""
    h = 0xcbf29ce484222325
    for byte in ">".join(stack).encode():
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h & CALLSITE_MASK


def convert(events):
    """Pair allocations with frees by pointer, in time order.

    Frees of pointers not allocated in the pass are dropped; the remaining
    events are numbered 0, 1, 2, ... (the event clock).  Returns (rows,
    ticks) where rows are dicts sorted by begin and ticks is the number of
    clock ticks; unfreed allocations get escapes=1 and end=ticks.
    """
    live, kept, rows = {}, [], []
    for e in events:
        if e["size"] >= 0:
            if e["ptr"] in live:
                raise RuntimeError(f"pointer {e['ptr']:#x} allocated twice without a free")
            row = {"size": e["size"], "begin": len(kept), "end": None, "op": e["op"],
                   "stack": e["stack"], "tid": e["tid"], "ptr": e["ptr"]}
            live[e["ptr"]] = row
            rows.append(row)
            kept.append(e)
        elif e["ptr"] in live:
            row = live.pop(e["ptr"])
            if -e["size"] != row["size"]:
                raise RuntimeError(f"free of {-e['size']} bytes at {e['ptr']:#x}, "
                                   f"allocated {row['size']}")
            row["end"] = len(kept)
            kept.append(e)
    ticks = len(kept)
    for row in rows:
        row["escapes"] = int(row["end"] is None)
        if row["escapes"]:
            row["end"] = ticks
    return rows, ticks


def to_document(rows, meta, op_level="innermost"):
    """Build the memoplan-trace version 1 JSON document from converted rows.

    The op column names the innermost enclosing op (often a factory such as
    aten::empty) or, with op_level "outermost", the op called from Python.
    """
    ops, op_index, tids = [], {}, {}
    op_col, thread_col = [], []
    for r in rows:
        op = r["op"] if op_level == "innermost" or not r["stack"] else r["stack"][0]
        if op not in op_index:
            op_index[op] = len(ops)
            ops.append(op)
        op_col.append(op_index[op])
        thread_col.append(tids.setdefault(r["tid"], len(tids)))
    n = len(rows)
    return {
        "format": "memoplan-trace", "version": 1, "meta": meta, "default_align": 64,
        "ops": ops,
        "columns": {
            "id": list(range(n)),
            "size": [r["size"] for r in rows],
            "begin": [r["begin"] for r in rows],
            "end": [r["end"] for r in rows],
            "align": [0] * n,
            "escapes": [r["escapes"] for r in rows],
            "op": op_col,
            "callsite": [callsite_hash(r["stack"]) for r in rows],
            "thread": thread_col,
        },
    }


def peak_live_bytes(sizes, begins, ends):
    """Most bytes live at once under half-open lifetimes (sizes not rounded)."""
    deltas = {}
    for s, b, e in zip(sizes, begins, ends):
        e = max(e, b + 1)  # end == begin is live for one tick
        deltas[b] = deltas.get(b, 0) + s
        deltas[e] = deltas.get(e, 0) - s
    live = peak = 0
    for t in sorted(deltas):
        live += deltas[t]
        peak = max(peak, live)
    return peak


def write_document(doc, path, use_gzip):
    """Write compact JSON, gzip'd reproducibly (mtime 0) when asked."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        if use_gzip:
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
                gz.write(data)
        else:
            f.write(data)


def read_document(path):
    """Read a trace file, gzip detected by its magic bytes."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def check(path, rows, events):
    """Re-read the written file and check it; return a list of problems."""
    doc = read_document(path)
    problems = []
    cols = doc["columns"]
    lengths = {k: len(v) for k, v in cols.items()}
    if len(set(lengths.values())) != 1:
        problems.append(f"column lengths differ: {lengths}")
    if doc.get("format") != "memoplan-trace" or doc.get("version") != 1:
        problems.append("bad format/version")
    if any(e < b for b, e in zip(cols["begin"], cols["end"])):
        problems.append("a row has end < begin")
    if cols["size"] != [r["size"] for r in rows] or cols["begin"] != [r["begin"] for r in rows]:
        problems.append("file rows differ from the converted rows")
    if any(not 0 <= i < len(doc["ops"]) for i in cols["op"]):
        problems.append("op index out of range")
    # Pairing sanity: lifetimes at one pointer never overlap.
    by_ptr = {}
    for r, b, e in zip(rows, cols["begin"], cols["end"]):
        by_ptr.setdefault(r["ptr"], []).append((b, e))
    for ptr, spans in by_ptr.items():
        spans.sort()
        if any(spans[i][1] > spans[i + 1][0] for i in range(len(spans) - 1)):
            problems.append(f"two allocations alive at once at pointer {ptr:#x}")
    # Live bytes must follow the allocator's own running total, once the
    # memory allocated before the pass (and freed during it) is accounted for.
    paired_ptrs = set()
    live, base, off = 0, None, 0
    for e in events:
        if base is None:
            base = e["total"] - e["size"]
        if e["size"] >= 0:
            paired_ptrs.add(e["ptr"])
            live += e["size"]
        elif e["ptr"] in paired_ptrs:
            paired_ptrs.discard(e["ptr"])
            live += e["size"]
        else:
            off += e["size"]  # free of pre-pass memory
        if e["total"] - base - off != live:
            problems.append("live bytes disagree with the profiler's total_allocated")
            break
    return problems


def record_model(name, ctor, kind, args):
    """Build, profile, convert and write one model; return a result dict."""
    t0 = time.time()
    torch.manual_seed(args.seed)
    model = ctor().eval()
    x = make_input(kind, args.batch, args.size)
    events = profile_one_pass(model, x, args.warmup)
    rows, ticks = convert(events)
    meta = {"name": name, "model_fingerprint": fingerprint(model),
            "input_shapes": "x".join(str(d) for d in x.shape),
            "source": "torch.profiler", "threads": args.threads,
            "torch": torch.__version__, "torchvision": torchvision.__version__,
            "seed": args.seed, "clock_ticks": ticks, "op_level": args.op_level}
    doc = to_document(rows, meta, args.op_level)
    path = os.path.join(args.out, name + (".json.gz" if args.gzip else ".json"))
    write_document(doc, path, args.gzip)
    c = doc["columns"]
    result = {"name": name, "allocs": len(rows), "nonzero": sum(1 for s in c["size"] if s),
              "escapes": sum(c["escapes"]), "peak": peak_live_bytes(c["size"], c["begin"], c["end"]),
              "path": path, "bytes": os.path.getsize(path), "seconds": time.time() - t0,
              "input": meta["input_shapes"]}
    if args.check:
        result["problems"] = check(path, rows, events)
    return result


def parse_args(argv, names):
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="all",
                   help="comma-separated subset of: " + ",".join(names) + " (default all)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--size", type=int, default=224, help="image side (inception_v3: 299)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--warmup", type=int, default=2, help="warm-up passes before the profiled one")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--op-level", choices=["innermost", "outermost"], default="innermost",
                   help="op column: innermost enclosing op, or the op called from Python")
    p.add_argument("--out", default="bench/traces")
    p.add_argument("--gzip", action="store_true", help="write <model>.json.gz")
    p.add_argument("--check", action="store_true", help="re-read and validate each file")
    return p.parse_args(argv)


def main(argv=None):
    table = model_table()
    args = parse_args(argv, list(table))
    names = list(table) if args.models == "all" else args.models.split(",")
    unknown = [n for n in names if n not in table]
    if unknown:
        sys.exit(f"unknown model(s): {', '.join(unknown)}")
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    start, failed = time.time(), 0
    for name in names:
        ctor, kind = table[name]
        try:
            r = record_model(name, ctor, kind, args)
        except Exception as exc:  # keep going; report the failure
            failed += 1
            print(f"{name:20s} FAILED: {type(exc).__name__}: {exc}", flush=True)
            continue
        status = ""
        if "problems" in r:
            status = "  check: ok" if not r["problems"] else "  check: " + "; ".join(r["problems"])
            failed += bool(r["problems"])
        print(f"{r['name']:20s} input {r['input']:12s} allocs {r['allocs']:6d}  "
              f"nonzero {r['nonzero']:6d}  escapes {r['escapes']:3d}  peak {r['peak']:11d} B  "
              f"{r['seconds']:5.1f} s  -> {r['path']} ({r['bytes']} B){status}", flush=True)
    print(f"total {time.time() - start:.1f} s, {len(names) - failed}/{len(names)} ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
