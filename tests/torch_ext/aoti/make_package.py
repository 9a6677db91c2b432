"""Writes a small AOTInductor package (torch.export, then aoti_compile_and_package) for the
PlannedCall test on PyTorch >= 2.6: convolutions, relu, pooling and a linear layer on 1x3x32x32.

    /usr/bin/python3 tests/torch_ext/aoti/make_package.py OUT.pt2
"""
import sys

import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


def main():
    torch.manual_seed(0)
    model, example = Tiny().eval(), torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        exported = torch.export.export(model, (example,))
        torch._inductor.aoti_compile_and_package(exported, package_path=sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
