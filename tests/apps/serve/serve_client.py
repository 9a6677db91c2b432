"""Helpers of the memoplan-serve tests: start the server on a free loopback port, call it with
Python's urllib and with curl, the KServe v2 tensor encodings (JSON and the binary extension),
/metrics parsing, and the reference: a direct LibTorch forward (Debian's python3-torch runs the
same libtorch the server links) of the same file on the same input.
"""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

try:
    import torch
except ImportError:  # the reference forward and the test models need Debian's python3-torch
    print("SKIP: python3-torch is not installed")
    sys.exit(77)

DATATYPES = {torch.float32: "FP32", torch.float64: "FP64", torch.int64: "INT64",
             torch.int32: "INT32", torch.int16: "INT16", torch.int8: "INT8", torch.uint8: "UINT8",
             torch.bool: "BOOL", torch.float16: "FP16", torch.bfloat16: "BF16"}
DTYPES = {name: dtype for dtype, name in DATATYPES.items()}


class TestFailure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise TestFailure(message)


def skip(reason):
    """Exit code 77: CTest's SKIP_RETURN_CODE for these tests."""
    print("SKIP: " + reason)
    sys.exit(77)


def make_models(out_dir):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_test_models.py")
    subprocess.run([sys.executable, script, out_dir], check=True)


class Server:
    """memoplan-serve on 127.0.0.1, any free port (--port 0: it prints the one it took)."""

    def __init__(self, binary, model, *args, kernels="stock"):
        self.log = tempfile.NamedTemporaryFile(prefix="memoplan-serve-", suffix=".log",
                                               delete=False)
        # The tests of the serving itself compare with LibTorch bit for bit: --kernels stock
        # unless the arguments say otherwise; kernels=None leaves the server's default.
        if kernels and "--kernels" not in args:
            args = ("--kernels", kernels) + tuple(args)
        # model None: the arguments name the models (--model-repository DIR).
        self.proc = subprocess.Popen([binary, *([model] if model else []), "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()  # the server prints it before it plans
        if "listening on http://" not in line:
            self.proc.kill()
            raise TestFailure("server did not start: %r\n%s" % (line, self.log_text()))
        self.base = line.strip().split("listening on ")[1]
        self.grpc = None  # host:port with --grpc-port
        if "--grpc-port" in args:
            line = self.proc.stdout.readline()
            if "listening for gRPC on " not in line:
                self.proc.kill()
                raise TestFailure("no gRPC port: %r\n%s" % (line, self.log_text()))
            self.grpc = line.strip().split("listening for gRPC on ")[1]
        self.pid = self.proc.pid

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if get(self, "/v2/health/ready")[0] == 200:
                    return
            except OSError:  # refused: the server is exiting (its log says why below)
                pass
            check(self.proc.poll() is None, "server exited while starting:\n" + self.log_text())
            time.sleep(0.05)
        raise TestFailure("not ready after %d s:\n%s" % (timeout, self.log_text()))

    def rss_kib(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise TestFailure("no VmRSS")

    def terminate(self, timeout=20):
        """SIGTERM; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout=20):
        """The exit code, once the process ended (a second SIGTERM would end it at once)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise TestFailure("server still running %d s after SIGTERM:\n%s"
                              % (timeout, self.log_text()))

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log.name)


def request(server, method, path, body=None, headers=None, timeout=60):
    """urllib; returns (status, headers, body bytes) for errors too."""
    req = urllib.request.Request(server.base + path, data=body, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get(server, path):
    return request(server, "GET", path)


def get_json(server, path):
    status, _, body = get(server, path)
    check(status == 200, "GET %s: %d %s" % (path, status, body[:300]))
    return json.loads(body)


def curl(server, path, body_file=None, extra=()):
    """curl; returns (status, body bytes)."""
    with tempfile.NamedTemporaryFile() as out:
        cmd = ["curl", "-s", "-o", out.name, "-w", "%{http_code}"]
        if body_file:
            cmd += ["-H", "Content-Type: application/json", "--data-binary", "@" + body_file]
        cmd += list(extra) + [server.base + path]
        status = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return int(status), out.read()


def tensor_json(name, tensor, nested=False):
    data = tensor.tolist() if nested else tensor.flatten().tolist()
    return {"name": name, "shape": list(tensor.shape), "datatype": DATATYPES[tensor.dtype],
            "data": data}


def infer_body(inputs, **extra):
    """inputs: {name: tensor}; the JSON request body."""
    return json.dumps({"inputs": [tensor_json(n, t) for n, t in inputs.items()], **extra}).encode()


def binary_body(inputs, binary_output=True):
    """The binary tensor data extension: (body, Inference-Header-Content-Length)."""
    header = {"inputs": [{"name": n, "shape": list(t.shape), "datatype": DATATYPES[t.dtype],
                          "parameters": {"binary_data_size": t.numel() * t.element_size()}}
                         for n, t in inputs.items()],
              "parameters": {"binary_data_output": binary_output}}
    text = json.dumps(header).encode()
    raw = b"".join(t.contiguous().numpy().tobytes() for t in inputs.values())
    return text + raw, len(text)


def outputs_of(body, header_length=None):
    """{name: tensor} of an infer response (JSON, or JSON header + binary outputs)."""
    text = body if header_length is None else body[:header_length]
    raw = b"" if header_length is None else body[header_length:]
    outputs = {}
    for out in json.loads(text)["outputs"]:
        dtype = DTYPES[out["datatype"]]
        if "data" in out:
            t = torch.tensor(out["data"], dtype=dtype).reshape(out["shape"])
        else:
            size = out["parameters"]["binary_data_size"]
            t = torch.frombuffer(bytearray(raw[:size]), dtype=dtype).reshape(out["shape"])
            raw = raw[size:]
        outputs[out["name"]] = t
    return outputs


def reference(model_path, inputs):
    """The same file's forward in LibTorch directly: {output__i: tensor}."""
    torch.set_num_threads(1)
    module = torch.jit.load(model_path)
    with torch.inference_mode():
        result = module(*inputs.values())
    result = result if isinstance(result, tuple) else (result,)
    return {"output__%d" % i: t.clone() for i, t in enumerate(result)}


def same_bits(a, b):
    return (a.dtype == b.dtype and list(a.shape) == list(b.shape)
            and a.contiguous().numpy().tobytes() == b.contiguous().numpy().tobytes())


def check_outputs(got, expected, what):
    check(set(got) == set(expected), "%s: outputs %s, expected %s" % (what, sorted(got),
                                                                      sorted(expected)))
    for name in expected:
        check(same_bits(got[name], expected[name]),
              "%s: %s differs from the direct LibTorch forward (max |diff| %s)"
              % (what, name, (got[name].double() - expected[name].double()).abs().max().item()))


def metrics(server):
    """GET /metrics as {'name{labels}': value}."""
    status, _, body = get(server, "/metrics")
    check(status == 200, "/metrics: %d" % status)
    values = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
    return values


def test_main(doc, run):
    """A server test's main(): argv[1] is memoplan-serve; run(binary, tmp) in a fresh temporary
    directory, removed afterwards. A TestFailure prints FAIL and gives exit code 1."""
    if len(sys.argv) != 2:
        sys.exit(doc)
    binary = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="memoplan-serve-test-")
    started = time.monotonic()
    try:
        run(binary, tmp)
    except TestFailure as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp)
    print("PASS (%.1f s)" % (time.monotonic() - started))
    return 0


@contextlib.contextmanager
def serving(server):
    """The started server; its log is printed when a check fails; killed if still running."""
    try:
        yield server
    except TestFailure:
        print(server.log_text())
        raise
    finally:
        server.close()


def concurrently(count, client):
    """client(k) for k in range(count), each on a thread of its own, all joined."""
    threads = [threading.Thread(target=client, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def has_grpc(binary):
    """Whether memoplan-serve was built with --grpc-port."""
    return "--grpc-port" in subprocess.run([binary, "--help"], capture_output=True,
                                           text=True).stdout


def grpc_client(binary, tmp):
    """(grpc, kserve_v2_pb2, kserve_v2_pb2_grpc) with stubs generated into tmp, or None when the
    server has no gRPC or python3-grpcio, protoc or grpc_python_plugin is missing."""
    if not has_grpc(binary):
        return None
    try:
        import grpc
        import grpc_test
        grpc_test.generate_stubs(tmp)
        import kserve_v2_pb2
        import kserve_v2_pb2_grpc
    except (ImportError, SystemExit):
        return None
    return grpc, kserve_v2_pb2, kserve_v2_pb2_grpc
