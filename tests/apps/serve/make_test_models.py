"""Writes the TorchScript models the serve tests run (random weights, fixed seed):

    /usr/bin/python3 tests/apps/serve/make_test_models.py OUT_DIR

- tiny_cnn.pt: convolutions, pooling and a linear layer on 1x3x32x32 FP32 (traced), with the
  extra files input_shape/input_dtype that bench/models/make_zoo.py writes, so the server plans it
  before it reports ready.
- spin.pt: forward(x: 1x64 FP32, n: 1 INT64) -> (y, n + 1), y = tanh(y @ w) repeated n times
  (scripted): two inputs, an INT64 input, a tuple output, and a request whose duration the test
  chooses (the 503 test keeps the one worker busy with it).
"""
import os
import sys

import torch


class TinyCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.conv1(x))
        y = torch.max_pool2d(torch.relu(self.conv2(y)), 2)
        y = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)
        return self.fc(y)


class Spin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 64) / 8, requires_grad=False)

    def forward(self, x, n):
        y = x
        for _ in range(int(n.item())):
            y = torch.tanh(torch.matmul(y, self.w))
        return y, n + 1


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    with torch.no_grad():
        cnn = torch.jit.trace(TinyCnn().eval(), torch.randn(1, 3, 32, 32))
    cnn.save(os.path.join(out_dir, "tiny_cnn.pt"),
             _extra_files={"input_shape": "1x3x32x32", "input_dtype": "float32"})
    torch.jit.script(Spin().eval()).save(os.path.join(out_dir, "spin.pt"))


if __name__ == "__main__":
    main()
