#!/usr/bin/python3
"""Load runs of memoplan-serve (issue 21): HTTP with wrk and gRPC with a Python gRPC client, with
and without dynamic batching, planned and --no-plan; throughput, p50/p99, rows per forward call,
and the server's VmRSS sampled over the run. Plans: planned, --no-plan (tcmalloc returning freed
memory at once, as memoplan-serve sets it), --no-plan with TCMALLOC_AGGRESSIVE_DECOMMIT=0.

    /usr/bin/python3 bench/run_serve_load.py                       # resnet18, 2 rounds, 10 s
    /usr/bin/python3 bench/run_serve_load.py --rounds 1 --seconds 5
    python3 bench/run_serve_load.py --binary build-debian13/apps/serve/memoplan-serve \
      --model models/resnet18.pt2 --input-name input__0 --workers 1 --only http/planned/off

Each cell starts a fresh server (--workers 2 unless --workers, --grpc-port 0; batching: --max-batch-size 8
--max-queue-delay-us 2000), runs a 3 s warm-up with the same load (every worker plans its batch
sizes) and then the measured run: HTTP `wrk -t2 -cC -dS --latency` posting a binary KServe request
(1x3x224x224 FP32, 602 KB), or gRPC C client threads, each with its own channel, calling ModelInfer
with raw_input_contents back to back (stubs generated from apps/serve/proto/kserve_v2.proto).
VmRSS is read every 0.25 s during the measured run: first, last and largest. Cells run round by
round, rotated by one each round. Writes bench/results/serve_load_<stamp>/{rows.csv,report.md}.
Needs Debian's python3-torch, python3-grpcio, protoc and grpc_python_plugin, wrk.
"""
import argparse
import csv
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "apps", "serve"))
from serve_client import Server, binary_body, metrics  # noqa: E402
import grpc_test  # noqa: E402

import torch  # noqa: E402

UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}
# no-plan-keep: --no-plan with TCMALLOC_AGGRESSIVE_DECOMMIT=0, tcmalloc keeping freed spans (the
# server asks tcmalloc to return them at once, to keep its RSS flat: apps/serve/main.cc).
CELLS = [(protocol, plan, batching) for protocol in ("http", "grpc")
         for plan in ("planned", "no-plan", "no-plan-keep") for batching in ("off", "on")]


def run_wrk(url, lua, connections, seconds):
    cmd = ["wrk", "-t%d" % min(2, connections), "-c%d" % connections, "-d%ds" % seconds,
           "--latency", "-s", lua, url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    row = {"requests": int(re.search(r"(\d+) requests in", out).group(1)),
           "requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
    for pct, value, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m|h)$", out, re.M):
        row["p%s_ms" % pct] = round(float(value) * UNIT_MS[unit], 2)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                        out)
    row["errors"] = (int(errors.group(1)) if errors else 0) + (
        sum(map(int, sockets.groups())) if sockets else 0)
    return row


def run_grpc(address, request, connections, seconds):
    import grpc
    import kserve_v2_pb2_grpc as pb_grpc
    latencies, errors = [], [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client():
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            mine = []
            while time.monotonic() < stop_at:
                start = time.monotonic()
                try:
                    stub.ModelInfer(request)
                    mine.append(time.monotonic() - start)
                except grpc.RpcError:
                    with lock:
                        errors[0] += 1
            with lock:
                latencies.extend(mine)
    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    latencies.sort()

    def pct(p):
        return round(1000 * latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))], 2)
    return {"requests": len(latencies), "requests_per_s": round(len(latencies) / elapsed, 2),
            "p50_ms": pct(50), "p99_ms": pct(99), "errors": errors[0]}


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run_cell(args, protocol, plan, batching, lua, request):
    extra = ["--workers", str(args.workers), "--grpc-port", "0"]
    if plan.startswith("no-plan"):
        extra.append("--no-plan")
    if batching == "on":
        extra += ["--max-batch-size", "8", "--max-queue-delay-us", "2000"]
    saved = os.environ.get("TCMALLOC_AGGRESSIVE_DECOMMIT")
    if plan == "no-plan-keep":
        os.environ["TCMALLOC_AGGRESSIVE_DECOMMIT"] = "0"
    try:
        server = Server(args.binary, args.model, *extra)
    finally:
        if plan == "no-plan-keep":
            if saved is None:
                del os.environ["TCMALLOC_AGGRESSIVE_DECOMMIT"]
            else:
                os.environ["TCMALLOC_AGGRESSIVE_DECOMMIT"] = saved
    try:
        server.wait_ready(timeout=120)
        url = server.base + "/v2/models/%s/infer" % os.path.splitext(os.path.basename(
            args.model))[0]

        def load(seconds):
            if protocol == "http":
                return run_wrk(url, lua, args.connections, seconds)
            return run_grpc(server.grpc, request, args.connections, seconds)
        load(3)  # warm-up: each worker plans the batch sizes it meets
        before = metrics(server)
        samples, done = [], threading.Event()

        def sample():
            while not done.wait(0.25):
                samples.append(rss_kib(server.pid))
        sampler = threading.Thread(target=sample)
        sampler.start()
        row = load(args.seconds)
        done.set()
        sampler.join()
        after = metrics(server)
        calls = after["memoplan_batch_size_count"] - before["memoplan_batch_size_count"]
        rows = after["memoplan_batch_size_sum"] - before["memoplan_batch_size_sum"]
        row.update(protocol=protocol, plan=plan, batching=batching,
                   rows_per_call=round(rows / calls, 2) if calls else 1.0,
                   rss_first_mib=round(samples[0] / 1024, 1),
                   rss_last_mib=round(samples[-1] / 1024, 1),
                   rss_max_mib=round(max(samples) / 1024, 1),
                   load1=round(os.getloadavg()[0], 2))
        server.terminate()
        return row
    finally:
        server.close()


def render(rows, cells):
    """The markdown table: per cell, medians over rounds with [min..max]."""
    lines = ["| protocol | plan | batching | requests/s | p50 ms | p99 ms | rows/call | errors | "
             "VmRSS first -> last (max) MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for protocol, plan, batching in cells:
        cell = [x for x in rows if (x["protocol"], x["plan"], x["batching"]) ==
                (protocol, plan, batching)]
        if not cell:
            continue

        def med(key):
            return round(statistics.median(float(x[key]) for x in cell), 1)

        def span(key):
            values = [float(x[key]) for x in cell]
            return "%.1f [%.1f..%.1f]" % (statistics.median(values), min(values), max(values))
        lines.append("| %s | %s | %s | %s | %s | %s | %.2f | %d | %.0f -> %.0f (%.0f) |" % (
            protocol, plan, batching, span("requests_per_s"), span("p50_ms"), span("p99_ms"),
            statistics.median(float(x["rows_per_call"]) for x in cell),
            sum(int(x["errors"]) for x in cell), med("rss_first_mib"), med("rss_last_mib"),
            max(float(x["rss_max_mib"]) for x in cell)))
    return "\n".join(lines)


def infer_workload(work, model, name="x"):
    """The load runs' request, a 1x3x224x224 FP32 input named `name` made in `work`: a wrk script
    posting it as a binary KServe request, and the same as a gRPC ModelInferRequest
    (raw_input_contents)."""
    grpc_test.generate_stubs(work)
    import kserve_v2_pb2 as pb
    torch.manual_seed(0)
    x = torch.randn(1, 3, 224, 224)
    raw, header_length = binary_body({name: x})
    with open(os.path.join(work, "request.bin"), "wb") as f:
        f.write(raw)
    lua = os.path.join(work, "infer_binary.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/octet-stream"\n'
                'wrk.headers["Inference-Header-Content-Length"] = "%d"\n'
                'local f = io.open("%s", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
                % (header_length, os.path.join(work, "request.bin")))
    return lua, grpc_test.infer_request(pb, {name: x}, raw=True, model=model)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=os.path.join(ROOT, "build/apps/serve/memoplan-serve"))
    p.add_argument("--model", default=os.path.join(ROOT, "models/resnet18.pt"))
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--workers", type=int, default=2, help="the server's inference threads")
    p.add_argument("--input-name", default="x",
                   help="the model's input (an AOTInductor package's: input__0)")
    p.add_argument("--only", help="comma list of protocol/plan/batching cells, e.g. http/planned/off")
    p.add_argument("--report", help="a results directory: print its table again from rows.csv")
    p.add_argument("--out", default=os.path.join(ROOT, "bench/results"))
    args = p.parse_args()
    if args.report:
        with open(os.path.join(args.report, "rows.csv")) as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        print(render(rows, CELLS))
        return
    work = tempfile.mkdtemp(prefix="memoplan-serve-load-")
    lua, request = infer_workload(work, os.path.splitext(os.path.basename(args.model))[0],
                                  args.input_name)
    stamp = time.strftime("%Y%m%d_%H%M%S")
    out_dir = os.path.join(args.out, "serve_load_" + stamp)
    os.makedirs(out_dir)
    rows = []
    cells = CELLS
    if args.only:
        wanted = {tuple(c.split("/")) for c in args.only.split(",")}
        cells = [c for c in CELLS if c in wanted]
    for r in range(args.rounds):
        order = cells[r % len(cells):] + cells[:r % len(cells)]
        for protocol, plan, batching in order:
            row = run_cell(args, protocol, plan, batching, lua, request)
            row["round"] = r
            rows.append(row)
            print("round %d %-4s %-7s batching %-3s: %7.2f req/s p50 %7.2f p99 %7.2f ms, %.2f "
                  "rows/call, errors %d, RSS %.0f -> %.0f MiB (max %.0f), load %.2f"
                  % (r, protocol, plan, batching, row["requests_per_s"], row["p50_ms"],
                     row["p99_ms"], row["rows_per_call"], row["errors"], row["rss_first_mib"],
                     row["rss_last_mib"], row["rss_max_mib"], row["load1"]), flush=True)
    columns = ["round", "protocol", "plan", "batching", "requests", "requests_per_s", "p50_ms",
               "p99_ms", "errors", "rows_per_call", "rss_first_mib", "rss_last_mib",
               "rss_max_mib", "load1"]
    with open(os.path.join(out_dir, "rows.csv"), "w", newline="") as f:
        f.write("# %s\n" % shlex.join([sys.executable] + sys.argv))
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for row in rows:
            w.writerow({c: row[c] for c in columns})
    report = render(rows, cells)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("`%s`, %d rounds, %d connections, %d workers, %d s each (medians [min..max])"
                "\n\n%s\n" % (shlex.join([sys.executable] + sys.argv), args.rounds,
                               args.connections, args.workers, args.seconds, report))
    print(report)
    print("wrote " + out_dir)


if __name__ == "__main__":
    main()
