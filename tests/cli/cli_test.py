#!/usr/bin/python3
"""The memoplan command as a user runs it: info, plan (--json, --capacity), validate, compare
(--csv, --markdown), heapmap, plan --list, --json of validate, compare and heapmap, and the exit
codes (0 fine, 1 an invalid plan, 2 bad
input with a message naming the file, 3 no plan within --capacity).

    /usr/bin/python3 tests/cli/cli_test.py build/src/memoplan tests/data/traces
"""
import csv
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print(f"FAIL: {what}")


def run(memoplan, *args):
    p = subprocess.run([memoplan, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def test_info_and_plan(memoplan, tmp):
    trace = write(os.path.join(tmp, "small.csv"), "size,begin,end\n100,0,2\n200,1,3\n50,2,4\n")
    rc, out, err = run(memoplan, "info", trace)
    check(rc == 0 and "lower" in out.lower(), f"info: rc {rc}, {out!r} {err!r}")

    plan = os.path.join(tmp, "small.plan.json")
    rc, out, err = run(memoplan, "plan", trace, "-o", plan, "--json")
    check(rc == 0, f"plan --json: rc {rc}, {err!r}")
    report = json.loads(out)
    for field in ("trace", "strategy", "status", "slab_bytes", "lower_bound_bytes", "ratio",
                  "planning_ms", "valid", "allocations", "note", "output"):
        check(field in report, f"plan --json has {field}: {report}")
    check(report["valid"] is True and report["allocations"] == 3, f"plan --json: {report}")
    check(report["slab_bytes"] >= report["lower_bound_bytes"] == 384, f"plan --json: {report}")

    rc, out, err = run(memoplan, "plan", "--list")
    check(rc == 0 and "greedy_by_size" in out and "mip" in out, f"plan --list: {out!r}")
    return trace, plan


def test_capacity(memoplan, tmp):
    # MiniMalloc's column names; greedy_by_size takes 11 units where 9 suffice.
    trace = write(os.path.join(tmp, "trap.csv"), "id,lower,upper,size\n0,0,3,2048\n1,0,2,3072\n"
                  "2,3,5,4096\n3,2,6,2048\n4,2,6,3072\n")
    rc, out, err = run(memoplan, "plan", trace, "-s", "exact", "--capacity", "9216", "--json")
    report = json.loads(out) if rc == 0 else {}
    check(rc == 0 and report.get("fits_capacity") is True and report["slab_bytes"] == 9216
          and report["capacity"] == 9216, f"plan -s exact --capacity 9216: rc {rc}, {out!r} {err!r}")
    rc, out, err = run(memoplan, "plan", trace, "-s", "exact", "--json")
    check(rc == 0 and json.loads(out)["status"] == "optimal", f"plan -s exact: {out!r} {err!r}")
    for strategy in ("exact", "greedy_by_size"):
        rc, out, err = run(memoplan, "plan", trace, "-s", strategy, "--capacity", "8192")
        check(rc == 3 and "no plan within --capacity 8192 bytes" in err and "valid" in out,
              f"plan -s {strategy} --capacity 8192 fails with exit 3: rc {rc}, {err!r}")
    rc, out, err = run(memoplan, "plan", trace, "--capacity", "9216", "--minimize")
    check(rc == 2, f"--capacity excludes --minimize: rc {rc}")


def test_validate(memoplan, tmp, trace, plan):
    rc, out, err = run(memoplan, "validate", trace, plan)
    check(rc == 0 and "valid" in out, f"validate of a good plan: rc {rc}, {out!r} {err!r}")

    with open(plan) as f:
        bad = json.load(f)
    # Rows 0 and 1 are alive together ([0,2) and [1,3)): the same offset makes them overlap.
    bad["offsets"][1] = bad["offsets"][0]
    tampered = write(os.path.join(tmp, "tampered.json"), json.dumps(bad))
    rc, out, err = run(memoplan, "validate", trace, tampered)
    check(rc == 1, f"validate of an overlapping plan exits 1: rc {rc}, {out!r} {err!r}")
    check("overlap" in (out + err).lower(), f"validate says why: {out!r} {err!r}")

    other = write(os.path.join(tmp, "other.csv"), "size,begin,end\n100,0,2\n")
    rc, out, err = run(memoplan, "validate", other, plan)
    check(rc != 0, f"a plan for another trace is refused: rc {rc}, {out!r} {err!r}")


def test_bad_input(memoplan, tmp):
    missing = os.path.join(tmp, "missing.csv")
    cases = {
        "missing file": ["info", missing],
        "malformed csv": ["info", write(os.path.join(tmp, "bad.csv"), "size,begin,end\n1,x,2\n")],
        "malformed json": ["plan", write(os.path.join(tmp, "bad.json"), "{\"allocations\": ["),
                           "-o", os.path.join(tmp, "never.json")],
        "unknown strategy": ["plan", write(os.path.join(tmp, "ok.csv"), "size,begin,end\n8,0,1\n"),
                             "-s", "no_such_strategy", "-o", os.path.join(tmp, "never.json")],
    }
    for name, args in cases.items():
        rc, out, err = run(memoplan, *args)
        check(rc == 2, f"{name}: exit 2, got {rc} ({err!r})")
        check(os.path.basename(args[1]) in err, f"{name}: the message names the file: {err!r}")
    check(not os.path.exists(os.path.join(tmp, "never.json")), "bad input writes no plan")

    garbage_plan = write(os.path.join(tmp, "garbage.plan.json"), "not json at all")
    rc, out, err = run(memoplan, "validate", os.path.join(tmp, "ok.csv"), garbage_plan)
    check(rc == 2 and "garbage.plan.json" in err, f"garbage plan: exit 2 naming it: {rc} {err!r}")

    for args in (["no_such_command"], ["plan"], ["info", "a.csv", "--no-such-option"], []):
        rc, out, err = run(memoplan, *args)
        check(rc != 0, f"usage error {args}: non-zero exit, got {rc}")


def test_compare(memoplan, data):
    traces = [os.path.join(data, "resnet18.json.gz"), os.path.join(data, "squeezenet1_0.json.gz")]
    rc, out, err = run(memoplan, "compare", *traces, "--csv", "-s", "greedy_by_size,naive")
    check(rc == 0, f"compare --csv: rc {rc}, {err!r}")
    rows = list(csv.DictReader(io.StringIO(out)))
    check(len(rows) == 4, f"compare --csv: 2 traces x 2 strategies, got {len(rows)}")
    for row in rows:
        check(float(row["ratio"]) >= 1.0, f"ratio >= 1: {row}")
        check(int(row["slab_bytes"]) >= int(row["lower_bound_bytes"]) > 0, f"slab >= bound: {row}")
    greedy = {r["trace"]: r for r in rows if r["strategy"] == "greedy_by_size"}
    naive = {r["trace"]: r for r in rows if r["strategy"] == "naive"}
    for name in greedy:
        check(int(greedy[name]["slab_bytes"]) <= int(naive[name]["slab_bytes"]),
              f"greedy_by_size no worse than naive on {name}")

    rc, out, err = run(memoplan, "compare", *traces, "--markdown", "-s", "greedy_by_size")
    lines = [line for line in out.splitlines() if line.startswith("|")]
    check(rc == 0 and len(lines) >= 4, f"compare --markdown: rc {rc}, {out!r}")
    check("resnet18" in lines[0] and "squeezenet1_0" in lines[0], f"markdown header: {lines[:1]}")
    check(set(lines[1].replace("|", "").replace(" ", "")) <= set("-:"), f"separator: {lines[1:2]}")

    # A folder stands for every trace file in it; --by-trace puts a trace on each row.
    rc, out, err = run(memoplan, "compare", data, "--by-trace", "--markdown", "-s",
                       "greedy_by_size")
    lines = [line for line in out.splitlines() if line.startswith("|")]
    names = sorted(f for f in os.listdir(data) if f.endswith((".json", ".json.gz", ".csv",
                                                             ".csv.gz")))
    check(rc == 0 and len(lines) == 2 + len(names), f"compare FOLDER --by-trace: rc {rc}, {out!r}")
    check(lines[2].split("|")[1].strip() == names[0].split(".")[0], f"first row: {lines[2]}")
    cells = [c.strip() for c in lines[2].split("|")[1:-1]]
    slab, ratio, ms = [v.strip() for v in cells[3].split(",")]
    check(int(slab) >= int(cells[2]) > 0 and float(ratio.rstrip("*")) >= 1.0 and float(ms) >= 0,
          f"row cells: {cells}")
    rc, out, err = run(memoplan, "compare", os.path.join(data, "no_such_folder"))
    check(rc != 0 and "no_such_folder" in err, f"missing folder: rc {rc}, {err!r}")


def test_heapmap(memoplan, tmp, data, trace, plan):
    for args, name in ((["heapmap", trace, plan], "given plan"),
                       (["heapmap", os.path.join(data, "resnet18.json.gz"), "-s", "greedy_by_size"],
                        "planned now")):
        svg = os.path.join(tmp, name.replace(" ", "_") + ".svg")
        rc, out, err = run(memoplan, *args, "-o", svg)
        check(rc == 0 and os.path.exists(svg), f"heapmap ({name}): rc {rc}, {err!r}")
        if not os.path.exists(svg):
            continue
        root = ET.parse(svg).getroot()  # raises on a document that is not well-formed
        check(root.tag.endswith("svg"), f"heapmap ({name}): root is <svg>, got {root.tag}")
        rects = [e for e in root.iter() if e.tag.endswith("rect")]
        check(len(rects) >= 3, f"heapmap ({name}): rectangles drawn, got {len(rects)}")
    rc, out, err = run(memoplan, "heapmap", trace, "-o", os.path.join(tmp, "x.svg"),
                       "--width", "10")
    check(rc != 0, f"heapmap with a width out of range fails: rc {rc}")


def one_json_object(what, rc, out, err):
    """stdout holds exactly one JSON object and nothing else; {} (and a failure) otherwise."""
    try:
        value, end = json.JSONDecoder().raw_decode(out)
    except json.JSONDecodeError as e:
        check(False, f"{what}: stdout is not JSON ({e}): rc {rc}, {out!r} {err!r}")
        return {}
    check(isinstance(value, dict) and out[end:].strip() == "",
          f"{what}: exactly one JSON object on stdout: {out!r}")
    return value if isinstance(value, dict) else {}


def plan_json(memoplan, trace, strategy):
    rc, out, err = run(memoplan, "plan", trace, "-s", strategy, "--json")
    check(rc == 0, f"plan {trace} -s {strategy} --json: rc {rc}, {err!r}")
    return json.loads(out)


def test_validate_json(memoplan, tmp, trace, plan):
    with open(plan) as f:
        planned = json.load(f)
    rc, out, err = run(memoplan, "validate", trace, plan, "--json")
    report = one_json_object("validate --json", rc, out, err)
    check(rc == 0, f"validate --json of a good plan exits 0: rc {rc}, {err!r}")
    check(report.get("trace") == trace and report.get("plan") == plan, f"validate --json: {report}")
    check(report.get("valid") is True and report.get("error") is None
          and report.get("violations") == 0 and report.get("messages") == [],
          f"validate --json of a good plan: {report}")
    check(report.get("slab_bytes") == planned["slab_bytes"] == plan_json(
        memoplan, trace, "greedy_by_size")["slab_bytes"], f"validate --json slab: {report}")
    check(report.get("allocations") == 3 and report.get("checked") == 3
          and report.get("offsets") == 3 and report.get("fingerprint_matches") is True,
          f"validate --json counts: {report}")

    bad = dict(planned)
    bad["offsets"] = list(planned["offsets"])
    bad["offsets"][1] = bad["offsets"][0]  # rows 0 and 1 are alive together: they overlap
    tampered = write(os.path.join(tmp, "tampered_json.json"), json.dumps(bad))
    rc, out, err = run(memoplan, "validate", trace, tampered, "--json")
    report = one_json_object("validate --json (invalid)", rc, out, err)
    check(rc == 1, f"validate --json of an overlapping plan exits 1: rc {rc}, {err!r}")
    messages = report.get("messages") or [""]
    check(report.get("valid") is False and report.get("violations", 0) >= 1
          and report.get("error") == messages[0]
          and any("overlap" in m for m in messages), f"validate --json says why: {report}")

    rc, out, err = run(memoplan, "validate", trace, os.path.join(tmp, "missing.plan.json"),
                       "--json")
    check(rc == 2 and out == "" and "missing.plan.json" in err,
          f"validate --json of a missing plan: exit 2, nothing on stdout: {rc} {out!r} {err!r}")


def test_compare_json(memoplan, data):
    traces = [os.path.join(data, "resnet18.json.gz"), os.path.join(data, "squeezenet1_0.json.gz")]
    strategies = ["greedy_by_size", "naive"]
    rc, out, err = run(memoplan, "compare", *traces, "--json", "-s", ",".join(strategies))
    report = one_json_object("compare --json", rc, out, err)
    check(rc == 0, f"compare --json: rc {rc}, {err!r}")
    check(report.get("strategies") == strategies, f"compare --json strategies: {report}")
    rows = report.get("rows", [])
    check([(r.get("path"), r.get("strategy")) for r in rows]
          == [(t, s) for t in traces for s in strategies], f"compare --json rows: {rows}")
    by_trace = {t.get("path"): t for t in report.get("traces", [])}
    check(list(by_trace) == traces, f"compare --json traces: {report.get('traces')}")
    for path in traces:
        info = json.loads(run(memoplan, "info", path, "--json")[1])
        entry = by_trace.get(path, {})
        mine = [r for r in rows if r.get("path") == path]
        check(entry.get("trace") == os.path.basename(path).split(".")[0]
              and entry.get("allocations") == info["allocations"]
              and entry.get("lower_bound_bytes") == info["lower_bound_bytes"],
              f"compare --json {path}: {entry} vs info {info}")
        for row in mine:
            planned = plan_json(memoplan, path, row["strategy"])
            check(row.get("slab_bytes") == planned["slab_bytes"]
                  and row.get("lower_bound_bytes") == planned["lower_bound_bytes"]
                  and row.get("status") == planned["status"],
                  f"compare --json row equals plan --json: {row} vs {planned}")
            check(row.get("valid") is True and row.get("error") is None
                  and row.get("planning_ms", -1) >= 0
                  and abs(row.get("ratio", 0) - planned["ratio"]) < 1e-9
                  and row.get("optimal") == (planned["status"] == "optimal"),
                  f"compare --json row: {row}")
        smallest = min(r.get("slab_bytes", 0) for r in mine)
        check(entry.get("best_slab_bytes") == smallest
              and entry.get("best_strategy") == "greedy_by_size"
              and entry.get("best_strategies") == [r["strategy"] for r in mine
                                                   if r.get("slab_bytes") == smallest],
              f"compare --json best of {path}: {entry}")
    rc, out, err = run(memoplan, "compare", traces[0], "--json", "--csv")
    check(rc == 2 and out == "", f"compare --json --csv is a usage error: {rc} {out!r}")
    rc, out, err = run(memoplan, "compare", traces[0], "--json", "-s", "no_such_strategy")
    check(rc == 2 and out == "" and "no_such_strategy" in err,
          f"compare --json, unknown strategy: exit 2, nothing on stdout: {rc} {out!r} {err!r}")


def test_heapmap_json(memoplan, tmp, data, trace, plan):
    resnet = os.path.join(data, "resnet18.json.gz")
    for args, planned in (([trace, plan], plan_json(memoplan, trace, "greedy_by_size")),
                          ([resnet, "-s", "naive"], plan_json(memoplan, resnet, "naive"))):
        svg = os.path.join(tmp, f"json_{len(args)}.svg")
        rc, out, err = run(memoplan, "heapmap", *args, "-o", svg, "--json")
        report = one_json_object(f"heapmap {args} --json", rc, out, err)
        check(rc == 0 and os.path.exists(svg), f"heapmap {args} --json: rc {rc}, {err!r}")
        check(report.get("output") == svg and report.get("trace") == args[0]
              and report.get("plan") == (plan if args[1] == plan else ""),
              f"heapmap --json paths: {report}")
        check(report.get("strategy") == planned["strategy"]
              and report.get("slab_bytes") == planned["slab_bytes"]
              and report.get("lower_bound_bytes") == planned["lower_bound_bytes"]
              and report.get("allocations") == planned["allocations"]
              and report.get("width") == 1600 and report.get("height") == 900,
              f"heapmap {args} --json equals plan --json: {report} vs {planned}")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    memoplan, data = sys.argv[1], sys.argv[2]
    with gzip.open(os.path.join(data, "resnet18.json.gz")):
        pass  # the committed traces are there
    with tempfile.TemporaryDirectory() as tmp:
        trace, plan = test_info_and_plan(memoplan, tmp)
        test_validate(memoplan, tmp, trace, plan)
        test_validate_json(memoplan, tmp, trace, plan)
        test_capacity(memoplan, tmp)
        test_bad_input(memoplan, tmp)
        test_compare(memoplan, data)
        test_heapmap(memoplan, tmp, data, trace, plan)
        test_compare_json(memoplan, data)
        test_heapmap_json(memoplan, tmp, data, trace, plan)
    print(f"{'FAILED' if FAILURES else 'passed'}: {len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
