"""The shim's automatic pass detection on real PyTorch programs that do not mark their passes.

Prints a digest of every pass's output (the same with and without the shim). Random weights,
fixed seed; nothing is downloaded.
Usage: /usr/bin/python3 torch_detection.py CASE PASSES
CASE: transformer   a scripted torch.nn.TransformerEncoder (d 256, 4 heads, 4 layers: identical
                    layers), input 1x64x256
      transformer_work  the same, and between passes a request's parsing and a response's
                    formatting whose sizes change from pass to pass (as a server's would)
      transformer_threads  two inference threads running the same scripted module
      mobilenet_intra2  eager mobilenet_v3_large (hardswish, squeeze-excitation) at 128x128 with
                    two intra-op threads
      transformer_varlen  the scripted TransformerEncoder fed a random sequence length of 8-256
                    every pass (issue 18: planned by call site, slots grown to the largest)
"""
import hashlib
import json
import random
import sys
import threading

import torch
import torchvision


def digest(out):
    return hashlib.sha256(out.contiguous().numpy().tobytes()).hexdigest()[:16]


def transformer():
    layer = torch.nn.TransformerEncoderLayer(256, 4, dim_feedforward=512, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
    return torch.jit.script(model), torch.randn(1, 64, 256)


def other_work(rng, out):
    words = rng.randint(200, 2000)
    request = json.dumps({"inputs": [rng.randint(0, 30000) for _ in range(words)]})
    ids = json.loads(request)["inputs"]
    return len(json.dumps({"outputs": out.flatten()[:64].tolist(), "tokens": len(ids)}))


def main() -> None:
    case, passes = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(2 if case.endswith("intra2") else 1)
    if case.startswith("mobilenet"):
        model, x = torchvision.models.mobilenet_v3_large(weights=None).eval(), torch.randn(1, 3, 128, 128)
    else:
        model, x = transformer()
    threads = 2 if case.endswith("threads") else 1
    lines = [[] for _ in range(threads)]

    def run(index):
        rng = random.Random(index)
        with torch.inference_mode():
            for i in range(passes):
                if case.endswith("varlen"):
                    length = rng.randint(8, 256)
                    out = model(torch.randn(1, length, 256,
                                            generator=torch.Generator().manual_seed(i)))
                else:
                    out = model(x)
                if case.endswith("work"):
                    other_work(rng, out)
                lines[index].append(f"thread {index} pass {i} {digest(out)}")

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for thread_lines in lines:
        print("\n".join(thread_lines))


if __name__ == "__main__":
    main()
