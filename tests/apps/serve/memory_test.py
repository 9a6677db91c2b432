"""End-to-end test of memoplan-serve's memory per model (docs/SERVE.md, "Memory"):

- /metrics' memoplan_model_memory_bytes (weights plain and packed, slabs), charged and limit
  series, and the metadata's memory parameters, for a model served with the tuned kernels (its
  weights held once) and one served stock;
- a model whose config.json memory_limit is below what it holds is refused at load with the reason,
  the others serve;
- --memory-limit: a second model that would pass it is refused with a clear error, and nothing
  else is unloaded (the first still answers, bit for bit);
- a model under a budget (config.json "budget") serves the stock outputs bit for bit, within its
  budget, and a budget with the tuned kernels is refused;
- unloading gives the memory back: after its handler threads have served and two load/unloads have
  warmed the process (the runtime's one-time costs: oneDNN's generated code, kernel choices), 20
  unload/load/infer cycles, each leaving the server's VmRSS after the unload within 10% of the
  model's charged bytes of the cycle before's, and the last ten within that slack of each other.

    /usr/bin/python3 tests/apps/serve/memory_test.py build/apps/serve/memoplan-serve
"""
import json
import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_client import (Server, check, infer_body, metrics, outputs_of, reference,  # noqa: E402
                          request, get_json, same_bits, serving, test_main)

import torch  # noqa: E402

CYCLES = 20
SHAPE = [1, 3, 8, 8]


class Wide(torch.nn.Module):
    """A conv net with 30.5 MiB of weights, so the memory figures stand well above the noise (the
    cycles' slack is 10% of them: 3.1 MiB, against the allocator's ~0.1 MiB a cycle, below)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.stem = torch.nn.Conv2d(3, 256, 3, padding=1)
        self.convs = torch.nn.Sequential(*[torch.nn.Conv2d(256, 256, 3, padding=1)
                                           for _ in range(10)])
        self.fc = torch.nn.Linear(256 * 4 * 4, 512)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        for conv in self.convs:
            y = torch.relu(conv(y))
        y = torch.nn.functional.adaptive_avg_pool2d(y, 4)
        return self.fc(torch.flatten(y, 1))


def make_model(path):
    with torch.inference_mode():
        traced = torch.jit.trace(Wide().eval(), torch.randn(SHAPE))
    traced.save(path)


def repository(root, models):
    """models: {name: config dict}, each a copy of the wide model in Triton's layout."""
    source = os.path.join(root, "wide.pt")
    if not os.path.exists(source):
        make_model(source)
    repo = os.path.join(root, "repo-" + "-".join(sorted(models)))
    for name, config in models.items():
        os.makedirs(os.path.join(repo, name, "1"))
        os.link(source, os.path.join(repo, name, "1", "model.pt"))
        config = dict(config, inputs=[{"name": "x", "dims": SHAPE, "datatype": "FP32"}])
        with open(os.path.join(repo, name, "config.json"), "w") as f:
            json.dump(config, f)
    return repo


def post(server, path):
    return request(server, "POST", path, b"", {"Content-Type": "application/json"})


def infer(server, name, x):
    status, headers, body = request(server, "POST", "/v2/models/%s/infer" % name,
                                    infer_body({"x": x}), {"Content-Type": "application/json"})
    check(status == 200, "infer %s: %d %s" % (name, status, body[:300]))
    return outputs_of(body)["output__0"]


def memory_series(server, name):
    m = metrics(server)
    label = 'model="%s"' % name
    return {part: m['memoplan_model_memory_bytes{%s,part="%s"}' % (label, part)]
            for part in ("weights_plain", "weights_packed", "slabs")}, m


def cpu_has(flag):
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and flag in line.split() for line in f)


def run(binary, tmp):
    x = torch.randn(SHAPE)
    weights = 0
    # The tuned kernels pack these convolutions where oneDNN runs AVX2 or better (docs/KERNELS.md);
    # elsewhere the "tuned" model runs as tuned chooses, and the packing checks are left out.
    packs = cpu_has("avx2")
    repo = repository(tmp, {"tuned": {"workers": 2, "kernels": "tuned"},
                            "stock": {"workers": 1},
                            "capped": {"workers": 1, "memory_limit": 1 << 20}})
    expected = reference(os.path.join(tmp, "wide.pt"), {"x": x})["output__0"]
    with serving(Server(binary, None, "--model-repository", repo)) as server:
        server.wait_ready(timeout=120)
        weights = sum(p.numel() * 4 for p in Wide().parameters())
        # The model over its memory_limit is refused with the reason; the others serve.
        status, _, text = post(server, "/v2/repository/index")
        index = {e["name"]: e for e in json.loads(text)}
        check(index["capped"]["state"] == "UNAVAILABLE" and
              "over its memory_limit of 1.0 MiB" in index["capped"]["reason"],
              "capped: %s" % index["capped"])
        check(same_bits(infer(server, "stock", x), expected), "stock model's output")
        got = infer(server, "tuned", x)
        check((got - expected).abs().max().item() < 1e-4, "tuned model's output")

        stock, m = memory_series(server, "stock")
        check(abs(stock["weights_plain"] - weights) < 64 << 10,
              "stock: plain weights %d, the model has %d" % (stock["weights_plain"], weights))
        check(stock["weights_packed"] == 0 and stock["slabs"] > 0, "stock: %s" % stock)
        tuned, m = memory_series(server, "tuned")
        # Held once: the plain weights leave memory once packed (a path that reads one plain keeps
        # that one: the linear's, if it measured aten faster).
        if packs:
            check(tuned["weights_packed"] > weights / 2 and tuned["weights_plain"] < weights * 0.7,
                  "tuned: weights held once? %s (plain weights %d)" % (tuned, weights))
        charged = m['memoplan_model_memory_charged_bytes{model="tuned"}']
        check(charged >= sum(tuned.values()), "tuned charged %d < %s" % (charged, tuned))
        total = m["memoplan_serve_models_memory_bytes"]
        check(total == charged + m['memoplan_model_memory_charged_bytes{model="stock"}'],
              "server total %d" % total)
        meta = get_json(server, "/v2/models/tuned")["parameters"]
        check((meta["weights_packed_bytes"] > 0 or not packs) and
              meta["memory_bytes"] >= charged * 0.9, "metadata: %s" % meta)
        # What each model runs on: its plan, kernels, memory, and the tuned kernels' coverage.
        check(meta["plan"] == "planned" and meta["kernels"] == "tuned" and
              meta["memory"] == "offset" and 0 <= meta["tuned_flops_fraction"] <= 1 and
              (meta["tuned_flops_fraction"] > 0.5 or not packs), "metadata: %s" % meta)
        stock_runs_on = get_json(server, "/v2/models/stock")["parameters"]
        check(stock_runs_on["kernels"] == "stock" and "tuned_flops_fraction" not in stock_runs_on,
              "stock metadata: %s" % stock_runs_on)
        print("weights %.1f MiB; stock %s; tuned %s, charged %.1f MiB" %
              (weights / 2**20, {k: round(v / 2**20, 1) for k, v in stock.items()},
               {k: round(v / 2**20, 1) for k, v in tuned.items()}, charged / 2**20))

        # Load/unload cycles of the tuned model: memory back each time.
        def cycle():
            check(post(server, "/v2/repository/models/tuned/unload")[0] == 200, "unload")
            rss_unloaded = server.rss_kib() * 1024
            status, _, text = post(server, "/v2/repository/models/tuned/load")
            check(status == 200, "load: %d %s" % (status, text[:300]))
            # Both workers serve (each takes its slab).
            threads = [threading.Thread(target=infer, args=(server, "tuned", x)) for _ in range(4)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            return rss_unloaded
        # The server's 64 handler threads (its default) each fill a malloc thread cache or arena of
        # their own as requests first reach them (tcmalloc: 8 MiB in all, main.cc): warmed first, as
        # in a server that has served a while; else the cycles' 4 requests each warm a few more and
        # VmRSS rises ~0.5 MiB a cycle over the first 15, "plan": false too.
        for _ in range(3):
            # (a busy worker's full queue answers 503: a handler thread ran all the same)
            threads = [threading.Thread(target=request, args=(
                server, "POST", "/v2/models/stock/infer", infer_body({"x": x}),
                {"Content-Type": "application/json"})) for _ in range(64)]
            [t.start() for t in threads]
            [t.join() for t in threads]
        # The process's allocator (tcmalloc) keeps ~0.1 MiB more of its heap after each of the
        # first cycles, less and less: measured over 100 cycles of the 19 MiB model, VmRSS rose
        # 2.8 MiB over the first 50 and 0.3 over the last 30, while the live heap after 3 and 13
        # cycles differed by 40 KiB (heaptrack). Two cycles warm it; the model is large enough
        # for the last ten cycles' rise (0.5-0.7 MiB; 0.8-1.3 with the 19 MiB model) to stay well
        # inside the 10% slack, which a 2.1 MiB slack did not always do in CI.
        cycle()
        cycle()
        slack = 0.10 * charged
        history = [cycle()]
        for i in range(CYCLES):
            history.append(cycle())
            grew = history[-1] - history[-2]
            check(grew <= slack,
                  "cycle %d: VmRSS after unload %.1f MiB above the cycle before's (slack %.1f MiB:"
                  " 10%% of the model's %.1f MiB); all: %s" %
                  (i, grew / 2**20, slack / 2**20, charged / 2**20,
                   [round(r / 2**20, 1) for r in history]))
        # Loads and unloads run on the server's load thread (load_thread.h), which reuses what the
        # last one freed: the last ten cycles must be flat.
        settled = history[-1] - history[-11]
        check(settled <= slack,
              "the last 10 cycles grew VmRSS %.1f MiB (slack %.1f MiB); all: %s" %
              (settled / 2**20, slack / 2**20, [round(r / 2**20, 1) for r in history]))
        print("%d load/unload cycles: VmRSS after unload %s MiB (slack %.1f MiB)" %
              (CYCLES, [round(r / 2**20, 1) for r in history], slack / 2**20))
        check(same_bits(infer(server, "stock", x), expected), "stock model after the cycles")
        stock_meta = get_json(server, "/v2/models/stock")["parameters"]

    # --memory-limit: room for one stock model of two workers and the next one's file, not for
    # both planned: the second passes the file check, is planned, and is refused then (stock:
    # its charge does not depend on measured kernel choices); the first serves on.
    charge = stock_meta["weights_plain_bytes"] + 2 * stock_meta["slab_per_worker_bytes"]
    file_bytes = os.path.getsize(os.path.join(tmp, "wide.pt"))
    limit = charge + file_bytes + (1 << 20)
    check(2 * charge > limit, "the test's model: its slabs must pass the file's size")
    repo = repository(tmp, {"first": {"workers": 2}, "second": {"workers": 2}})
    with serving(Server(binary, None, "--model-repository", repo,
                        "--memory-limit", str(limit))) as server:
        server.wait_ready(timeout=120)
        status, _, text = post(server, "/v2/repository/index")
        index = {e["name"]: e for e in json.loads(text)}
        check(index["first"]["state"] == "READY", "first: %s" % index["first"])
        check(index["second"]["state"] == "UNAVAILABLE" and
              "it would hold" in index["second"]["reason"] and
              "over --memory-limit" in index["second"]["reason"] and
              "no model was unloaded" in index["second"]["reason"],
              "second: %s" % index["second"])
        status, _, text = post(server, "/v2/repository/models/second/load")
        check(status == 400 and b"over --memory-limit" in text, "load second: %d %s" % (status,
                                                                                      text))
        check(same_bits(infer(server, "first", x), expected), "first still serves")
        m = metrics(server)
        check(m["memoplan_serve_memory_limit_bytes"] == limit and
              m["memoplan_serve_models_memory_bytes"] <= limit, "limit series")
        print("--memory-limit %.1f MiB: second refused: %s" % (limit / 2**20,
                                                               index["second"]["reason"]))

    # A budget (config.json "budget", 60% of the weights plus the slab): outputs bit for bit the
    # stock model's, the budget in the metadata, the weights resident after a pass within it; a
    # budget with the tuned kernels is refused at load, saying why.
    repo = repository(tmp, {"budgeted": {"budget": "60%"},
                            "tuned_budget": {"kernels": "tuned", "budget": "1GiB"}})
    with serving(Server(binary, None, "--model-repository", repo)) as server:
        server.wait_ready(timeout=120)
        status, _, text = post(server, "/v2/repository/index")
        index = {e["name"]: e for e in json.loads(text)}
        check(index["tuned_budget"]["state"] == "UNAVAILABLE" and
              "a budget needs kernels" in index["tuned_budget"]["reason"],
              "tuned_budget: %s" % index["tuned_budget"])
        for _ in range(3):
            check(same_bits(infer(server, "budgeted", x), expected), "budgeted model's output")
        meta = get_json(server, "/v2/models/budgeted")["parameters"]
        budget = meta.get("budget_bytes", 0)
        check(0.55 * weights < budget < 0.75 * weights + (4 << 20) and
              meta["weights_plain_bytes"] <= budget, "budgeted metadata: %s" % meta)
        print("budget 60%%: %.1f MiB; weights resident after a pass %.1f MiB of %.1f" %
              (budget / 2**20, meta["weights_plain_bytes"] / 2**20, weights / 2**20))
    done = subprocess.run([binary, os.path.join(tmp, "wide.pt"), "--port", "0", "--budget", "50%",
                           "--kernels", "tuned"], capture_output=True, text=True, timeout=120)
    check(done.returncode == 2 and "a budget needs kernels" in done.stderr,
          "--budget with --kernels tuned: %d %s" % (done.returncode, done.stderr[-400:]))

    # One model, its file alone over the limit: the server says why and exits 2 before it listens.
    done = subprocess.run([binary, os.path.join(tmp, "wide.pt"), "--port", "0",
                           "--memory-limit", "4M"], capture_output=True, text=True, timeout=120)
    check(done.returncode == 2 and "its file would hold" in done.stderr and
          "over --memory-limit 4.0 MiB" in done.stderr,
          "single model over the limit: %d %s" % (done.returncode, done.stderr[-400:]))


if __name__ == "__main__":
    sys.exit(test_main(__doc__, run))
