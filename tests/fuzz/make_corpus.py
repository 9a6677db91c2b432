#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora under tests/fuzz/corpus/ (committed; re-run only to
change them on purpose). Seeds are small real inputs: the committed model traces (whole and cut
to a few rows, as JSON and CSV), plans the memoplan CLI makes of them, MEMOPLAN_CONF strings from
the docs, KServe v2 bodies as tests/apps/serve sends them, and replay scripts shaped like a network.

Usage: tests/fuzz/make_corpus.py [PATH/TO/memoplan]   (default build/src/memoplan)
"""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRACES = os.path.join(ROOT, "tests", "data", "traces")
CLI = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "src", "memoplan")


def write(target, name, data):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def load(model):
    with gzip.open(os.path.join(TRACES, model + ".json.gz"), "rt") as f:
        return json.load(f)


def cut(trace, rows):
    """The first `rows` rows of every column (lifetimes stay well-formed: end >= begin)."""
    t = json.loads(json.dumps(trace))
    columns = {k: v[:rows] for k, v in t["columns"].items()}
    t["columns"] = columns
    return t


def trace_json():
    for model in ("squeezenet1_0", "vgg16", "transformer_encoder"):
        write("trace_json", model + ".json", json.dumps(load(model)))
    for model in ("resnet18", "mobilenet_v2", "swin_t", "densenet121"):
        write("trace_json", model + "-12.json", json.dumps(cut(load(model), 12)))
    # Every column and meta field, escapes, outer_op, a negative node, explicit alignment.
    write("trace_json", "all_columns.json", json.dumps({
        "format": "memoplan-trace", "version": 1,
        "meta": {"name": "x", "model_fingerprint": "f", "input_shapes": "1x3", "source": "s",
                 "threads": 2},
        "default_align": 128, "ops": ["aten::empty", "aten::conv2d"],
        "columns": {"id": [5, 7, 9], "size": [4096, 0, 100], "begin": [0, 1, 1],
                    "end": [3, 1, 2], "align": [0, 4096, 16], "escapes": [0, 0, 1],
                    "op": [0, 1, 0], "outer_op": [1, 1, 0], "node": [-1, 3, 4],
                    "callsite": [123, 0, 18446744073709551615], "thread": [0, 1, 0]}}))
    # Sharing claims (memory min): a coalesced chain and a concat's inputs inside its output.
    write("trace_json", "sharing.json", json.dumps({
        "format": "memoplan-trace", "version": 1,
        "columns": {"size": [1024, 1024, 1024, 2048, 1024], "begin": [0, 2, 3, 5, 4],
                    "end": [3, 6, 7, 9, 6], "alias_of": [-1, 0, -1, -1, -1],
                    "slice_of": [-1, 3, 3, -1, -1], "slice_offset": [0, 0, 1024, 0, 0]}}))
    write("trace_json", "empty.json",
          '{"format":"memoplan-trace","version":1,"columns":{"size":[],"begin":[],"end":[]}}')


def trace_csv():
    for model in ("resnet18", "transformer_encoder", "vgg16"):
        t = load(model)
        c = t["columns"]
        ops = t.get("ops", [])
        lines = ["size,begin,end,id,align,name"]
        for i in range(min(24, len(c["size"]))):
            name = ops[c["op"][i]] if "op" in c and ops else ""
            lines.append("%d,%d,%d,%d,%s,%s" % (c["size"][i], c["begin"][i], c["end"][i],
                                               c["id"][i], c["align"][i] or "", name))
        write("trace_csv", model + ".csv", "\n".join(lines) + "\n")
    write("trace_csv", "docs_example.csv",
          "size,begin,end,id,align,name\n802816,0,5,0,64,conv1\n4096,1,2,1,,workspace\n")
    write("trace_csv", "quoted.csv",
          '# a comment\r\nname,end,size,begin\r\n"conv, 1",4,1024,0\r\n"say ""hi""",2,0,2\r\n')
    write("trace_csv", "minimal.csv", "size,begin,end\n1,0,0\n")


def plan_json():
    with tempfile.TemporaryDirectory() as tmp:
        for model, strategy in (("transformer_encoder", "greedy_by_size"),
                                ("squeezenet1_0", "mincost_flow"), ("vgg16", "naive")):
            out = os.path.join(tmp, "p.json")
            subprocess.run([CLI, "plan", os.path.join(TRACES, model + ".json.gz"), "-s", strategy,
                            "-o", out], check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                write("plan_json", "%s-%s.json" % (model, strategy), f.read())
    write("plan_json", "small.json", json.dumps({
        "format": "memoplan-plan", "version": 1, "strategy": "greedy_by_size",
        "status": "optimal", "slab_bytes": 8192, "alignment": 64, "lower_bound_bytes": 8192,
        "planning_ms": 0.41, "trace_fingerprint": "9c3e0d5a7f2b1e44", "note": "",
        "offsets": [0, 4096, 0, 64, 128, 0, 256, 1024]}))
    write("plan_json", "minimal.json",
          '{"format":"memoplan-plan","version":1,"slab_bytes":0,"alignment":1,"offsets":[]}')


def conf():
    for i, text in enumerate((
            "stats_print:true",
            "mode:profile,trace:/tmp/r18-%t.trace.json.gz",
            "mode:replay,trace:/tmp/r18-0.trace.json.gz,plan:/tmp/r18.plan.json,stats_print:true",
            "mode:auto,min_size:4096,passes:2,threads:64,callsite_depth:4",
            "mode:off,fallback:jemalloc",
            "slab_max:1g,max_period:65536,detect:false,log:/tmp/memoplan.log",
            "callsite_depth:0,min_size:64k,slab_max:2G",
            "min_size:1MB,threads:4096,detect:0,stats_print:1")):
        write("conf", "conf%d" % i, text)


def kserve():
    x = {"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [0.5, -1.25, 3e38]}
    write("kserve", "json_fp32", json.dumps({"id": "r1", "inputs": [x]}))
    write("kserve", "nested_outputs", json.dumps({
        "inputs": [{"name": "x", "shape": [2, 2], "datatype": "INT64", "data": [[1, -2], [3, 4]]},
                   {"name": "y", "shape": [3], "datatype": "BOOL", "data": [True, False, True]}],
        "outputs": [{"name": "x", "parameters": {"binary_data": True}}, {"name": "y"}],
        "parameters": {"binary_data_output": False}}))
    for datatype in ("FP16", "BF16", "FP64", "INT8", "UINT8", "INT16", "INT32"):
        write("kserve", "json_" + datatype.lower(), json.dumps({"inputs": [
            {"name": "x", "shape": [4], "datatype": datatype, "data": [0, 1, 2, 100]}]}))
    # The binary tensor data extension: "H<header length>\n", the JSON header, raw bytes.
    raw = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    header = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "parameters": {"binary_data_output": True}})
    write("kserve", "binary_fp32", b"H%d\n" % len(header) + header.encode() + raw)
    write("kserve", "error_datatype", json.dumps({"inputs": [
        {"name": "x", "shape": [1], "datatype": "STRING", "data": ["a"]}]}))


def replay_matcher():
    # Ops (replay_matcher_fuzz.cc): 0-2 alloc SIZE, 3 free WHICH, 4 free oldest, 5 realloc WHICH
    # SIZE, 6 pass end, 7 free WHICH elsewhere (bit 3 set) or run the profiled pass again.
    network = [0, 40, 0, 4, 0, 12, 3, 0, 0, 20, 3, 1, 0, 7, 4, 4, 32 | 0, 9, 4, 4]  # calloc at 32
    write("replay_matcher", "marked_network", bytes([1 | (3 << 1)] + network + [6]))
    # No marks: 16 + 24 repeats of the pass, enough for automatic detection to find and replay it.
    write("replay_matcher", "detected_network",
          bytes([0 | (15 << 1)] + network + [6] + [7, 0] * 24))
    deviant = [0, 40, 0, 4, 0, 12, 0, 12, 8 | 7, 1, 5, 0, 30, 4, 4, 4]
    write("replay_matcher", "marked_deviations",
          bytes([1 | (2 << 1)] + network + [6] + deviant + [6] + [7, 0] + [6] + network[:6]))
    aligned = [16 | 0, 4, 24 | 1, 8, 0, 230, 4, 4, 4]
    write("replay_matcher", "aligned_large",
          bytes([1 | (2 << 1)] + aligned + [6] + aligned + [6]))


if __name__ == "__main__":
    trace_json()
    trace_csv()
    plan_json()
    conf()
    kserve()
    replay_matcher()
