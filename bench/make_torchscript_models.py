"""Writes TorchScript files for bench/torch_alloc_bench (LibTorch loads them with torch::jit::load).

Random weights (weights=None, fixed seed): nothing is downloaded, and the allocation pattern does
not depend on the weights. Run it with Debian's Python, the one that has torch and torchvision:

    /usr/bin/python3 bench/make_torchscript_models.py OUT_DIR [MODEL...]

Models: any torchvision classification model name (traced with a 1x3x224x224 input), and
`transformer_encoder` (torch.nn.TransformerEncoder: d_model 256, 8 heads, feed-forward 1024,
4 layers, input 1x128x256). Each file carries its input shape (extra file `input_shape`, e.g.
`1x3x224x224`). Existing files are kept (delete them to rebuild). Prints one line per model:
NAME PATH INPUT_SHAPE.
"""
import os
import sys

import torch
import torchvision

DEFAULT_MODELS = ["resnet18", "mobilenet_v3_small", "transformer_encoder"]
IMAGE_SHAPE = (1, 3, 224, 224)
SEQUENCE_SHAPE = (1, 128, 256)  # batch, sequence length, d_model


def build(name):
    """Returns (module in eval mode, example input)."""
    if name == "transformer_encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                                 dropout=0.0, batch_first=True)
        # enable_nested_tensor=False: the bench feeds no padding mask, and the nested-tensor fast
        # path is not what a plain TorchScript user runs.
        model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        return model.eval(), torch.randn(*SEQUENCE_SHAPE)
    return getattr(torchvision.models, name)(weights=None).eval(), torch.randn(*IMAGE_SHAPE)


def shape_text(tensor):
    return "x".join(str(d) for d in tensor.shape)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir, names = sys.argv[1], sys.argv[2:] or DEFAULT_MODELS
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        path = os.path.join(out_dir, name + ".pt")
        torch.manual_seed(0)  # per model: the same file whatever else is made with it
        model, example = build(name)
        if not os.path.exists(path):
            # Tracing: the graph LibTorch runs is the same for every input of this shape, and
            # torchvision's models trace without warnings that change the graph.
            with torch.no_grad():
                traced = torch.jit.trace(model, example, check_trace=False)
            tmp = path + ".tmp"
            # The bench reads the input shape from the file itself (extra file "input_shape").
            traced.save(tmp, _extra_files={"input_shape": shape_text(example)})
            os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file
        print(name, path, shape_text(example))


if __name__ == "__main__":
    main()
