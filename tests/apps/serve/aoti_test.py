"""memoplan-serve on AOTInductor packages (issue 55, LibTorch >= 2.6): a model repository of
tiny_cnn/1/model.pt2 and tiny_bert/1/model.pt2 (tests/torch_ext/aoti/make_packages.py, directory
in $MEMOPLAN_AOTI_PACKAGES), each planned as one call. Their metadata (input__0 with the exported
shape and dtype, the plan), outputs over HTTP (JSON and binary) and gRPC bit-identical to the
package run from Python on one thread, 4 clients at once, /metrics' slab bytes, the weights'
bytes (the package's constants), a wrong shape
refused with the server serving on, unload and load; a package configured with tuned kernels or
dynamic batching listed UNAVAILABLE with why; one whose metadata has no input shape (AOTInductor
checks none) refused, and served once config.json gives it.

    MEMOPLAN_AOTI_PACKAGES=DIR /usr/bin/python3 tests/apps/serve/aoti_test.py memoplan-serve
"""
import json
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_client import (Server, binary_body, check, concurrently, get_json,  # noqa: E402
                          grpc_client, infer_body, metrics, outputs_of, request, same_bits, serving, skip,
                          test_main)

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torch_ext",
                                "aoti"))
import make_packages  # noqa: E402

MODELS = {"tiny_cnn": ([1, 3, 32, 32], "FP32"), "tiny_bert": ([1, 16], "INT64")}


def weight_bytes(name):
    """The eager model's weights and buffers, as make_packages.py builds it."""
    model = make_packages.models_by_name()[name]
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def post(server, path, body=b"", headers=None):
    return request(server, "POST", path, body,
                   {"Content-Type": "application/json", **(headers or {})})


def without_input_shape(package, out):
    """A copy of `package` whose metadata names no input (as aoti_compile_and_package writes it
    without inductor_configs)."""
    with zipfile.ZipFile(package) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("_metadata.json"):
                data = json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
            dst.writestr(item, data)


def make_repository(packages, repo):
    bare = os.path.join(os.path.dirname(repo), "bare.pt2")
    without_input_shape(os.path.join(packages, "tiny_cnn.pt2"), bare)
    entries = {"tiny_cnn": ("tiny_cnn", None), "tiny_bert": ("tiny_bert", None),
               "tuned": ("tiny_cnn", {"kernels": "tuned"}),
               "batched": ("tiny_cnn", {"max_batch_size": 4}),
               "bare": (bare, None),
               "given": (bare, {"inputs": [{"dims": [1, 3, 32, 32], "datatype": "FP32"}]})}
    for name, (package, config) in entries.items():
        os.makedirs(os.path.join(repo, name, "1"))
        os.symlink(package if package.endswith(".pt2") else
                   os.path.join(packages, package + ".pt2"),
                   os.path.join(repo, name, "1", "model.pt2"))
        if config:
            with open(os.path.join(repo, name, "config.json"), "w") as f:
                json.dump(config, f)


def example(name, seed):
    torch.manual_seed(seed)
    shape, datatype = MODELS[name]
    return torch.randn(shape) if datatype == "FP32" else torch.randint(0, 1000, shape)


def run(binary, tmp):
    packages = os.environ.get("MEMOPLAN_AOTI_PACKAGES", "")
    if not os.path.exists(os.path.join(packages, "tiny_cnn.pt2")):
        skip("no packages in MEMOPLAN_AOTI_PACKAGES=%r (torch_ext.make_aoti_packages)" % packages)
    repo = os.path.join(tmp, "repo")
    make_repository(packages, repo)
    torch.set_num_threads(1)  # as the server's workers: Inductor's reductions split by threads
    loaded = {n: torch._inductor.aoti_load_package(os.path.join(packages, n + ".pt2"))
              for n in MODELS}

    def expected(name, x):
        with torch.inference_mode():
            out = loaded[name](x)
        return out[0] if isinstance(out, (list, tuple)) else out

    stubs = grpc_client(binary, tmp)
    args = ["--model-repository", repo, "--workers", "2"] + (["--grpc-port", "0"] if stubs else [])
    with serving(Server(binary, None, *args)) as server:
        server.wait_ready(timeout=120)
        status, _, text = post(server, "/v2/repository/index")
        index = {e["name"]: e for e in json.loads(text)}
        for name in list(MODELS) + ["given"]:
            check(index[name]["state"] == "READY", "%s: %s" % (name, index[name]))
        check(index["bare"]["state"] == "UNAVAILABLE" and
              "input shapes are not known" in index["bare"]["reason"], "bare: %s" % index["bare"])
        check(index["tuned"]["state"] == "UNAVAILABLE" and
              "an AOTInductor package runs Inductor's kernels" in index["tuned"]["reason"],
              "tuned: %s" % index["tuned"])
        check(index["batched"]["state"] == "UNAVAILABLE" and
              "fixed batch of 1" in index["batched"]["reason"], "batched: %s" % index["batched"])
        print("  tuned, batched, bare UNAVAILABLE:\n    %s\n    %s\n    %s"
              % (index["tuned"]["reason"][-110:], index["batched"]["reason"][-110:],
                 index["bare"]["reason"][-110:]))
        x = example("tiny_cnn", 9)
        status, _, body = post(server, "/v2/models/given/infer", infer_body({"input__0": x}))
        check(status == 200 and same_bits(outputs_of(body)["output__0"], expected("tiny_cnn", x)),
              "given (shapes from config.json): %d %s" % (status, body[:200]))

        for name, (shape, datatype) in MODELS.items():
            meta = get_json(server, "/v2/models/" + name)
            check(meta["inputs"] == [{"name": "input__0", "datatype": datatype, "shape": shape}],
                  "%s inputs: %s" % (name, meta["inputs"]))
            check([o["name"] for o in meta["outputs"]] == ["output__0"],
                  "%s outputs: %s" % (name, meta["outputs"]))
            params = meta["parameters"]
            check(params["plan"] == "planned" and params["kernels"] == "stock",
                  "%s runs on: %s" % (name, params))
            # The package's constants, from its library's symbol table: the model's weights
            # (Inductor may fold batch norms into them: within a quarter).
            weights = weight_bytes(name)
            check(0.75 * weights <= params["weights_plain_bytes"] <= 1.25 * weights,
                  "%s: weights_plain_bytes %d, the model's %d" % (name, params["weights_plain_bytes"],
                                                                 weights))
            runs_on = {k: v for k, v in params.items() if k in ("plan", "kernels", "memory")}
            print("  %s: %s, weights %d bytes (eager: %d)" % (name, runs_on,
                                                            params["weights_plain_bytes"], weights))
            for seed in range(3):
                x = example(name, seed)
                want = expected(name, x)
                status, _, body = post(server, "/v2/models/%s/infer" % name,
                                       infer_body({"input__0": x}))
                check(status == 200, "%s: %d %s" % (name, status, body[:300]))
                check(same_bits(outputs_of(body)["output__0"], want), "%s (JSON) differs" % name)
                raw, length = binary_body({"input__0": x})
                status, headers, body = post(
                    server, "/v2/models/%s/infer" % name, raw,
                    {"Inference-Header-Content-Length": str(length)})
                check(status == 200, "%s binary: %d" % (name, status))
                got = outputs_of(body, int(headers["Inference-Header-Content-Length"]))
                check(same_bits(got["output__0"], want), "%s (binary) differs" % name)
                if stubs:
                    import grpc_test
                    grpc, pb, pb_grpc = stubs
                    stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc))
                    response = stub.ModelInfer(grpc_test.infer_request(pb, {"input__0": x},
                                                                       raw=True, model=name))
                    check(same_bits(grpc_test.outputs_of_response(response)["output__0"], want),
                          "%s (gRPC) differs" % name)

        # 4 clients at once on 2 workers (their run() calls share the package's one model).
        failures = []

        def client(k):
            for i in range(5):
                name = list(MODELS)[(k + i) % 2]
                x = example(name, 100 + 10 * k + i)
                status, _, body = post(server, "/v2/models/%s/infer" % name,
                                       infer_body({"input__0": x}))
                if status != 200 or not same_bits(outputs_of(body)["output__0"],
                                                  expected(name, x)):
                    failures.append((k, i, name, status))

        concurrently(4, client)
        check(not failures, "concurrent requests: %s" % failures)
        m = metrics(server)
        slabs = m.get('memoplan_model_memory_bytes{model="tiny_cnn",version="1",part="slabs"}',
                      m.get('memoplan_model_memory_bytes{model="tiny_cnn",part="slabs"}', 0))
        check(slabs > 0, "tiny_cnn's slabs in /metrics: %s"
              % {k: v for k, v in m.items() if "memory_bytes" in k})
        print("  HTTP JSON, binary%s, 4 clients: bit-identical to the package in Python; "
              "tiny_cnn slabs %d bytes" % (", gRPC" if stubs else "", slabs))

        status, _, body = post(server, "/v2/models/tiny_cnn/infer",
                               infer_body({"input__0": torch.randn(1, 3, 16, 16)}))
        check(status == 400, "wrong shape: %d %s" % (status, body[:200]))
        print("  wrong shape: 400 %s" % body[:120])
        for path in ("/v2/repository/models/tiny_cnn/unload", "/v2/repository/models/tiny_cnn/load"):
            status, _, body = post(server, path)
            check(status == 200, "%s: %d %s" % (path, status, body[:200]))
        x = example("tiny_cnn", 7)
        status, _, body = post(server, "/v2/models/tiny_cnn/infer", infer_body({"input__0": x}))
        check(status == 200 and same_bits(outputs_of(body)["output__0"],
                                          expected("tiny_cnn", x)), "after unload and load")
        print("  unload, load, infer: ok")
        check(server.terminate() == 0, "exit code after SIGTERM")


if __name__ == "__main__":
    sys.exit(test_main(__doc__, run))
