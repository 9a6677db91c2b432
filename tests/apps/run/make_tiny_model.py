"""Writes tiny.pt for the `memoplan run` tests: an int64 (token id) input and tuple, dict and list
outputs, scripted, with no input-shape extra files (so `memoplan run` needs --input for it).

    /usr/bin/python3 tests/apps/run/make_tiny_model.py OUT.pt
"""
import sys
from typing import Dict, List, Tuple

import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, ids) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], List[torch.Tensor]]:
        h = torch.tanh(self.proj(self.embed(ids)))
        return h * 2, {"mean": h.mean(1), "relu": torch.relu(h)}, [h.sum(), h.amax()]


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.jit.script(Tiny().eval()).save(sys.argv[1])
