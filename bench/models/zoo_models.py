"""The model zoo's models: what each is, its example input, and the non-torchvision ones.

Every builder returns (module in eval mode, example input). Weights are random (torchvision's
weights=None and weights_backbone=None: nothing is downloaded); the caller seeds torch first, so a
model's file is the same however many others are made with it. Batch 1 throughout: the shapes a
latency-bound server runs.
"""
import math

import torch
import torchvision
from torch import nn

IMAGE = (1, 3, 224, 224)
INCEPTION_IMAGE = (1, 3, 299, 299)  # inception_v3's stem needs at least 75x75; 299 is its size
SEGMENTATION_IMAGE = (1, 3, 520, 520)  # torchvision's reference size for fcn/deeplabv3
DCGAN_NOISE = (1, 100, 1, 1)
SEQUENCE = 128
BERT_VOCAB = 30522
GPT_VOCAB = 50257


class DcganGenerator(nn.Module):
    """Radford et al. 2016 (the PyTorch DCGAN example): 100-d noise to a 3x64x64 image."""

    def __init__(self, nz=100, ngf=64, channels=3):
        super().__init__()

        def up(cin, cout, stride, padding):
            return [nn.ConvTranspose2d(cin, cout, 4, stride, padding, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(True)]

        self.main = nn.Sequential(
            *up(nz, ngf * 8, 1, 0), *up(ngf * 8, ngf * 4, 2, 1), *up(ngf * 4, ngf * 2, 2, 1),
            *up(ngf * 2, ngf, 2, 1), nn.ConvTranspose2d(ngf, channels, 4, 2, 1, bias=False),
            nn.Tanh())

    def forward(self, noise):
        return self.main(noise)


def redraw_layer_matrices(encoder):
    """nn.TransformerEncoder deep-copies its layer: every layer would hold the same weights, which
    an ONNX export stores once, so ONNX Runtime would hold a fraction of what LibTorch holds. A
    trained model's layers differ: each matrix drawn anew, as MultiheadAttention and Linear draw
    theirs."""
    for copy in encoder.layers:
        for p in copy.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)


class BertEncoder(nn.Module):
    """BERT-base-like: token + position embeddings, LayerNorm, then torch.nn.TransformerEncoder
    (d_model 768, 12 heads, 12 layers, feed-forward 3072, GELU, post-norm as in BERT)."""

    def __init__(self, vocab=BERT_VOCAB, d_model=768, heads=12, layers=12, max_len=512):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.norm = nn.LayerNorm(d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model,
                                           dropout=0.0, activation="gelu", batch_first=True)
        # No padding mask is fed: the nested-tensor path would only change the graph's ops.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        redraw_layer_matrices(self.encoder)  # ONNX Runtime held a twelfth of them before

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device).unsqueeze(0)
        x = self.norm(self.tokens(ids) + self.positions(positions))
        return self.encoder(x)


class GptDecoder(nn.Module):
    """GPT-2-small-like decoder-only stack: token + position embeddings, 12 pre-norm blocks with
    causal self-attention (d_model 768, 12 heads, feed-forward 3072, GELU), final LayerNorm and
    the language-model head tied to the token embedding. Output: logits for every position."""

    def __init__(self, vocab=GPT_VOCAB, d_model=768, heads=12, layers=12, max_len=1024):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(layers)
        ])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tokens.weight
        nn.init.normal_(self.tokens.weight, std=1.0 / math.sqrt(d_model))

    def forward(self, ids):
        length = ids.size(1)
        positions = torch.arange(length, device=ids.device).unsqueeze(0)
        x = self.tokens(ids) + self.positions(positions)
        # The causal mask: position i attends to positions <= i only. Made per pass, as a
        # decoder with a variable prompt length does.
        causal = torch.triu(torch.full((length, length), float("-inf"), device=ids.device), 1)
        for block in self.blocks:
            x = block(x, src_mask=causal)
        return self.head(self.norm(x))


def _torchvision(name, shape, **kwargs):
    def build():
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
        return model.eval(), torch.randn(*shape)

    return build


def _segmentation(name):
    def build():
        # weights_backbone=None: the default would download ImageNet weights for the backbone.
        model = getattr(torchvision.models.segmentation, name)(weights=None,
                                                               weights_backbone=None)
        return model.eval(), torch.randn(*SEGMENTATION_IMAGE)

    return build


def _tokens(module_class, vocab):
    def build():
        return module_class().eval(), torch.randint(0, vocab, (1, SEQUENCE))

    return build


def _dcgan():
    return DcganGenerator().eval(), torch.randn(*DCGAN_NOISE)


# name -> (builder, exclusive upper bound of integer inputs or None). Order: the zoo's order.
MODELS = {
    "resnet18": (_torchvision("resnet18", IMAGE), None),
    "resnet50": (_torchvision("resnet50", IMAGE), None),
    "wide_resnet50_2": (_torchvision("wide_resnet50_2", IMAGE), None),
    "resnext101_32x8d": (_torchvision("resnext101_32x8d", IMAGE), None),
    # init_weights=True: the same initialisation torchvision uses when it builds them for training
    # (weights=None alone warns that the default will change).
    "googlenet": (_torchvision("googlenet", IMAGE, init_weights=True), None),
    "inception_v3": (_torchvision("inception_v3", INCEPTION_IMAGE, init_weights=True), None),
    "squeezenet1_0": (_torchvision("squeezenet1_0", IMAGE), None),
    "mnasnet0_75": (_torchvision("mnasnet0_75", IMAGE), None),
    "mobilenet_v2": (_torchvision("mobilenet_v2", IMAGE), None),
    "mobilenet_v3_large": (_torchvision("mobilenet_v3_large", IMAGE), None),
    "efficientnet_b0": (_torchvision("efficientnet_b0", IMAGE), None),
    "regnet_x_8gf": (_torchvision("regnet_x_8gf", IMAGE), None),
    "vgg16": (_torchvision("vgg16", IMAGE), None),
    "densenet121": (_torchvision("densenet121", IMAGE), None),
    "fcn_resnet50": (_segmentation("fcn_resnet50"), None),
    "deeplabv3_resnet50": (_segmentation("deeplabv3_resnet50"), None),
    "dcgan_generator": (_dcgan, None),
    "bert_encoder": (_tokens(BertEncoder, BERT_VOCAB), BERT_VOCAB),
    "gpt_decoder": (_tokens(GptDecoder, GPT_VOCAB), GPT_VOCAB),
}
