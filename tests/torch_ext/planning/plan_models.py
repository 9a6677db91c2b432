"""memoplan's TorchScript planning from Python, on torchvision models and a transformer encoder.

For every model x batch x input size: script it, compute reference outputs unplanned, plan it with
torch.ops.memoplan.plan, run passes and compare every output bit for bit; then check the process
statistics: planned passes, and no tensor request of a steady-state pass fell back.
Usage: /usr/bin/python3 plan_models.py LIBMEMOPLAN_TORCH [--models a,b] [--batches 1,8]
       [--sizes 128,224] [--passes N] [--memory offset|min]
With --memory min (tensors share bytes, docs/TORCH_EXT.md) it also prints the offset lower bound
and the tensors that share bytes per pass.
Prints one line per case and exits 1 on any difference or fallback.
"""
import argparse
import re
import sys

try:
    import torch
    import torchvision
except ImportError as error:  # CTest's SKIP_RETURN_CODE
    print(f"SKIP: {error}")
    sys.exit(77)

ALL_MODELS = [
    "alexnet", "vgg11", "resnet18", "resnet50", "squeezenet1_0", "densenet121", "googlenet",
    "shufflenet_v2_x1_0", "mobilenet_v2", "mobilenet_v3_small", "mnasnet0_5", "efficientnet_b0",
    "regnet_x_400mf", "convnext_tiny", "transformer_encoder",
]
# One more of each remaining family: vision transformers, inception, grouped and wide convolutions,
# segmentation heads (dict outputs). ViTs accept only their training resolution (224).
MORE_MODELS = [
    "vit_b_16", "swin_t", "inception_v3", "resnext50_32x4d", "wide_resnet50_2", "regnet_y_400mf",
    "fcn_resnet50", "lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large",
]
SEGMENTATION = {"fcn_resnet50", "lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large"}


def build(name):
    if name == "transformer_encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                                 batch_first=True)
        return torch.nn.TransformerEncoder(layer, num_layers=4)
    kwargs = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    if name in SEGMENTATION:
        kwargs["weights_backbone"] = None
        return getattr(torchvision.models.segmentation, name)(**kwargs)
    return getattr(torchvision.models, name)(**kwargs)


def example(name, batch, size):
    if name == "transformer_encoder":
        return torch.randn(batch, size // 2, 256)  # sequence length = size / 2
    return torch.randn(batch, 3, size, size)


def same(a, b):
    """Bit-for-bit equality of outputs: tensors, or tuples/lists (named ones too) of them."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def stats():
    text = torch.ops.memoplan.stats()
    return {k: int(v) for k, v in re.findall(r"(planned hits|not_planned|overlap|planned) (\d+)", text)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("--models", default="resnet18,mobilenet_v3_small,transformer_encoder")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--sizes", default="224")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--memory", default="offset", choices=["offset", "min"])
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    torch.set_num_threads(1)
    named = {"all": ALL_MODELS, "more": MORE_MODELS, "every": ALL_MODELS + MORE_MODELS}
    models = named.get(args.models) or args.models.split(",")
    failures = 0
    for name in models:
        for batch in map(int, args.batches.split(",")):
            for size in map(int, args.sizes.split(",")):
                torch.manual_seed(0)
                model = torch.jit.script(build(name).eval())
                x = example(name, batch, size)
                with torch.inference_mode():
                    try:
                        for _ in range(4):  # the profiling executor's passes, then steady state
                            expected = model(x)
                    except Exception as error:  # the model itself refuses this input
                        print(f"skip {name} batch {batch} size {size}: the unplanned model "
                              f"fails: {str(error).splitlines()[0][:100]}", flush=True)
                        continue
                    summary = torch.ops.memoplan.plan(model._c, [x], memory=args.memory)
                    before = stats()
                    identical = all(same(model(x), expected) for _ in range(args.passes))
                    after = stats()
                fallbacks = (after["not_planned"] - before["not_planned"]) + (
                    after["overlap"] - before["overlap"])
                hits = after["planned hits"] - before["planned hits"]
                ok = identical and fallbacks == 0 and hits == args.passes * summary["planned_tensors"]
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name} batch {batch} size {size}: "
                      f"outputs {'identical' if identical else 'DIFFER'}, {hits} planned hits in "
                      f"{args.passes} passes ({summary['planned_tensors']} per pass), "
                      f"{fallbacks} fallbacks, slab {summary['slab_bytes']} B, lower bound "
                      f"{summary['lower_bound_bytes']} B" + (
                          f", offset lower bound {summary['offset_lower_bound_bytes']} B, "
                          f"{summary['shared_tensors']} tensors share bytes"
                          if args.memory == "min" else ""), flush=True)
    print(torch.ops.memoplan.stats())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
