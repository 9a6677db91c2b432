"""memoplan-serve's VmRSS after each unload over N unload/load/infer cycles of one model
(docs/SERVE.md, "Unloading gives the memory back"): a repository with the serve.memory test's
19.3 MiB conv net under the given config.json; each cycle unloads it, reads the server's VmRSS,
loads it and sends 4 concurrent infer requests. --warm N first sends 3 rounds of N concurrent
requests (the handler threads' malloc caches filled, as in a server that has served a while).

    /usr/bin/python3 bench/serve_reload_rss.py build/apps/serve/memoplan-serve \
        --config '{"plan": false}' --cycles 40 [--warm 64] [-- server options]
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "apps", "serve"))
import memory_test  # noqa: E402  (the test's model, repository layout and requests)
from serve_client import Server, concurrently, infer_body, request, serving  # noqa: E402

import torch  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--config", default='{"plan": false}', help="the model's config.json")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--warm", type=int, default=0, help="concurrent requests per warm round")
    parser.add_argument("server_args", nargs="*", help="after --: memoplan-serve's options")
    args = parser.parse_args()
    config = json.loads(args.config)
    repo = memory_test.repository(tempfile.mkdtemp(), {"m": config})
    x = torch.randn(memory_test.SHAPE)
    body = infer_body({"x": x})
    headers = {"Content-Type": "application/json"}
    with serving(Server(args.binary, None, "--model-repository", repo, *args.server_args,
                        kernels=None)) as server:
        server.wait_ready(timeout=120)
        for _ in range(3 if args.warm else 0):
            concurrently(args.warm,
                         lambda k: request(server, "POST", "/v2/models/m/infer", body, headers))
        history = []
        for _ in range(args.cycles):
            assert memory_test.post(server, "/v2/repository/models/m/unload")[0] == 200
            history.append(server.rss_kib() / 1024)
            assert memory_test.post(server, "/v2/repository/models/m/load")[0] == 200
            concurrently(4, lambda k: memory_test.infer(server, "m", x))
    print("config %s, %d cycles: VmRSS after unload (MiB) %s" %
          (json.dumps(config), args.cycles, " ".join("%.1f" % h for h in history)))
    if len(history) > 10:
        print("first -> last %.1f -> %.1f MiB; last ten cycles %+.2f MiB" %
              (history[0], history[-1], history[-1] - history[-11]))


if __name__ == "__main__":
    main()
