#!/usr/bin/python3
"""Serving benchmark: wrk against memoplan-serve in several allocator configurations.

    /usr/bin/python3 bench/run_serve_bench.py                 # 3 rounds x 2 connection counts
    /usr/bin/python3 bench/run_serve_bench.py --quick         # 1 round, 3 s, 2 connections

Configurations (each measurement starts a fresh server; --workers W):
  default             the server's defaults: --kernels auto (the tuned kernels), planned
  planned             --kernels stock: memoplan's graph pass plans the model; each worker replays
                      a slab
  unplanned           --no-plan: LibTorch's allocator, i.e. glibc malloc
  unplanned+shim      --no-plan, LD_PRELOAD of the memoplan malloc shim (mode:auto)
  unplanned+jemalloc  --no-plan, LD_PRELOAD of jemalloc
A small VM's throughput drifts between runs, so the configurations run back to back and rotate
by one each round (A B C D, B C D A, ...); the tables give medians with [min..max]. Each
measurement: a warm-up wrk run (not recorded: every worker plans, or the shim detects its pass,
before the measured run), the measured wrk run with binary KServe requests, /metrics, VmRSS and
VmHWM, SIGTERM, and the shim's exit statistics from the server's stderr.
Note: the server sets glibc's M_MMAP_THRESHOLD to 256 KiB (apps/serve/main.cc) unless
MALLOC_MMAP_THRESHOLD_ is set, so "unplanned" mmaps and unmaps every large tensor of each pass.
Writes OUT_DIR/serve_bench_<stamp>.csv (raw rows after '# ' lines: machine, exact command) and
serve_bench_<stamp>.md (tables, printed too). Needs Debian's python3-torch: run /usr/bin/python3.
"""
import argparse
import contextlib
import csv
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "apps", "serve"))
from serve_client import DATATYPES, Server, TestFailure, binary_body, metrics  # noqa: E402

import torch  # noqa: E402

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
CONFIGS = ["default", "planned", "unplanned", "unplanned+shim", "unplanned+jemalloc"]
# /metrics samples kept per row (column name: metric). With --no-plan they stay 0.
METRICS = {"inferences": "memoplan_serve_inferences_total",
           "planned_passes": 'memoplan_passes_total{kind="planned"}',
           "planned_allocations": "memoplan_planned_allocations_total",
           "fallback_not_planned": 'memoplan_fallback_allocations_total{reason="not_planned"}',
           "fallback_escaping": 'memoplan_fallback_allocations_total{reason="escaping"}',
           "fallback_overlap": 'memoplan_fallback_allocations_total{reason="overlap"}',
           "tensor_mallocs": "memoplan_tensor_mallocs_total",
           "slabs": "memoplan_slabs_total", "slab_bytes": "memoplan_slab_bytes_total"}
# The shim's stats_print lines at exit (interpose/stats.cc).
SHIM_STATS = {"shim_passes": r"memoplan: passes (\d+)", "shim_plans": r", plans (\d+)",
              "shim_planned_hits": r"planned hits (\d+)",
              "shim_steady_hits": r"steady-state hits (\d+)",
              "shim_steady_fallbacks": r"steady-state fallbacks (\d+)"}
COLUMNS = (["round", "config", "connections", "requests_per_s", "p50_ms", "p90_ms", "p99_ms",
            "requests", "errors", "error_detail", "warmup_errors", "exit_code", "vmrss_kib",
            "vmhwm_kib", "load1"] + list(METRICS) + list(SHIM_STATS))
COMMAND = shlex.join([sys.executable] + sys.argv)
UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def fail(message):
    print("run_serve_bench: " + message, file=sys.stderr)
    sys.exit(2)


def config_env(config, build_dir):
    """(server arguments, environment additions) of a configuration."""
    if config in ("default", "planned"):
        return [], {}
    env = {}
    if config == "unplanned+shim":
        env = {"LD_PRELOAD": os.path.join(build_dir, "interpose", "libmemoplan_preload.so"),
               "MEMOPLAN_CONF": "mode:auto,stats_print:true"}
    elif config == "unplanned+jemalloc":
        env = {"LD_PRELOAD": JEMALLOC}
    return ["--no-plan"], env


@contextlib.contextmanager
def environment(extra):
    """os.environ plus extra while the server is spawned (Server's Popen inherits os.environ);
    restored at once so that wrk never runs with the LD_PRELOAD."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_request(model, shape_arg, path):
    """The binary request body of a random input (fixed seed); returns its header length
    and the input's KServe datatype."""
    extra = {"input_shape": "", "input_dtype": ""}
    module = torch.jit.load(model, _extra_files=extra)
    args = [a for a in module.forward.schema.arguments[1:] if str(a.type) == "Tensor"]
    if len(args) != 1:
        fail("%s: forward takes %d tensors; this benchmark sends one" % (model, len(args)))
    shape = shape_arg or extra["input_shape"].decode()
    if not shape:
        fail("%s stores no input_shape: give --input, e.g. 1x3x224x224" % model)
    dtype = getattr(torch, extra["input_dtype"].decode() or "float32")
    size = [int(d) for d in shape.split("x")]
    torch.manual_seed(0)
    x = (torch.randn(size).to(dtype) if dtype.is_floating_point
         else torch.randint(0, 2, size, dtype=dtype))
    body, header_length = binary_body({args[0].name: x})
    with open(path, "wb") as f:
        f.write(body)
    return header_length, DATATYPES[dtype]


def write_lua(body_file, header_length, path):
    with open(path, "w") as f:
        f.write('wrk.method = "POST"\n'
                'wrk.headers["Content-Type"] = "application/octet-stream"\n'
                'wrk.headers["Inference-Header-Content-Length"] = "%d"\n'
                'local f = io.open("%s", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
                % (header_length, body_file))


def run_wrk(url, lua, connections, seconds, timeout):
    """wrk's numbers: {requests, requests_per_s, p50_ms, p90_ms, p99_ms, errors, error_detail}.
    timeout: wrk's --timeout in seconds; a reply slower than it counts as an error and not in the
    latencies (wrk's own default, 2 s, drops most replies of a slow model queued behind others)."""
    cmd = ["wrk", "-t%d" % min(2, connections), "-c%d" % connections, "-d%ds" % seconds,
           "--timeout", "%ds" % timeout, "--latency", "-s", lua, url]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out = proc.stdout
    total = re.search(r"(\d+) requests in", out)
    if proc.returncode != 0 or not total:
        raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd), proc.returncode, out,
                                                   proc.stderr))
    row = {"requests": int(total.group(1)),
           "requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
    # wrk pads seconds with a space ("2.33s ")
    for pct, value, unit in re.findall(r"^\s+(50|90|99)%\s+([\d.]+)(us|ms|s|m|h)[ \t]*$", out,
                                       re.M):
        row["p%s_ms" % pct] = round(float(value) * UNIT_MS[unit], 3)
    detail = {}
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non_2xx:
        detail["non2xx"] = int(non_2xx.group(1))
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                        out)
    if sockets:
        detail.update(zip(("connect", "read", "write", "timeout"), map(int, sockets.groups())))
    row["errors"] = sum(detail.values())
    row["error_detail"] = " ".join("%s=%d" % kv for kv in detail.items() if kv[1])
    return row


def proc_status(pid):
    values = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line.split(":")[0].lower() + "_kib"] = int(line.split()[1])
    return values


def measure(args, config, connections, lua_file, model_name, datatype):
    """One server from start to exit; returns its row (without round). datatype: the request's
    (KServe's name), given with --input: the server's SHAPE[:DATATYPE] means FP32 without one."""
    server_args, env = config_env(config, args.build_dir)
    extra = ["--input", "%s:%s" % (args.input, datatype)] if args.input else []
    row = {"config": config, "connections": connections, "load1": round(os.getloadavg()[0], 2)}
    with environment(env):
        server = Server(args.binary, args.model, "--workers", str(args.workers), *extra,
                        *server_args, kernels=None if config == "default" else "stock")
    try:
        server.wait_ready()
        url = server.base + "/v2/models/%s/infer" % model_name
        if args.warmup_seconds > 0:
            warmup = run_wrk(url, lua_file, connections, args.warmup_seconds,
                             args.wrk_timeout)
            row["warmup_errors"] = warmup["errors"]
        row.update(run_wrk(url, lua_file, connections, args.seconds, args.wrk_timeout))
        m = metrics(server)
        row.update({k: int(m[name]) for k, name in METRICS.items() if name in m})
        row.update(proc_status(server.pid))
        row["exit_code"] = server.terminate()
        log = server.log_text()
        for key, pattern in SHIM_STATS.items():
            found = re.search(pattern, log)
            if found:
                row[key] = int(found.group(1))
        if row["exit_code"] != 0 or row["errors"] or row.get("warmup_errors"):
            print("  server stderr (tail):\n" + log[-2000:], file=sys.stderr)
        return row
    except TestFailure as e:  # the server did not become ready, or did not exit
        raise RuntimeError("%s: %s" % (config, e))
    finally:
        server.close()


def machine_info(args):
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    lines = ["cpu: %s, cores: %s, kernel: %s" % (cpu, os.cpu_count(), os.uname().release)]
    with contextlib.suppress(OSError):
        versions = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n",
                                   "libtorch-dev", "libjemalloc2", "libc6"],
                                  capture_output=True, text=True).stdout.split("\n")
        lines.append("packages: " + ", ".join(v for v in versions if v))
    with contextlib.suppress(OSError):
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip()
        lines.append("git: %s" % rev)
    malloc_env = ["%s=%s" % kv for kv in os.environ.items() if kv[0].startswith("MALLOC_")]
    lines.append("MALLOC_* environment: %s" % (" ".join(malloc_env) or "none"))
    lines.append("model: %s, workers: %d, wrk: %d s (warm-up %d s, --timeout %d s), binary: %s"
                 % (args.model, args.workers, args.seconds, args.warmup_seconds, args.wrk_timeout,
                    args.binary))
    return lines


def spread(values, fmt):
    return (fmt + " [" + fmt + ".." + fmt + "]") % (statistics.median(values), min(values),
                                                    max(values))


def markdown(args, rows, info):
    out = ["# memoplan-serve benchmark %s" % args.stamp, ""] + ["- " + l for l in info] + [""]
    for c in args.connections:
        out += ["## %d connection%s (`wrk -t%d -c%d -d%ds --latency`, binary requests)"
                % (c, "s" if c > 1 else "", min(2, c), c, args.seconds), "",
                "| config | rounds | requests/s median [min..max] | vs unplanned | p99 ms median "
                "[min..max] | p50 ms median | errors (incl. warm-up) | VmRSS MiB median |",
                "|---|---|---|---|---|---|---|---|"]
        by = {k: [r for r in rows if r["connections"] == c and r["config"] == k]
              for k in args.configs}
        base = by.get("unplanned")
        base = statistics.median(r["requests_per_s"] for r in base) if base else None
        for k in args.configs:
            rs = by[k]
            if not rs:
                continue
            rate = [r["requests_per_s"] for r in rs]
            p99 = [r["p99_ms"] for r in rs if "p99_ms" in r]
            p50 = [r["p50_ms"] for r in rs if "p50_ms" in r]
            out.append("| %s | %d | %s | %s | %s | %s | %d | %.0f |" % (
                k, len(rs), spread(rate, "%.1f"),
                "%.2fx" % (statistics.median(rate) / base) if base else "-",
                spread(p99, "%.1f") if p99 else "-",
                "%.1f" % statistics.median(p50) if p50 else "-",
                sum(r["errors"] + r.get("warmup_errors", 0) for r in rs),
                statistics.median(r.get("vmrss_kib", 0) for r in rs) / 1024))
        out.append("")
    out += ["Command: `%s`" % COMMAND, ""]
    return "\n".join(out)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default="build-bench")
    p.add_argument("--model", default="models/resnet18.pt")
    p.add_argument("--input", help="input shape, e.g. 1x3x224x224 (default: the file's)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, help="default 3")
    p.add_argument("--seconds", type=int, help="wrk duration of a measurement, default 10")
    p.add_argument("--connections", help="comma list, default 1,2; wrk -t min(2,c) -c c")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma list of those above")
    p.add_argument("--warmup-seconds", type=int, default=3)
    p.add_argument("--wrk-timeout", type=int, default=30,
                   help="seconds a reply may take before wrk counts it as an error (default 30)")
    p.add_argument("--quick", action="store_true",
                   help="defaults rounds 1, seconds 3, connections 2 (explicit options win)")
    p.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    p.add_argument("--stamp", default=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    args = p.parse_args()
    for name, normal, quick in (("rounds", 3, 1), ("seconds", 10, 3), ("connections", "1,2", "2")):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else normal)
    # Relative paths: from the current directory when they exist there, else the repository's.
    resolve = lambda x: x if os.path.isabs(x) or os.path.exists(x) else os.path.join(ROOT, x)
    args.build_dir, args.model = resolve(args.build_dir), resolve(args.model)
    args.binary = os.path.join(args.build_dir, "apps", "serve", "memoplan-serve")
    args.connections = [int(c) for c in args.connections.split(",")]
    args.configs = args.configs.split(",")
    for k in args.configs:
        if k not in CONFIGS:
            fail("unknown config %r (known: %s)" % (k, ", ".join(CONFIGS)))
    if not shutil.which("wrk"):
        fail("wrk is not installed (apt-get install wrk)")
    preloads = [config_env(k, args.build_dir)[1].get("LD_PRELOAD") for k in args.configs]
    for path in [args.binary, args.model] + [p for p in preloads if p]:
        if not os.path.exists(path):
            fail("missing %s" % path)
    return args


def main():
    args = parse_args()
    info = machine_info(args) + ["load average at start: %.2f %.2f %.2f" % os.getloadavg()]
    model_name = os.path.splitext(os.path.basename(args.model))[0]
    tmp = tempfile.mkdtemp(prefix="serve-bench-")
    rows, status = [], "complete"
    try:
        body_file, lua_file = os.path.join(tmp, "request.bin"), os.path.join(tmp, "infer.lua")
        header_length, datatype = write_request(args.model, args.input, body_file)
        write_lua(body_file, header_length, lua_file)
        for rnd in range(1, args.rounds + 1):
            for c in args.connections:
                shift = (rnd - 1) % len(args.configs)
                for config in args.configs[shift:] + args.configs[:shift]:
                    row = measure(args, config, c, lua_file, model_name, datatype)
                    row["round"] = rnd
                    rows.append(row)
                    print("round %d, %d conn, %-18s %7.1f req/s  p99 %s ms  errors %d  VmRSS %d KiB"
                          % (rnd, c, config, row["requests_per_s"], row.get("p99_ms"),
                             row["errors"], row.get("vmrss_kib", 0)), file=sys.stderr)
    except KeyboardInterrupt:
        status = "interrupted"
    except Exception as e:  # noqa: BLE001 -- keep the rows measured so far
        print("run_serve_bench: %s" % e, file=sys.stderr)
        status = "failed (%s)" % str(e).split("\n")[0]
    finally:
        shutil.rmtree(tmp)
    info.append("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    if status != "complete":
        info.append("run %s after %d measurements" % (status, len(rows)))
    os.makedirs(args.out_dir, exist_ok=True)
    base = os.path.join(args.out_dir, "serve_bench_%s" % args.stamp)
    with open(base + ".csv", "w", newline="") as f:
        f.writelines("# %s\n" % line for line in info + ["command: " + COMMAND])
        writer = csv.DictWriter(f, COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    text = markdown(args, rows, info)
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    print("wrote %s.csv and .md" % base, file=sys.stderr)
    return 0 if status == "complete" else 1


if __name__ == "__main__":
    sys.exit(main())
