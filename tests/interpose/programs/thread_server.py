"""A thread-per-request Python server, as the standard library makes one (ThreadingHTTPServer: a
new thread per connection, as Flask's development server), without torch: each request's body
(256 KiB) is read, copied, cut into 16 KiB chunks, checksummed and answered as JSON. Clients in the
same process (their threads live for the whole run) send `requests` requests from `clients`
threads and check every answer. Run under the shim with stats_print: the test checks that the
request threads' pass was learned from exited threads and that later threads were served from
slabs (CPython 3.11 reaches the body's buffer by another call path once it has specialized its
bytecode, which the first threads did not: the pass is learned again).

    python3 thread_server.py [requests [clients]]
"""
import http.client
import json
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = 256 * 1024
CHUNK = 16 * 1024


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        copy = bytearray(body)
        chunks = [bytes(copy[i:i + CHUNK]) for i in range(0, len(copy), CHUNK)]
        reply = json.dumps({"crc": [zlib.crc32(c) for c in chunks]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *unused):
        pass


def main():
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    body = bytes((i * 7 + i // 251) % 256 for i in range(BODY))
    expected = [zlib.crc32(body[i:i + CHUNK]) for i in range(0, BODY, CHUNK)]
    lock = threading.Lock()
    state = {"next": 0, "bad": 0}

    def client():
        while True:
            with lock:
                if state["next"] >= requests:
                    return
                state["next"] += 1
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/", body, {"Content-Type": "application/octet-stream"})
            answer = json.loads(conn.getresponse().read())
            conn.close()
            if answer["crc"] != expected:
                with lock:
                    state["bad"] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.shutdown()
    server.server_close()
    if state["bad"]:
        print(f"thread_server: {state['bad']} wrong answers of {requests}", file=sys.stderr)
        return 1
    print(f"thread_server: {requests} answers right", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
