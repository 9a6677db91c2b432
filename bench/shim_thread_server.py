#!/usr/bin/python3
"""A thread-per-request Python server under each allocator and the shim (issue 53).

    /usr/bin/python3 bench/shim_thread_server.py                 # resnet18, 4 clients, 3 rounds
    /usr/bin/python3 bench/shim_thread_server.py --requests 400 --allocators mimalloc,shim

The server is the standard library's ThreadingHTTPServer (a new thread per request, as Flask's
development server and many hand-written servers work) serving a torchvision model (weights=None,
eval, one intra-op thread): each POST carries a 1x3xHxW float32 tensor, the answer is the top-5
classes as JSON. A client process sends the first --warmup requests (untimed), a second one the
rest of --requests, from --clients threads each, and reports requests per second. Per
configuration and round: a server process of its own with LD_PRELOAD set (glibc: nothing), its
CPU time and minor faults per timed request (/proc/PID/stat: on a machine the client shares,
steadier than requests/s), its peak RSS (VmHWM at its end), and under the shim its statistics
(stats_print: the share of steady-state tensor requests served from slabs, passes learned from
exited threads). Rounds interleave the configurations (rotated by one per round); medians with
minimum and maximum. shim-glibc and shim-tcmalloc: the shim with glibc or tcmalloc behind it.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The configurations (preloaded libraries, MEMOPLAN_CONF) are run_shim_programs.py's: shim-glibc
# and shim-tcmalloc put glibc or tcmalloc behind the shim, shim-old is --old-shim.
from run_shim_programs import ALLOCATORS  # noqa: E402


def serve(args):
    import torch
    import torchvision
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None).eval()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            x = torch.frombuffer(bytearray(body), dtype=torch.float32).view(1, 3, args.size,
                                                                            args.size)
            with torch.no_grad():
                top = model(x).topk(5).indices[0].tolist()
            reply = json.dumps({"top5": top}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *unused):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *unused: threading.Thread(target=server.shutdown).start())
    print("ready", flush=True)
    server.serve_forever()
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print(f"peak_rss_kib {hwm}", flush=True)


def client(args):
    import random
    rng = random.Random(1)
    import struct
    body = struct.pack(f"{3 * args.size * args.size}f",
                       *(rng.random() for _ in range(3 * args.size * args.size)))
    answers = set()
    lock = threading.Lock()
    counter = {"next": 0}
    times = {}

    def worker():
        conn = None
        while True:
            with lock:
                i = counter["next"]
                counter["next"] += 1
            if i >= args.requests:
                return
            if i == args.warmup:
                times["start"] = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
            conn.request("POST", "/", body, {"Content-Type": "application/octet-stream"})
            reply = conn.getresponse().read()
            conn.close()
            with lock:
                answers.add(reply)

    threads = [threading.Thread(target=worker) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - times["start"]
    print(json.dumps({"rps": (args.requests - args.warmup) / elapsed, "answers": len(answers)}))


def cpu_and_faults(pid):
    """The process's user + system CPU seconds and minor faults so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, int(fields[7])


def run(args):
    shim = os.path.join(ROOT, args.build_dir, "interpose", "libmemoplan_preload.so")
    allocs = args.allocators.split(",")
    results = {a: [] for a in allocs}
    for r in range(args.rounds):
        order = allocs[r % len(allocs):] + allocs[:r % len(allocs)]
        for alloc in order:
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
            env.pop("LD_PRELOAD", None)
            preloads, conf, _ = ALLOCATORS[alloc]
            if preloads:
                env["LD_PRELOAD"] = ":".join({"SHIM": shim, "OLD": args.old_shim}.get(lib, lib)
                                             for lib in preloads)
            env["MEMOPLAN_CONF"] = (conf + "," if conf else "") + "stats_print:true"
            common = ["--model", args.model, "--size", str(args.size), "--port", str(args.port)]
            server = subprocess.Popen([sys.executable, __file__, "--serve"] + common, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert server.stdout.readline().strip() == "ready"

            def send(requests):  # a client process; its requests/s over all of them
                return subprocess.run([sys.executable, __file__, "--client", "--requests",
                                       str(requests), "--warmup", "0", "--clients",
                                       str(args.clients)] + common, capture_output=True,
                                      text=True, check=True).stdout

            send(args.warmup)
            before = cpu_and_faults(server.pid)
            out = send(args.requests - args.warmup)
            after = cpu_and_faults(server.pid)
            server.send_signal(signal.SIGTERM)
            stdout, stderr = server.communicate(timeout=120)
            row = json.loads(out)
            timed = args.requests - args.warmup
            row["cpu_ms"] = (after[0] - before[0]) * 1000 / timed
            row["faults"] = (after[1] - before[1]) / timed
            row["peak_rss_mib"] = int(re.search(r"peak_rss_kib (\d+)", stdout).group(1)) / 1024
            served = re.search(r"planned ([\d.]+)% of (\d+) steady-state", stderr)
            learned = re.search(r"passes learned from exited threads (\d+), threads that started "
                                r"on one (\d+)", stderr)
            row["served"] = f"{served.group(1)}% of {served.group(2)}" if served else ""
            row["learned"] = f"{learned.group(1)}/{learned.group(2)}" if learned else ""
            results[alloc].append(row)
            print(f"round {r} {alloc:9s} {row['rps']:6.2f} req/s  {row['cpu_ms']:6.2f} CPU ms/req  "
                  f"{row['faults']:6.1f} faults/req  {row['peak_rss_mib']:6.1f} MiB"
                  f"  answers {row['answers']}  {row['served']}  learned {row['learned']}",
                  flush=True)
    plain = [a for a in results if not a.startswith("shim")]
    best = max(statistics.median(x["rps"] for x in results[a]) for a in plain)
    low = min(statistics.median(x["peak_rss_mib"] for x in results[a]) for a in plain)
    print("| allocator | req/s median (min-max) | / best | server CPU ms/req (min-max) | "
          "faults/req | peak RSS MiB | served (shim) |")
    print("|---|---|---|---|---|---|---|")
    for a, v in results.items():
        rps = [x["rps"] for x in v]
        cpu = [x["cpu_ms"] for x in v]
        rss = statistics.median(x["peak_rss_mib"] for x in v)
        print(f"| {a} | {statistics.median(rps):.2f} ({min(rps):.2f}-{max(rps):.2f}) | "
              f"{statistics.median(rps) / best:.3f} | {statistics.median(cpu):.2f} "
              f"({min(cpu):.2f}-{max(cpu):.2f}) | "
              f"{statistics.median(x['faults'] for x in v):.0f} | {rss:.1f} ({rss - low:+.1f}) | "
              f"{v[-1]['served']} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--port", type=int, default=18537)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--allocators", default="glibc,jemalloc,tcmalloc,mimalloc,shim")
    p.add_argument("--build-dir", default="build")
    p.add_argument("--old-shim", help="libmemoplan_preload.so of another commit: allocator shim-old")
    args = p.parse_args()
    if args.serve:
        serve(args)
    elif args.client:
        client(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
