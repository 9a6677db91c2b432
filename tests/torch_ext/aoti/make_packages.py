"""Writes the AOTInductor packages the tests of issue 55 run, on PyTorch >= 2.6, the way a user
makes them (torch.export.export, then torch._inductor.aoti_compile_and_package), each with its
input in the package's metadata (inductor_configs "aot_inductor.metadata": input_shape,
input_dtype, input_high), which memoplan run and memoplan-serve read:

    tiny_cnn.pt2   the serve tests' TinyCnn (convolutions, relu, pooling, linear), 1x3x32x32 FP32
    tiny_bert.pt2  the zoo's BertEncoder made small (2 layers, d_model 64, 4 heads, vocabulary
                   1000): embeddings, LayerNorm, nn.TransformerEncoder; 1x16 int64 token ids

Each package's output (run from Python) must be within 1e-5 of the eager model's (relative to the
output's largest magnitude), or this fails.

    /usr/bin/python3 tests/torch_ext/aoti/make_packages.py OUTDIR
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "tests", "apps", "serve"))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
from make_test_models import TinyCnn  # noqa: E402
from zoo_models import BertEncoder  # noqa: E402

VOCAB = 1000


def models():
    torch.manual_seed(0)
    yield "tiny_cnn", TinyCnn().eval(), torch.randn(1, 3, 32, 32), {"input_shape": "1x3x32x32",
                                                                     "input_dtype": "float32"}
    torch.manual_seed(0)
    yield ("tiny_bert", BertEncoder(vocab=VOCAB, d_model=64, heads=4, layers=2, max_len=64).eval(),
           torch.randint(0, VOCAB, (1, 16)),
           {"input_shape": "1x16", "input_dtype": "int64", "input_high": str(VOCAB)})


def models_by_name():
    return {name: model for name, model, _, _ in models()}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, model, example, metadata in models():
        path = os.path.join(sys.argv[1], name + ".pt2")
        with torch.no_grad():
            exported = torch.export.export(model, (example,))
            torch._inductor.aoti_compile_and_package(
                exported, package_path=path, inductor_configs={"aot_inductor.metadata": metadata})
            expected = model(example)
            got = torch._inductor.aoti_load_package(path)(example)
        got = got[0] if isinstance(got, (list, tuple)) else got
        scale = max(1.0, expected.abs().max().item())
        difference = (got - expected).abs().max().item() / scale
        print("%s: %s, output %s, max difference from eager %.3g" % (name, path,
                                                                    list(expected.shape),
                                                                    difference))
        if difference > 1e-5:
            print("FAIL: %s's package differs from the eager model by %.3g" % (name, difference))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
