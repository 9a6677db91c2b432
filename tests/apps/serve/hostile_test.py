"""Hostile traffic against memoplan-serve's HTTP front end (issue 54), loopback only, bounded in
time and count: slow header senders, slow body senders, idle keep-alive connections, a
connection flood past the caps, half-closed sockets, clients that never read their responses,
oversized and endless headers. During and after each, a prober on its own address asks
/v2/health/ready and runs a tiny_cnn inference every 0.2 s: each must answer within 1 s, the
inference bit-identical to LibTorch's. Each scenario also checks that the server closed what it
should, when it should, by the connection metrics' reasons.

The hostile clients connect from 127.0.0.2-127.0.0.5 (all of 127/8 is loopback on Linux), the
prober from 127.0.0.1, so the per-address cap is tested apart from the total one.

    /usr/bin/python3 tests/apps/serve/hostile_test.py build/apps/serve/memoplan-serve [--scale N]
    HOSTILE_LEGACY=1 ... : the server's default limits only (no flags; for a server before them)
"""
import os
import resource
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_client import (Server, TestFailure, check, check_outputs, infer_body,  # noqa: E402
                          has_grpc, make_models, metrics, outputs_of, reference, serving,
                          skip, test_main)

import torch  # noqa: E402

HEADER_TIMEOUT = 2.0
IDLE_TIMEOUT = 3.0
MIN_RATE = 2000
MAX_BUFFERED = 2 << 20  # request body bytes held at once
MAX_CONNECTIONS = 1200
PER_ADDRESS = 450
LEGACY = bool(os.environ.get("HOSTILE_LEGACY"))  # probes only: the limits are the server's own
SCALE = 1  # --scale: multiplies the crowd sizes (bench runs use 4: 2,000 slow connections)


def crowd_size(n):
    return n * SCALE


class Prober(threading.Thread):
    """Health and an inference every 0.2 s from 127.0.0.1, each with a 1 s timeout."""

    def __init__(self, server, body, expected):
        super().__init__(daemon=True)
        self.server, self.body, self.expected = server, body, expected
        self.failures, self.rounds, self.worst = [], 0, 0.0
        self.halt = threading.Event()

    def call(self, path, body=None):
        req = urllib.request.Request(self.server.base + path, data=body,
                                     method="POST" if body else "GET",
                                     headers={"Content-Type": "application/json"})
        start = time.monotonic()
        with urllib.request.urlopen(req, timeout=1.0) as resp:
            data = resp.read()
            status = resp.status
        elapsed = time.monotonic() - start
        self.worst = max(self.worst, elapsed)
        if elapsed > 1.0:
            raise TimeoutError("answered after %.2f s" % elapsed)
        return status, data

    def run(self):
        while not self.halt.is_set():
            try:
                status, _ = self.call("/v2/health/ready")
                if status != 200:
                    raise RuntimeError("health: %d" % status)
                status, data = self.call("/v2/models/tiny_cnn/infer", self.body)
                if status != 200:
                    raise RuntimeError("infer: %d %s" % (status, data[:200]))
                check_outputs(outputs_of(data), self.expected, "probe")
            except (OSError, RuntimeError, TestFailure, urllib.error.URLError) as e:
                self.failures.append("%.1f s: %s" % (time.monotonic() - self.started, e))
            self.rounds += 1
            self.halt.wait(0.2)

    def start(self):
        self.started = time.monotonic()
        super().start()

    def stop(self, what):
        self.halt.set()
        self.join()
        check(not self.failures, "%s: %d of %d probes failed: %s"
              % (what, len(self.failures), self.rounds, self.failures[:5]))
        print("  %-44s %3d probes answered, slowest %.3f s" % (what, self.rounds, self.worst))


def connect(port, source, n, rcvbuf=None):
    socks = []
    for _ in range(n):
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    return socks


def send_all(socks, data):
    for s in socks:
        try:
            s.send(data)
        except OSError:
            pass


def closed_by_server(s):
    """True when the server closed s (EOF or reset), after reading what it sent."""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_closed(socks, deadline, what):
    """Every socket closed by the server before `deadline` (monotonic); returns when."""
    open_ = list(socks)
    while open_ and time.monotonic() < deadline:
        open_ = [s for s in open_ if not closed_by_server(s)]
        time.sleep(0.05)
    check(not open_, "%s: %d of %d connections still open at their deadline"
          % (what, len(open_), len(socks)))
    return time.monotonic()


def close_all(socks):
    for s in socks:
        s.close()


def closes(server, before, reason):
    key = 'memoplan_serve_http_connections_closed_total{reason="%s"}' % reason
    return metrics(server).get(key, 0) - before.get(key, 0)


def closes_by_reason(server, before):
    """Every reason's closes since `before`, those with any: for a failure's message."""
    prefix = 'memoplan_serve_http_connections_closed_total{reason="'
    now = metrics(server)
    return {k[len(prefix):-2]: v - before.get(k, 0) for k, v in now.items()
            if k.startswith(prefix) and v != before.get(k, 0)}


def port_of(server):
    return int(server.base.rsplit(":", 1)[1])


def begin(server, prober_args, source, n):
    """A scenario's start: the metrics before it, its prober running, n connections from source."""
    before = metrics(server)
    prober = Prober(server, *prober_args)
    prober.start()
    return before, prober, connect(port_of(server), source, n)


def read_answer(s, seconds):
    """What the server sends on s until it closes it or `seconds` pass."""
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(4096)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def slow_headers(server, prober_args):
    n = crowd_size(400)
    before, prober, socks = begin(server, prober_args, "127.0.0.2", n)
    opened = time.monotonic()
    send_all(socks, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n")
    while time.monotonic() < opened + HEADER_TIMEOUT - 0.7:
        send_all(socks, b"X-Slow: 1\r\n")  # a byte now and then does not extend the deadline
        time.sleep(0.25)
    if LEGACY:
        time.sleep(3)
        prober.stop("%d slow header senders" % n)
        return close_all(socks)
    check(not any(closed_by_server(s) for s in socks[:50]), "slow headers closed too early")
    done = wait_closed(socks, opened + HEADER_TIMEOUT + 2.0, "slow headers")
    prober.stop("%d slow header senders" % n)
    got = closes(server, before, "header_timeout")
    check(got >= n, "slow headers: %d closed for header_timeout, expected %d (all closes: %s)"
          % (got, n, closes_by_reason(server, before)))
    print("    closed %.1f s after they opened (deadline %.0f s)" % (done - opened, HEADER_TIMEOUT))
    close_all(socks)


def slow_bodies(server, prober_args):
    n = crowd_size(300)  # 300 bodies of 5,000 bytes fit --max-buffered
    before, prober, socks = begin(server, prober_args, "127.0.0.2", n)
    send_all(socks, b"POST /v2/models/tiny_cnn/infer HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{")
    opened = time.monotonic()
    while time.monotonic() < opened + HEADER_TIMEOUT:
        send_all(socks, b" " * 20)  # 50 B/s, far below the minimum rate
        time.sleep(0.4)
    done = wait_closed(socks, opened + HEADER_TIMEOUT + 3.0, "slow bodies")
    prober.stop("%d slow body senders" % n)
    got = closes(server, before, "body_timeout")
    check(got >= n, "slow bodies: %d closed for body_timeout, expected %d (all closes: %s)"
          % (got, n, closes_by_reason(server, before)))
    print("    closed %.1f s after their header" % (done - opened))
    close_all(socks)


def idle_keep_alive(server, prober_args):
    n = crowd_size(400)
    before = metrics(server)
    socks = connect(port_of(server), "127.0.0.3", n)
    send_all(socks, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    answered = time.monotonic()
    prober = Prober(server, *prober_args)
    prober.start()
    time.sleep(IDLE_TIMEOUT - 1.0)
    gauge = metrics(server)["memoplan_serve_http_connections"]
    check(gauge >= n, "idle keep-alive: only %d connections open" % gauge)
    check(not any(closed_by_server(s) for s in socks[:50]), "idle connections closed too early")
    done = wait_closed(socks, answered + IDLE_TIMEOUT + 2.0, "idle keep-alive")
    prober.stop("%d idle keep-alive connections" % n)
    got = closes(server, before, "idle_timeout")
    check(got >= n, "idle: %d closed for idle_timeout, expected %d (all closes: %s)"
          % (got, n, closes_by_reason(server, before)))
    print("    closed %.1f s after their answer (idle timeout %.0f s)"
          % (done - answered, IDLE_TIMEOUT))
    close_all(socks)


def flood(server, prober_args):
    """Past the per-address cap from one address, then past the total cap from two."""
    before = metrics(server)
    prober = Prober(server, *prober_args)
    prober.start()
    port = port_of(server)
    a = connect(port, "127.0.0.4", PER_ADDRESS + 150)
    time.sleep(0.3)
    refused = [s for s in a if closed_by_server(s)]
    check(len(refused) >= 150, "per-address cap: %d of %d refused, expected 150"
          % (len(refused), len(a)))
    b = connect(port, "127.0.0.5", PER_ADDRESS) + connect(port, "127.0.0.2", PER_ADDRESS)
    time.sleep(0.5)
    prober.stop("a flood past the caps (%d connections)" % (len(a) + len(b)))
    evicted = closes(server, before, "evicted")
    by_address = closes(server, before, "refused_address")
    check(by_address >= 150, "refused for their address: %d" % by_address)
    check(evicted >= len(a) + len(b) - 150 - MAX_CONNECTIONS,
          "evicted: %d, expected at least %d" % (evicted, len(a) + len(b) - 150 - MAX_CONNECTIONS))
    print("    %d refused for their address, %d evicted (waiting, oldest first)"
          % (by_address, evicted))
    close_all(a + b)


def half_closed(server, prober_args):
    n = crowd_size(200)
    prober = Prober(server, *prober_args)
    prober.start()
    port = port_of(server)
    asking = connect(port, "127.0.0.2", n)
    silent = connect(port, "127.0.0.3", n)
    send_all(asking, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    for s in asking + silent:
        s.shutdown(socket.SHUT_WR)
    answers = sum(read_answer(s, 3).startswith(b"HTTP/1.1 200") for s in asking)
    check(answers == n, "half-closed: %d of %d requests answered before the close" % (answers, n))
    wait_closed(silent, time.monotonic() + 2, "half-closed without a request")
    prober.stop("%d half-closed sockets" % (2 * n))
    close_all(asking + silent)


def never_reads(server, prober_args):
    """Pipelined requests whose answers are never read: the write deadline closes them."""
    n = 4
    before = metrics(server)
    prober = Prober(server, *prober_args)
    prober.start()
    socks = connect(port_of(server), "127.0.0.2", n, rcvbuf=4096)  # fills at once
    pipeline = b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n" * 40000
    sent = [0] * n
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and closes(server, before, "write_timeout") < n:
        for i, s in enumerate(socks):
            if sent[i] < len(pipeline):
                try:
                    sent[i] += s.send(pipeline[sent[i]:sent[i] + 65536])
                except BlockingIOError:
                    pass
                except OSError:
                    sent[i] = len(pipeline)
        time.sleep(0.05)
    prober.stop("%d clients that never read their answers" % n)
    got = closes(server, before, "write_timeout")
    check(got >= n, "never-read: %d closed for write_timeout, expected %d" % (got, n))
    close_all(socks)


def oversized_headers(server, prober_args):
    prober = Prober(server, *prober_args)
    prober.start()
    port = port_of(server)
    big = connect(port, "127.0.0.2", 20)
    endless = connect(port, "127.0.0.3", 20)
    send_all(big, b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 << 10) + b"\r\n\r\n")
    send_all(endless, b"GET /v2/" + b"a" * (256 << 10))  # no end of line, ever
    for what, socks in (("oversized", big), ("endless", endless)):
        answered = sum(read_answer(s, 3).startswith(b"HTTP/1.1 431") for s in socks)
        check(answered == len(socks), "%s headers: %d of %d answered 431"
              % (what, answered, len(socks)))
    prober.stop("40 oversized or endless headers (431)")
    close_all(big + endless)


def big_uploads(server, prober_args):
    """Uploads past --max-buffered: those whose Content-Length does not fit get 503 at once; the
    bytes come back when the others close (a second round fits)."""
    size = 450_000  # 4 fit in 2 MiB, leaving room for the probes' 60 KB
    header = (b"POST /v2/models/tiny_cnn/infer HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size)
    prober = Prober(server, *prober_args)
    prober.start()
    for round_, n, refused_expected in ((1, 8, 4), (2, 4, 0)):
        socks = connect(port_of(server), "127.0.0.4", n)
        send_all(socks, header + b" " * 1000)
        time.sleep(0.5)
        refused = sum(read_answer(s, 0.2).startswith(b"HTTP/1.1 503") for s in socks)
        check(refused == refused_expected, "uploads, round %d: %d of %d refused, expected %d"
              % (round_, refused, n, refused_expected))
        close_all(socks)
        time.sleep(0.3)  # the server sees them close
    prober.stop("8 + 4 uploads past --max-buffered")


def grpc_silent(server, prober_args):
    """The gRPC port's limits: TCP connections that never start HTTP/2 close at the handshake
    deadline (--header-timeout), ones that only send the preface at --idle-timeout."""
    port = int(server.grpc.rsplit(":", 1)[1])
    prober = Prober(server, *prober_args)
    prober.start()
    silent = connect(port, "127.0.0.2", crowd_size(200))
    preface = connect(port, "127.0.0.3", 20)
    send_all(preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    opened = time.monotonic()
    done = wait_closed(silent, opened + HEADER_TIMEOUT + 2, "gRPC without a handshake")
    idle = wait_closed(preface, opened + IDLE_TIMEOUT + 2, "gRPC without calls")
    prober.stop("gRPC: %d silent, 20 without calls" % len(silent))
    print("    closed after %.1f s (handshake) and %.1f s (idle)" % (done - opened, idle - opened))
    close_all(silent + preface)


def run(binary, tmp):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096 * SCALE:
        skip("the open-file limit (%d) is too low for the crowds" % hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    make_models(tmp)
    model_path = os.path.join(tmp, "tiny_cnn.pt")
    x = torch.randn(1, 3, 32, 32)
    prober_args = (infer_body({"x": x}), reference(model_path, {"x": x}))
    flags = [] if LEGACY else [
        "--header-timeout", str(HEADER_TIMEOUT), "--idle-timeout", str(IDLE_TIMEOUT),
        "--min-rate", str(MIN_RATE), "--max-connections", str(MAX_CONNECTIONS * SCALE),
        "--max-connections-per-address", str(PER_ADDRESS * SCALE), "--max-header", "16384",
        "--max-buffered", str(MAX_BUFFERED * SCALE)]
    grpc = has_grpc(binary) and not LEGACY
    if grpc:
        flags += ["--grpc-port", "0"]
    with serving(Server(binary, model_path, "--workers", "1", *flags)) as server:
        server.wait_ready()
        idle_rss = server.rss_kib()
        print("tiny_cnn on %s; idle VmRSS %.1f MiB" % (server.base, idle_rss / 1024))
        scenarios = (slow_headers, slow_bodies, idle_keep_alive, flood, half_closed, never_reads,
                     oversized_headers, big_uploads) + ((grpc_silent,) if grpc else ())
        for scenario in scenarios:
            scenario(server, prober_args)
        time.sleep(0.5)
        gauge = metrics(server)["memoplan_serve_http_connections"]
        check(gauge <= 2, "%d connections still open after the scenarios" % gauge)
        rss = server.rss_kib()
        print("  after: %d connection(s) open, VmRSS %.1f MiB (%+.1f MiB)"
              % (gauge, rss / 1024, (rss - idle_rss) / 1024))
        check(rss - idle_rss < 100 * 1024, "VmRSS grew %.0f MiB" % ((rss - idle_rss) / 1024))
        code = server.terminate()
        check(code == 0, "exit code %d after SIGTERM" % code)


if __name__ == "__main__":
    argv = [a for i, a in enumerate(sys.argv)
            if a != "--scale" and (i == 0 or sys.argv[i - 1] != "--scale")]
    scale = sys.argv[sys.argv.index("--scale") + 1] if "--scale" in sys.argv else None
    sys.argv = argv
    if scale:
        SCALE = int(scale)
    sys.exit(test_main(__doc__, run))
