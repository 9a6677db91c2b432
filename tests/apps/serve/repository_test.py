"""End-to-end test of memoplan-serve's model repository (--model-repository DIR): two models
served from one repository (tiny_cnn in Triton's layout NAME/1/model.pt with a config.json giving
its workers, batching, default input and max_dims; spin as NAME/model.pt with both inputs in its
config.json) beside two that cannot load (a bad config.json, a directory without a model file);
each model's outputs over HTTP and gRPC equal to a direct LibTorch forward; the repository index
with every model's state and reason; unload (the model answers 404, the other still serves) and
load again; per-model metrics; the error paths of the repository calls.

    /usr/bin/python3 tests/apps/serve/repository_test.py build/apps/serve/memoplan-serve
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_client import (Server, check, get, get_json, grpc_client, infer_body,  # noqa: E402
                          make_models, metrics, outputs_of, reference, request, same_bits,
                          serving, test_main)

import torch  # noqa: E402


def post(server, path, body=b""):
    return request(server, "POST", path, body, {"Content-Type": "application/json"})


def make_repository(models_dir, repo):
    os.makedirs(os.path.join(repo, "tiny_cnn", "1"))
    shutil.copy(os.path.join(models_dir, "tiny_cnn.pt"), os.path.join(repo, "tiny_cnn", "1",
                                                                       "model.pt"))
    with open(os.path.join(repo, "tiny_cnn", "config.json"), "w") as f:
        json.dump({"workers": 1, "max_batch_size": 4, "max_queue_delay_us": 100,
                   "inputs": [{"name": "x", "dims": [1, 3, 32, 32], "datatype": "FP32",
                               "max_dims": [8, 3, 32, 32]}]}, f)
    os.makedirs(os.path.join(repo, "spin"))
    shutil.copy(os.path.join(models_dir, "spin.pt"), os.path.join(repo, "spin", "model.pt"))
    with open(os.path.join(repo, "spin", "config.json"), "w") as f:
        json.dump({"workers": 1, "inputs": [{"dims": [1, 64], "datatype": "FP32"},
                                            {"dims": [1], "datatype": "INT64"}]}, f)
    os.makedirs(os.path.join(repo, "broken", "1"))
    shutil.copy(os.path.join(models_dir, "tiny_cnn.pt"), os.path.join(repo, "broken", "1",
                                                                       "model.pt"))
    with open(os.path.join(repo, "broken", "config.json"), "w") as f:
        json.dump({"workers": 1, "batch": 4}, f)
    os.makedirs(os.path.join(repo, "empty"))


def index(server, body=b""):
    status, _, text = post(server, "/v2/repository/index", body)
    check(status == 200, "index: %d %s" % (status, text[:200]))
    return {e["name"]: e for e in json.loads(text)}


def run(binary, tmp):
    models_dir = os.path.join(tmp, "models")
    make_models(models_dir)
    repo = os.path.join(tmp, "repo")
    make_repository(models_dir, repo)
    stubs = grpc_client(binary, tmp)
    args = ["--model-repository", repo] + (["--grpc-port", "0"] if stubs else [])
    with serving(Server(binary, None, *args)) as server:
        server.wait_ready()
        print("repository %s on %s" % (repo, server.base))
        if stubs:
            grpc, pb, pb_grpc = stubs
            import grpc_test
            grpc_stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc))

        # The index: two ready, two that cannot load, with why.
        entries = index(server)
        check(sorted(entries) == ["broken", "empty", "spin", "tiny_cnn"],
              "index names: %s" % sorted(entries))
        check(entries["tiny_cnn"]["state"] == "READY" and entries["spin"]["state"] == "READY",
              "ready models: %s" % entries)
        check(entries["broken"]["state"] == "UNAVAILABLE" and
              '"batch" is not a key' in entries["broken"]["reason"],
              "broken model: %s" % entries["broken"])
        check(entries["empty"]["state"] == "UNAVAILABLE" and
              "no model file" in entries["empty"]["reason"], "empty: %s" % entries["empty"])
        check(sorted(index(server, b'{"ready": true}')) == ["spin", "tiny_cnn"],
              "index of ready models")
        print("  index: tiny_cnn and spin READY; broken and empty UNAVAILABLE:\n    %s\n    %s"
              % (entries["broken"]["reason"].split(": ", 1)[-1][:100],
                 entries["empty"]["reason"][:100]))

        # Both models, both protocols, as LibTorch.
        spin_meta = get_json(server, "/v2/models/spin")
        check([i["datatype"] for i in spin_meta["inputs"]] == ["FP32", "INT64"],
              "spin metadata: %s" % spin_meta)
        torch.manual_seed(3)
        x = torch.randn(2, 3, 32, 32)
        y, n = torch.randn(1, 64), torch.tensor([3])
        cnn_expected = reference(os.path.join(models_dir, "tiny_cnn.pt"), {"x": x})
        spin_expected = reference(os.path.join(models_dir, "spin.pt"), {"x": y, "n": n})
        status, _, body = post(server, "/v2/models/tiny_cnn/infer", infer_body({"x": x}))
        check(status == 200, "tiny_cnn: %d %s" % (status, body[:200]))
        check(same_bits(outputs_of(body)["output__0"], cnn_expected["output__0"]),
              "tiny_cnn differs from LibTorch")
        names = [i["name"] for i in spin_meta["inputs"]]
        status, _, body = post(server, "/v2/models/spin/infer",
                               infer_body({"INPUT__0": y, "INPUT__1": n}))
        check(status == 200, "spin: %d %s" % (status, body[:200]))
        got = outputs_of(body)
        for k in spin_expected:
            check(same_bits(got[k], spin_expected[k]), "spin %s differs from LibTorch" % k)
        if stubs:
            r = grpc_stub.ModelInfer(grpc_test.infer_request(pb, {"x": x}, raw=True,
                                                             model="tiny_cnn"))
            check(same_bits(grpc_test.outputs_of_response(r)["output__0"],
                            cnn_expected["output__0"]), "tiny_cnn over gRPC")
            req = pb.ModelInferRequest(model_name="spin")
            for name, t in ((names[0], y), (names[1], n)):
                req.inputs.add(name=name, datatype="FP32" if t.dtype == torch.float32
                               else "INT64", shape=list(t.shape))
                req.raw_input_contents.append(t.numpy().tobytes())
            r = grpc_stub.ModelInfer(req)
            check(same_bits(grpc_test.outputs_of_response(r)["output__0"],
                            spin_expected["output__0"]), "spin over gRPC")
        print("  tiny_cnn and spin over HTTP%s: bit-identical to LibTorch"
              % (" and gRPC" if stubs else ""))

        # config.json's max_dims; unknown models.
        status, _, body = post(server, "/v2/models/tiny_cnn/infer",
                               infer_body({"x": torch.randn(9, 3, 32, 32)}))
        check(status == 400 and b"exceeds the model's max_dims [8,3,32,32]" in body,
              "max_dims: %d %s" % (status, body[:200]))
        status, _, body = post(server, "/v2/models/broken/infer", infer_body({"x": x}))
        check(status == 404 and b"this server serves 'spin', 'tiny_cnn'" in body,
              "a model that did not load: %d %s" % (status, body[:200]))

        # Per-model metrics.
        m = metrics(server)
        check(m.get('memoplan_model_inferences_total{model="tiny_cnn"}', 0) >= 2
              and m.get('memoplan_model_inferences_total{model="spin"}', 0) >= 1
              and m.get('memoplan_model_ready{model="spin"}') == 1,
              "per-model metrics: %s" % {k: v for k, v in m.items() if "model=" in k})
        print("  max_dims refused, unknown models 404, per-model metrics")

        # Unload, then load again.
        status, _, body = post(server, "/v2/repository/models/tiny_cnn/unload")
        check(status == 200, "unload: %d %s" % (status, body[:200]))
        status, _, body = post(server, "/v2/models/tiny_cnn/infer", infer_body({"x": x}))
        check(status == 404, "an unloaded model: %d" % status)
        check(index(server)["tiny_cnn"]["state"] == "UNAVAILABLE", "index after unload")
        check(get(server, "/v2/models/spin/ready")[0] == 200, "spin still ready")
        status, _, body = post(server, "/v2/models/spin/infer",
                               infer_body({"INPUT__0": y, "INPUT__1": n}))
        check(status == 200, "spin after the unload: %d" % status)
        status, _, body = post(server, "/v2/repository/models/tiny_cnn/load")
        check(status == 200, "load: %d %s" % (status, body[:200]))
        check(index(server)["tiny_cnn"]["state"] == "READY", "index after load")
        status, _, body = post(server, "/v2/models/tiny_cnn/infer", infer_body({"x": x}))
        check(status == 200 and same_bits(outputs_of(body)["output__0"],
                                          cnn_expected["output__0"]), "tiny_cnn reloaded")
        print("  unload: 404 for it, the other serves on; load: READY and bit-identical again")

        # The repository calls' errors.
        for path, expected, fragment in (
                ("/v2/repository/models/nope/load", 404, b"no model 'nope' in the repository"),
                ("/v2/repository/models/broken/load", 400, b"is not a key"),
                ("/v2/repository/models/empty/load", 400, b"no model file"),
                ("/v2/repository/models/nope/unload", 404, b"is not loaded")):
            status, _, body = post(server, path)
            check(status == expected and fragment in body,
                  "%s: %d %s" % (path, status, body[:200]))
        status, _, body = post(server, "/v2/repository/index", b"[1")
        check(status == 400, "malformed index body: %d" % status)
        status, _, body = post(server, "/v2/models/spin/infer", infer_body({"INPUT__0": y}))
        check(status == 400, "the server still serves: %d" % status)
        print("  repository errors: unknown model 404, bad config 400, no file 400, "
              "not loaded 404, malformed index body 400")
        code = server.terminate()
        check(code == 0, "exit code %d after SIGTERM" % code)


if __name__ == "__main__":
    sys.exit(test_main(__doc__, run))
