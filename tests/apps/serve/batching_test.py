"""End-to-end test of memoplan-serve's dynamic batching (--max-batch-size): 8 concurrent clients
sending batch-1 requests to a one-worker server, half over HTTP (inputs named x and INPUT__0)
and half over gRPC when the server has it, plus requests of batch 3 among them; every output
equal, within float rounding, to a direct LibTorch forward of that request alone (a batched
forward may round differently in the last bits: LibTorch's kernels block by batch); /metrics shows
batches of more than one row (memoplan_batch_size) and the queue delay; each new batch size is
planned from the shape family's formulas.

    /usr/bin/python3 tests/apps/serve/batching_test.py build/apps/serve/memoplan-serve
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_client import (Server, check, grpc_client, infer_body, make_models,  # noqa: E402
                          metrics, outputs_of, reference, request, serving, test_main)

import torch  # noqa: E402

CLIENTS, REQUESTS = 8, 15


def run(binary, tmp):
    stubs = grpc_client(binary, tmp)
    if stubs:
        grpc, pb, pb_grpc = stubs
        import grpc_test
    make_models(tmp)
    model_path = os.path.join(tmp, "tiny_cnn.pt")
    args = ["--workers", "1", "--max-batch-size", "8", "--max-queue-delay-us", "2000"]
    if stubs:
        args += ["--grpc-port", "0"]
    with serving(Server(binary, model_path, *args)) as server:
        server.wait_ready()
        print("tiny_cnn on %s%s, one worker, batches of up to 8 rows"
              % (server.base, ", gRPC on " + server.grpc if stubs else ""))
        before = metrics(server)
        failures, worst = [], [0.0]
        lock = threading.Lock()

        def client(k):
            try:
                over_grpc = stubs is not None and k % 2 == 1
                if over_grpc:
                    channel = grpc.insecure_channel(server.grpc)
                    stub = pb_grpc.GRPCInferenceServiceStub(channel)
                for i in range(REQUESTS):
                    torch.manual_seed(1000 * k + i)
                    rows = 3 if i % 5 == 4 else 1
                    x = torch.randn(rows, 3, 32, 32)
                    expected = reference(model_path, {"x": x})["output__0"]
                    name = "INPUT__0" if i % 2 else "x"
                    if over_grpc:
                        got = grpc_test.outputs_of_response(
                            stub.ModelInfer(grpc_test.infer_request(pb, {name: x}, raw=True)))
                    else:
                        status, _, body = request(server, "POST", "/v2/models/tiny_cnn/infer",
                                                  infer_body({name: x}),
                                                  {"Content-Type": "application/json"})
                        if status != 200:
                            failures.append("client %d: %d %s" % (k, status, body[:200]))
                            continue
                        got = outputs_of(body)
                    out = got["output__0"]
                    diff = (out - expected).abs().max().item()
                    with lock:
                        worst[0] = max(worst[0], diff)
                    if out.shape != expected.shape or not torch.allclose(out, expected,
                                                                         rtol=1e-4, atol=1e-5):
                        failures.append("client %d request %d: max |diff| %g" % (k, i, diff))
                if over_grpc:
                    channel.close()
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append("client %d: %r" % (k, e))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not failures, "%d failures: %s" % (len(failures), failures[:5]))
        after = metrics(server)

        def delta(name):
            return after.get(name, 0) - before.get(name, 0)
        batches = delta("memoplan_batch_size_count")
        rows = delta("memoplan_batch_size_sum")
        singles = delta('memoplan_batch_size_bucket{le="1"}')
        expected_rows = CLIENTS * REQUESTS + 2 * CLIENTS * (REQUESTS // 5)
        check(rows == expected_rows, "batched rows %d, expected %d" % (rows, expected_rows))
        check(batches < CLIENTS * REQUESTS and singles < batches,
              "no batch of more than one request: %d batches, %d of one row" % (batches,
                                                                                 singles))
        delays = delta("memoplan_batch_queue_delay_seconds_count")
        check(delays == CLIENTS * REQUESTS, "queue delays observed %d" % delays)
        check(delta("memoplan_family_mispredictions_total") == 0, "family mispredictions")
        print("  %d requests (%d rows) from %d clients%s in %d forward calls (%.1f rows a call, "
              "%d of one row); outputs within %.3g of LibTorch's batch-alone forward; "
              "mean queue delay %.2f ms; %d batch sizes planned from the family's formulas"
              % (CLIENTS * REQUESTS, rows, CLIENTS, " (HTTP and gRPC)" if stubs else "",
                 batches, rows / batches, singles, worst[0],
                 1000 * delta("memoplan_batch_queue_delay_seconds_sum") / delays,
                 delta("memoplan_family_plans_total")))
        code = server.terminate()
        check(code == 0, "exit code %d after SIGTERM" % code)


if __name__ == "__main__":
    sys.exit(test_main(__doc__, run))
