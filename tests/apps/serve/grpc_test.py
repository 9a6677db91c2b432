"""End-to-end test of memoplan-serve's KServe v2 gRPC protocol (--grpc-port) with a real gRPC
client: Debian's python3-grpcio, with stubs generated here from apps/serve/proto/kserve_v2.proto
by protoc and grpc_python_plugin (protobuf-compiler-grpc), not the server's own code. Health,
readiness and metadata; infer with typed contents and with raw_input_contents, inputs by
forward's argument name and by Triton's position (INPUT__0), outputs asked for as OUTPUT__0,
outputs bit-identical to a direct LibTorch forward and to the same request over HTTP; 8 clients at
once; every error path with the protocol's status code (unknown model and version, bad names,
shapes, datatypes and contents, malformed protobuf, a message over the size limit), the server
serving on after each; /metrics counting the calls by code.

    /usr/bin/python3 tests/apps/serve/grpc_test.py build/apps/serve/memoplan-serve
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_client import (Server, TestFailure, check, concurrently, get_json,  # noqa: E402
                          has_grpc, infer_body, make_models, metrics, outputs_of, reference, request,
                          serving, skip, test_main)

import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROTO_DIR = os.path.join(ROOT, "apps", "serve", "proto")
MAX_BODY = 1 << 20


def generate_stubs(out_dir):
    """kserve_v2_pb2 and kserve_v2_pb2_grpc from the .proto, with Debian's protoc and plugin."""
    plugin = shutil.which("grpc_python_plugin")
    if not shutil.which("protoc") or not plugin:
        skip("protoc or grpc_python_plugin is not installed (protobuf-compiler-grpc)")
    subprocess.run(["protoc", "-I", PROTO_DIR, "--python_out=" + out_dir,
                    "--grpc_python_out=" + out_dir, "--plugin=protoc-gen-grpc_python=" + plugin,
                    os.path.join(PROTO_DIR, "kserve_v2.proto")], check=True)
    sys.path.insert(0, out_dir)


def infer_request(pb, inputs, raw=False, outputs=(), model="tiny_cnn", id_=""):
    """inputs: {name: tensor} (FP32 in contents, or every datatype raw)."""
    req = pb.ModelInferRequest(model_name=model, id=id_)
    for name, t in inputs.items():
        tensor = req.inputs.add(name=name, datatype={torch.float32: "FP32", torch.float64: "FP64",
                                                     torch.int64: "INT64"}[t.dtype],
                                shape=list(t.shape))
        if raw:
            req.raw_input_contents.append(t.contiguous().numpy().tobytes())
        elif t.dtype == torch.float32:
            tensor.contents.fp32_contents.extend(t.flatten().tolist())
        elif t.dtype == torch.float64:
            tensor.contents.fp64_contents.extend(t.flatten().tolist())
        else:
            tensor.contents.int64_contents.extend(t.flatten().tolist())
    for name in outputs:
        req.outputs.add(name=name)
    return req


def outputs_of_response(response):
    """{name: tensor} of a ModelInferResponse (raw_output_contents)."""
    check(len(response.raw_output_contents) == len(response.outputs),
          "raw_output_contents: %d for %d outputs" % (len(response.raw_output_contents),
                                                      len(response.outputs)))
    dtypes = {"FP32": torch.float32, "FP64": torch.float64, "INT64": torch.int64}
    return {o.name: torch.frombuffer(bytearray(raw), dtype=dtypes[o.datatype]).reshape(list(o.shape))
            for o, raw in zip(response.outputs, response.raw_output_contents)}


def expect_error(grpc, call, code, fragment, what):
    try:
        call()
    except grpc.RpcError as e:
        check(e.code() == code, "%s: status %s, expected %s: %s" % (what, e.code(), code,
                                                                   e.details()))
        check(fragment in (e.details() or ""), "%s: %r lacks %r" % (what, e.details(), fragment))
        print("  %-18s %-30s %s" % (e.code().name, what, (e.details() or "")[:100]))
        return
    raise TestFailure("%s: no error" % what)


def run(binary, tmp):
    try:
        import grpc
    except ImportError:
        skip("python3-grpcio is not installed")
    if not has_grpc(binary):
        skip("memoplan-serve was built without gRPC (libgrpc++-dev, protobuf-compiler-grpc)")
    generate_stubs(tmp)
    import kserve_v2_pb2 as pb
    import kserve_v2_pb2_grpc as pb_grpc

    make_models(tmp)
    model_path = os.path.join(tmp, "tiny_cnn.pt")
    with serving(Server(binary, model_path, "--workers", "2", "--grpc-port", "0",
                        "--max-body", str(MAX_BODY))) as server:
        server.wait_ready()
        print("tiny_cnn on %s, gRPC on %s" % (server.base, server.grpc))
        channel = grpc.insecure_channel(server.grpc)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        # Health and metadata.
        check(stub.ServerLive(pb.ServerLiveRequest()).live, "ServerLive")
        check(stub.ServerReady(pb.ServerReadyRequest()).ready, "ServerReady")
        check(stub.ModelReady(pb.ModelReadyRequest(name="tiny_cnn")).ready, "ModelReady")
        check(stub.ModelReady(pb.ModelReadyRequest(name="tiny_cnn", version="1")).ready,
              "ModelReady version 1")
        meta = stub.ServerMetadata(pb.ServerMetadataRequest())
        check(meta.name == "memoplan-serve", "ServerMetadata: %s" % meta)
        model = stub.ModelMetadata(pb.ModelMetadataRequest(name="tiny_cnn"))
        check(model.platform == "pytorch_libtorch" and list(model.versions) == ["1"],
              "ModelMetadata: %s" % model)
        check([(t.name, t.datatype, list(t.shape)) for t in model.inputs] ==
              [("x", "FP32", [-1, 3, 32, 32])], "metadata inputs: %s" % model.inputs)
        check([(t.name, t.datatype, list(t.shape)) for t in model.outputs] ==
              [("output__0", "FP32", [-1, 10])], "metadata outputs: %s" % model.outputs)
        print("  ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata: ok")

        # Infer: names, contents and raw, batch 1 and 3; the same as LibTorch and as HTTP.
        for batch in (1, 3):
            torch.manual_seed(10 + batch)
            x = torch.randn(batch, 3, 32, 32)
            expected = reference(model_path, {"x": x})["output__0"]
            status, _, body = request(server, "POST", "/v2/models/tiny_cnn/infer",
                                      infer_body({"INPUT__0": x}),
                                      {"Content-Type": "application/json"})
            check(status == 200, "HTTP infer: %d %s" % (status, body[:200]))
            over_http = outputs_of(body)["output__0"]
            check(torch.equal(over_http, expected), "HTTP differs from LibTorch")
            for name in ("x", "input__0", "INPUT__0"):
                for raw in (False, True):
                    for asked in ((), ("OUTPUT__0",)):
                        response = stub.ModelInfer(infer_request(pb, {name: x}, raw, asked,
                                                                 id_="g-%d" % batch))
                        check(response.model_name == "tiny_cnn" and response.id == "g-%d" % batch,
                              "model name and id: %s %s" % (response.model_name, response.id))
                        got = outputs_of_response(response)
                        answered = asked[0] if asked else "output__0"
                        check(list(got) == [answered], "outputs named %s, expected %s"
                              % (list(got), answered))
                        what = "batch %d, input %s, %s, outputs %s" % (
                            batch, name, "raw" if raw else "contents", asked or "all")
                        check(torch.equal(got[answered], expected),
                              "%s: differs from LibTorch" % what)
                        check(torch.equal(got[answered], over_http), "%s: differs from HTTP" % what)
        print("  ModelInfer (x, input__0, INPUT__0; contents and raw; OUTPUT__0 asked; batch 1 "
              "and 3): bit-identical to LibTorch and to HTTP")

        # 8 clients at once, each on its own channel.
        failures = []

        def client(k):
            try:
                torch.manual_seed(100 + k)
                x = torch.randn(1, 3, 32, 32)
                expected = reference(model_path, {"x": x})["output__0"]
                with grpc.insecure_channel(server.grpc) as ch:
                    s = pb_grpc.GRPCInferenceServiceStub(ch)
                    for _ in range(5):
                        got = outputs_of_response(s.ModelInfer(infer_request(pb, {"x": x}, True)))
                        if not torch.equal(got["output__0"], expected):
                            failures.append("client %d: differs" % k)
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append("client %d: %r" % (k, e))
        concurrently(8, client)
        check(not failures, "concurrent clients: %s" % failures)
        print("  8 concurrent clients x 5 requests: bit-identical")

        # Errors: the protocol's codes, and the server serves on.
        before = metrics(server)
        x = torch.randn(1, 3, 32, 32)
        S = grpc.StatusCode
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {"x": x}, model="resnet")),
                     S.NOT_FOUND, "unknown model 'resnet'", "unknown model")
        bad_version = infer_request(pb, {"x": x})
        bad_version.model_version = "7"
        expect_error(grpc, lambda: stub.ModelInfer(bad_version), S.NOT_FOUND, "no version '7'",
                     "unknown version")
        expect_error(grpc, lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="resnet")),
                     S.NOT_FOUND, "unknown model 'resnet'", "unknown model (metadata)")
        expect_error(grpc, lambda: stub.ModelReady(pb.ModelReadyRequest(name="resnet")),
                     S.NOT_FOUND, "unknown model 'resnet'", "unknown model (ready)")
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {"y": x})),
                     S.INVALID_ARGUMENT, "unknown input 'y'", "unknown input")
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {"INPUT__1": x})),
                     S.INVALID_ARGUMENT, "unknown input 'INPUT__1'", "position out of range")
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {"x": x, "input__0": x})),
                     S.INVALID_ARGUMENT, "given twice", "input twice")
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {})),
                     S.INVALID_ARGUMENT, "'x' is missing", "missing input")
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {"x": torch.randn(1, 3, 16,
                                                                                       16)})),
                     S.INVALID_ARGUMENT, "shape [1,3,16,16]", "wrong shape")
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {"x": x.double()})),
                     S.INVALID_ARGUMENT, "datatype FP64", "wrong datatype")
        expect_error(grpc, lambda: stub.ModelInfer(infer_request(pb, {"x": x}, outputs=["nope"])),
                     S.INVALID_ARGUMENT, "unknown output 'nope'", "unknown output")
        short = infer_request(pb, {"x": x})
        del short.inputs[0].contents.fp32_contents[100:]
        expect_error(grpc, lambda: stub.ModelInfer(short), S.INVALID_ARGUMENT,
                     "contents has 100 elements", "contents count")
        raw_short = infer_request(pb, {"x": x}, raw=True)
        raw_short.raw_input_contents[0] = raw_short.raw_input_contents[0][:-4]
        expect_error(grpc, lambda: stub.ModelInfer(raw_short), S.INVALID_ARGUMENT,
                     "raw bytes", "raw size")
        mixed = infer_request(pb, {"x": x}, raw=True)
        mixed.inputs[0].contents.fp32_contents.append(1.0)
        expect_error(grpc, lambda: stub.ModelInfer(mixed), S.INVALID_ARGUMENT,
                     "beside raw_input_contents", "contents and raw")
        bad_type = infer_request(pb, {"x": x})
        bad_type.inputs[0].datatype = "STRING"
        expect_error(grpc, lambda: stub.ModelInfer(bad_type), S.INVALID_ARGUMENT,
                     "unsupported datatype", "unsupported datatype")
        negative = infer_request(pb, {"x": x}, raw=True)
        negative.inputs[0].shape[0] = -1
        expect_error(grpc, lambda: stub.ModelInfer(negative), S.INVALID_ARGUMENT,
                     "dimension -1", "negative dimension")
        # Not a ModelInferRequest at all: bytes sent through a generic call.
        garbage = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                      request_serializer=None, response_deserializer=None)
        try:
            garbage(b"\xff\xff\xff\xff\x0f not protobuf")
            raise TestFailure("malformed protobuf: no error")
        except grpc.RpcError as e:
            check(e.code() in (S.INTERNAL, S.INVALID_ARGUMENT),
                  "malformed protobuf: %s %s" % (e.code(), e.details()))
            print("  %-18s %-30s %s" % (e.code().name, "malformed protobuf", e.details()[:100]))
        big = infer_request(pb, {"x": x}, raw=True)
        big.raw_input_contents[0] = b"\0" * (MAX_BODY + 1)
        expect_error(grpc, lambda: stub.ModelInfer(big), S.RESOURCE_EXHAUSTED, "",
                     "message over the limit")
        response = stub.ModelInfer(infer_request(pb, {"x": x}))
        check(torch.equal(outputs_of_response(response)["output__0"],
                          reference(model_path, {"x": x})["output__0"]), "infer after the errors")
        print("  the server still serves after every error")
        after = metrics(server)

        def count(values, code):
            return values.get('memoplan_serve_grpc_responses_total{code="%s"}' % code, 0)
        check(count(after, "INVALID_ARGUMENT") - count(before, "INVALID_ARGUMENT") == 12,
              "INVALID_ARGUMENT counted %d, expected 12"
              % (count(after, "INVALID_ARGUMENT") - count(before, "INVALID_ARGUMENT")))
        check(count(after, "NOT_FOUND") - count(before, "NOT_FOUND") == 4, "NOT_FOUND counted")
        check(count(after, "OK") - count(before, "OK") == 1, "OK counted")
        print("  /metrics: gRPC calls counted by code")
        channel.close()
        code = server.terminate()
        check(code == 0, "exit code %d after SIGTERM" % code)
        print("  SIGTERM: exit 0")

    # The default kernels (tuned): over gRPC within 1e-5 of LibTorch, as over HTTP.
    with serving(Server(binary, model_path, "--workers", "1", "--grpc-port", "0",
                        kernels=None)) as server:
        server.wait_ready()
        channel = grpc.insecure_channel(server.grpc)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for batch in (1, 3):
            torch.manual_seed(20 + batch)
            x = torch.randn(batch, 3, 32, 32)
            expected = reference(model_path, {"x": x})["output__0"]
            got = outputs_of_response(stub.ModelInfer(infer_request(pb, {"x": x}, raw=True)))
            diff = ((got["output__0"] - expected).abs().max() / expected.abs().max()).item()
            check(diff <= 1e-5, "default kernels over gRPC: relative difference %g" % diff)
        check(get_json(server, "/v2/models/tiny_cnn")["parameters"]["kernels"] == "tuned",
              "default kernels: tuned")
        channel.close()
        print("  default kernels (tuned) over gRPC: within 1e-5 of LibTorch, batch 1 and 3")


if __name__ == "__main__":
    sys.exit(test_main(__doc__, run))
