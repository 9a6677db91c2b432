"""Runs a torchvision model forward several times and prints a digest of every output.

Used by the shim's integration test: the digests must be identical with and without
LD_PRELOAD=libmemoplan_preload.so. Random weights, fixed seed; nothing is downloaded.
Usage: /usr/bin/python3 torch_forward.py MODEL PASSES [SIZE]
"""
import hashlib
import sys

import torch
import torchvision


def main() -> None:
    model_name, passes = sys.argv[1], int(sys.argv[2])
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 224
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = getattr(torchvision.models, model_name)(weights=None).eval()
    x = torch.randn(1, 3, size, size)
    with torch.inference_mode():
        for i in range(passes):
            out = model(x)
            digest = hashlib.sha256(out.numpy().tobytes()).hexdigest()[:16]
            print(f"pass {i} {digest}")


if __name__ == "__main__":
    main()
