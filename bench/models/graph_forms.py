"""Models as users export them: the graph forms memoplan must take (issue 49).

Forms:
  traced         torch.jit.trace(model, example), nothing else (the usual export)
  scripted       torch.jit.script(model)
  frozen         torch.jit.freeze(torch.jit.script(model)): weights become graph constants,
                 batch norms folded into the convolutions
  frozen_traced  torch.jit.freeze(torch.jit.trace(model, example))
Every form goes through torch.jit.save and torch.jit.load, as a served model does.

Models: every torchvision classification and segmentation builder of the installed version, a
transformer encoder (torch.nn.TransformerEncoder) and a GPT-style decoder written with plain
modules (nn.Linear projections, a causal mask, softmax and matmul: no fused attention).
Weights are random (weights=None: nothing is downloaded).
"""
import io
import math
import warnings

import torch
import torchvision
from torch import nn

from zoo_models import redraw_layer_matrices

FORMS = ("traced", "scripted", "frozen", "frozen_traced")


class PlainEncoder(nn.Module):
    """torch.nn.TransformerEncoder, batch first: 4 layers, d_model 256, 4 heads, GELU."""

    def __init__(self, d_model=256, heads=4, layers=4):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model,
                                           dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # Shared, ONNX Runtime held a quarter of them (3.2 MB export against the .pt's 12.7).
        redraw_layer_matrices(self.encoder)

    def forward(self, x):
        return self.encoder(x)


class CausalBlock(nn.Module):
    """A GPT-2 block written out: pre-norm, q/k/v/out nn.Linear, causal softmax attention, MLP."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        attention = torch.softmax(scores + mask, dim=-1)
        y = torch.matmul(attention, v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.out(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))


class PlainDecoder(nn.Module):
    """GPT-style decoder: token + position embeddings, 4 causal blocks, final norm, tied head."""

    def __init__(self, vocab=8000, d_model=256, heads=4, layers=4, max_len=512):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([CausalBlock(d_model, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, ids):
        length = ids.size(1)
        positions = torch.arange(length, device=ids.device).unsqueeze(0)
        x = self.tokens(ids) + self.positions(positions)
        mask = torch.triu(torch.full((length, length), float("-inf"), device=ids.device), 1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


SEGMENTATION_INPUT = 256  # smaller than torchvision's 520: the sweep runs on two cores


def classification_names():
    return sorted(torchvision.models.list_models(module=torchvision.models)) if hasattr(
        torchvision.models, "list_models") else sorted(
            name for name, fn in vars(torchvision.models).items()
            if callable(fn) and name.islower() and not name.startswith("_")
            and name not in ("get_model", "get_weight", "get_model_weights", "list_models"))


def segmentation_names():
    module = torchvision.models.segmentation
    return sorted(name for name, fn in vars(module).items()
                  if callable(fn) and name.islower() and not name.startswith("_")
                  and ("resnet" in name or "mobilenet" in name))


def all_names():
    return classification_names() + segmentation_names() + ["transformer_encoder", "gpt_decoder"]


def build(name, batch=1, size=224):
    """(model in eval mode, example input)."""
    if name == "transformer_encoder":
        return PlainEncoder().eval(), torch.randn(batch, size // 2, 256)
    if name == "gpt_decoder":
        return PlainDecoder().eval(), torch.randint(0, 8000, (batch, size // 2))
    if name in segmentation_names():
        model = getattr(torchvision.models.segmentation, name)(weights=None,
                                                               weights_backbone=None)
        return model.eval(), torch.randn(batch, 3, SEGMENTATION_INPUT, SEGMENTATION_INPUT)
    kwargs = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, name)(**kwargs)
    if name == "inception_v3":
        size = max(size, 299)
    if name.startswith(("vit_", "swin_", "maxvit")):
        size = 224  # their position embeddings fix the input size
    return model.eval(), torch.randn(batch, 3, size, size)


def input_high(name):
    """The exclusive bound of an integer input, else None."""
    return 8000 if name == "gpt_decoder" else None


def save(module, path, example, high=None):
    """Writes `module` with the input `memoplan run` should feed it (the model zoo's extra files)."""
    extra = {"input_shape": "x".join(str(d) for d in example.shape),
             "input_dtype": str(example.dtype).replace("torch.", "")}
    if high is not None:
        extra["input_high"] = str(high)
    torch.jit.save(module, path, _extra_files=extra)


def make(model, example, form):
    """The TorchScript module of `form` as made, not yet saved; raises when the form cannot be
    made (a model torch.jit.script rejects)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if form in ("traced", "frozen_traced"):
            with torch.no_grad():
                module = torch.jit.trace(model, example, check_trace=False, strict=False)
        else:
            module = torch.jit.script(model)
        if form.startswith("frozen"):
            module = torch.jit.freeze(module.eval())
    return module


def export(model, example, form):
    """The TorchScript module of `form`, saved and loaded back."""
    buffer = io.BytesIO()
    torch.jit.save(make(model, example, form), buffer)
    buffer.seek(0)
    return torch.jit.load(buffer).eval()


def write(model, example, form, path, high=None):
    """The module of `form` saved to `path` (save()'s extra files) for a process that loads it:
    no round trip in memory, whose buffer and loaded copy took regnet_y_128gf (2.6 GB of weights)
    past 14 GB."""
    save(make(model, example, form), path, example, high)
