"""Writes a small AOTInductor package (torch.export, then aoti_compile_and_package) for the
PlannedCall test on PyTorch >= 2.6: the serve tests' tiny_cnn on 1x3x32x32.

    /usr/bin/python3 tests/torch_ext/aoti/make_package.py OUT.pt2
"""
import os
import sys

import torch

# The serve tests' tiny_cnn (convolutions, relu, pooling, a linear layer on 1x3x32x32).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "apps",
                                "serve"))
from make_test_models import TinyCnn  # noqa: E402


def main():
    torch.manual_seed(0)
    model, example = TinyCnn().eval(), torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        exported = torch.export.export(model, (example,))
        torch._inductor.aoti_compile_and_package(exported, package_path=sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
