#!/usr/bin/python3
"""memoplan-serve's HTTP front end under load and under attack (issue 54), with load clients
nobody here wrote: wrk (HTTP/1.1) and h2load (nghttp2-client; gRPC over HTTP/2).

Load: resnet18, --workers 2, --grpc-port 0, each server alone on the machine and fresh per cell,
3 s warm-up with the same load, then the measured run: `wrk -t2 -c8 --latency` posting a binary
KServe request (1x3x224x224 FP32), or `h2load -c8 -m1 -t2` posting the same as a gRPC ModelInfer
message (p50/p99 from h2load's per-request log). Each with no other connection, and with 2,000
idle keep-alive HTTP connections open from another loopback address (each asked for
/v2/health/live once). Cells rotate round by round. Binaries: --binary (now) and --baseline (the
same server before the change, built from an earlier commit), each its own cells.

Attack (--attack): the issue's "done when" on --binary (and --baseline), default limits: 2,000
slow header senders from 127.0.0.2 (a header line every second; one closed is opened again) and
2,000 idle keep-alive connections from 127.0.0.3, for 30 s; meanwhile /v2/health/ready (1 s
timeout) and a resnet18 inference (2 s timeout, outputs checked) every 0.25 s from 127.0.0.1;
VmRSS against the idle server's; the age of each slow connection when the server closed it.

    /usr/bin/python3 bench/serve_front_end.py --baseline /tmp/memoplan-serve-old
    /usr/bin/python3 bench/serve_front_end.py --attack --baseline /tmp/memoplan-serve-old

Writes bench/results/serve_front_end_<stamp>/{rows.csv,report.md}.
"""
import argparse
import csv
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "apps", "serve"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from serve_client import (Server, binary_body, outputs_of, reference,  # noqa: E402
                          TestFailure)
from run_serve_load import infer_workload, run_wrk  # noqa: E402

import torch  # noqa: E402


def open_idle(port, n, source="127.0.0.3"):
    """n keep-alive connections, each having asked for /v2/health/live once."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setblocking(False)
        socks.append(s)
    deadline = time.monotonic() + 3
    answered = 0
    for s in socks:
        while time.monotonic() < deadline:
            try:
                answered += s.recv(4096).startswith(b"HTTP/1.1 200")
                break
            except BlockingIOError:
                time.sleep(0.001)
    return socks, answered


def run_h2load(port, body_file, seconds, work):
    log = os.path.join(work, "h2load.log")
    if os.path.exists(log):
        os.unlink(log)  # h2load appends
    cmd = ["h2load", "-c8", "-m1", "-t2", "-D", str(seconds), "-d", body_file,
           "-H", "content-type: application/grpc", "-H", "te: trailers",
           "--log-file", log,
           "http://127.0.0.1:%d/inference.GRPCInferenceService/ModelInfer" % port]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    durations = []
    errors = 0
    with open(log) as f:
        for line in f:
            _, status, micros = line.split()
            if status == "200":
                durations.append(int(micros) / 1000)
            else:
                errors += 1
    durations.sort()
    pct = (lambda p: round(durations[min(len(durations) - 1, int(p * len(durations)))], 2)
           if durations else float("nan"))
    failed = [l for l in out.splitlines() if l.startswith("requests:")]
    return {"requests": len(durations), "requests_per_s": round(len(durations) / seconds, 2),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "errors": errors,
            "h2load": failed[0].strip() if failed else ""}


def load_cell(binary, model, protocol, idle, lua, body_file, seconds, work):
    server = Server(binary, model, "--workers", "2", "--grpc-port", "0", kernels=None)
    try:
        server.wait_ready(120)
        port = int(server.base.rsplit(":", 1)[1])
        grpc_port = int(server.grpc.rsplit(":", 1)[1])
        url = server.base + "/v2/models/resnet18/infer"

        def load(s):
            if protocol == "http":
                return run_wrk(url, lua, 8, s)
            return run_h2load(grpc_port, body_file, s, work)

        load(3)
        socks, answered = open_idle(port, idle) if idle else ([], 0)
        row = load(seconds)
        row.update(binary=binary, protocol=protocol, idle=idle, idle_answered=answered,
                   rss_mib=round(server.rss_kib() / 1024, 1))
        for s in socks:
            s.close()
        return row
    finally:
        server.close()


class Attack:
    """2,000 slow header senders (kept at 2,000) and 2,000 idle keep-alive connections."""

    def __init__(self, port, slow, idle):
        self.port, self.slow_n = port, slow
        self.slow = {}  # socket -> opened at
        self.closed_ages = []
        self.halt = threading.Event()
        self.idle, self.idle_answered = open_idle(port, idle)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open_slow(self):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        self.slow[s] = time.monotonic()

    def run(self):
        while not self.halt.is_set():
            while len(self.slow) < self.slow_n:
                self.open_slow()
            now = time.monotonic()
            for s, opened in list(self.slow.items()):
                gone = False
                try:
                    s.send(b"GET / HTTP/1.1\r\n" if now - opened < 0.5 else b"X-Slow: 1\r\n")
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
                if gone:
                    self.closed_ages.append(now - opened)
                    s.close()
                    del self.slow[s]
            self.halt.wait(1.0)

    def stop(self):
        self.halt.set()
        self.thread.join()
        for s in list(self.slow) + self.idle:
            s.close()


def attack(binary, model, seconds):
    server = Server(binary, model, "--workers", "2", kernels=None)
    try:
        server.wait_ready(120)
        port = int(server.base.rsplit(":", 1)[1])
        time.sleep(1)
        idle_rss = server.rss_kib()
        x = torch.randn(1, 3, 224, 224)
        raw, header_length = binary_body({"x": x})
        expected = reference(model, {"x": x})
        a = Attack(port, 2000, 2000)
        a.thread.start()
        health, infer, failures, rss = [], [], [], []
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            for path, body, timeout, times in (("/v2/health/ready", None, 1.0, health),
                                               ("/v2/models/resnet18/infer", raw, 2.0, infer)):
                headers = {"Content-Type": "application/octet-stream",
                           "Inference-Header-Content-Length": str(header_length)} if body else {}
                req = urllib.request.Request(server.base + path, data=body, headers=headers,
                                             method="POST" if body else "GET")
                t0 = time.monotonic()
                try:
                    with urllib.request.urlopen(req, timeout=timeout) as resp:
                        data = resp.read()
                        if body:
                            got = outputs_of(data, int(
                                resp.headers["Inference-Header-Content-Length"]))
                            # The default kernels are tuned: close to LibTorch's, not bit-equal.
                            if not torch.allclose(got["output__0"], expected["output__0"],
                                                  rtol=1e-4, atol=1e-4):
                                raise TestFailure("infer: outputs differ from LibTorch's")
                    times.append(time.monotonic() - t0)
                except (OSError, TestFailure) as e:
                    failures.append("%.1f s %s: %s" % (time.monotonic() - start, path, e))
            rss.append(server.rss_kib())
            time.sleep(0.25)
        a.stop()
        ages = sorted(a.closed_ages)
        return {"binary": binary, "seconds": seconds, "idle_answered": a.idle_answered,
                "health_n": len(health), "health_max_s": round(max(health, default=0), 3),
                "infer_n": len(infer), "infer_max_s": round(max(infer, default=0), 3),
                "failures": len(failures), "first_failures": "; ".join(failures[:3]),
                "slow_closed": len(ages),
                "slow_age_median_s": round(statistics.median(ages), 2) if ages else "",
                "slow_age_max_s": round(ages[-1], 2) if ages else "",
                "idle_rss_mib": round(idle_rss / 1024, 1),
                "max_rss_mib": round(max(rss) / 1024, 1)}
    finally:
        server.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=os.path.join(ROOT, "build/apps/serve/memoplan-serve"))
    p.add_argument("--baseline", help="the server before the change (an earlier commit's build)")
    p.add_argument("--model", default=os.path.join(ROOT, "models/resnet18.pt"))
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--idle", type=int, default=2000)
    p.add_argument("--attack", action="store_true")
    p.add_argument("--protocols", default="http,grpc", help="comma list: http (wrk), grpc (h2load)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench/results"))
    args = p.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    binaries = [args.binary] + ([args.baseline] if args.baseline else [])
    out_dir = os.path.join(args.out, "serve_front_end_" + time.strftime("%Y%m%d_%H%M%S"))
    os.makedirs(out_dir)
    rows = []
    if args.attack:
        for b in binaries:
            row = attack(b, args.model, 30)
            print(row, flush=True)
            rows.append(row)
    else:
        work = tempfile.mkdtemp(prefix="memoplan-serve-front-")
        lua, message = infer_workload(work, "resnet18")
        payload = message.SerializeToString()
        body_file = os.path.join(work, "grpc.bin")
        with open(body_file, "wb") as f:
            f.write(b"\x00" + len(payload).to_bytes(4, "big") + payload)
        cells = [(b, proto, idle) for b in binaries for proto in args.protocols.split(",")
                 for idle in (0, args.idle)]
        for r in range(args.rounds):
            for b, proto, idle in cells[r % len(cells):] + cells[:r % len(cells)]:
                row = load_cell(b, args.model, proto, idle, lua, body_file, args.seconds, work)
                row["round"] = r
                rows.append(row)
                print("round %d %s %-4s idle %4d: %7.2f req/s p50 %7.2f p99 %7.2f ms errors %d "
                      "RSS %.0f MiB" % (r, os.path.basename(b) if b == args.binary else "baseline",
                                        proto, idle, row["requests_per_s"], row["p50_ms"],
                                        row["p99_ms"], row["errors"], row["rss_mib"]), flush=True)
    keys = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    with open(os.path.join(out_dir, "rows.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print("rows: %s" % os.path.join(out_dir, "rows.csv"))


if __name__ == "__main__":
    main()
