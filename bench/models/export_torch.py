"""Export ResNet-50 and BERT-style encoders from torch (random weights) to .onnx files.

An optional generator for bench/ and manual checks: it needs torch (not a FuseForge dependency,
never imported by tests); optimizer.testing.real_models builds the same graphs with
onnx.helper. No torchvision and no download: the modules are written here. Writes into OUT_DIR:

  resnet50_torchscript.onnx   dynamo=False, opset 17: BatchNormalization stays unfolded
  bert_dynamo.onnx            dynamo=True, opset 18, LayerNorm written in Python (BERT's port):
                              ReduceMean/Sub/Pow/.../Div/Mul/Add and erf GELU in the graph
  bert_torchscript.onnx       the same module, dynamo=False, opset 17
  bert_dynamo_opset20.onnx    the default exporter (dynamo, its default opset) with
                              nn.LayerNorm and F.gelu: LayerNormalization and Gelu ops

    .venv/bin/python -m bench.models.export_torch OUT_DIR [--layers 2] [--hidden 256]
        [--heads 4] [--seq 128] [--batch 1]

The file names match the `form` names of optimizer.testing.real_models.bert_encoder;
`bench.fusion --torch-dir OUT_DIR` benchmarks whichever of these files it finds.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

RESNET_FILE = "resnet50_torchscript.onnx"
BERT_FILES = {"dynamo": "bert_dynamo.onnx", "torchscript": "bert_torchscript.onnx",
              "dynamo_opset20": "bert_dynamo_opset20.onnx"}
# None: the exporter's default opset (20 for torch 2.13's dynamo exporter).
BERT_OPSETS: dict[str, int | None] = {"dynamo": 18, "torchscript": 17, "dynamo_opset20": None}


class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck: the stride sits on the 3x3 conv."""

    def __init__(self, in_ch: int, planes: int, stride: int) -> None:
        super().__init__()
        out_ch = planes * 4
        self.conv1 = nn.Conv2d(in_ch, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU()
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        shortcut = x if self.downsample is None else self.downsample(x)
        out: torch.Tensor = self.relu(y + shortcut)
        return out


class ResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks: list[nn.Module] = []
        in_ch = 64
        for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True)):
            for index in range(count):
                blocks.append(Bottleneck(in_ch, planes, 2 if stage and not index else 1))
                in_ch = planes * 4
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        logits: torch.Tensor = self.fc(torch.flatten(x, 1))
        return logits


class WrittenLayerNorm(nn.Module):
    """LayerNorm in Python, as the original BERT port wrote it; exporters keep the ops."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return self.weight * ((x - mean) / torch.sqrt(var + self.eps)) + self.bias


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, norm: type[nn.Module], eps: float) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = norm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.output = nn.Linear(4 * hidden, hidden)
        self.output_norm = norm(hidden, eps=eps)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        context = torch.matmul(torch.softmax(scores, -1), v)
        context = context.permute(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = self.attention_norm(x + self.attention_output(context))
        out: torch.Tensor = self.output_norm(x + self.output(functional.gelu(self.intermediate(x))))
        return out


class Encoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, seq: int, *,
                 written_norm: bool, eps: float = 1e-5, vocab: int = 1000) -> None:
        super().__init__()
        norm: type[nn.Module] = WrittenLayerNorm if written_norm else nn.LayerNorm
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Parameter(torch.randn(1, seq, hidden) * 0.5)
        self.embedding_norm = norm(hidden, eps=eps)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, norm, eps) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = self.embedding_norm(self.word_embeddings(input_ids)
                                              + self.position_embeddings)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x


def randomize(module: nn.Module, seed: int) -> nn.Module:
    """Random biases, norm gammas/betas and BatchNorm statistics, so no fusion hides behind 0/1."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm2d):
                assert sub.running_mean is not None and sub.running_var is not None
                sub.weight.uniform_(0.5, 1.5, generator=generator)
                sub.bias.normal_(0.0, 0.1, generator=generator)
                sub.running_mean.normal_(0.0, 0.2, generator=generator)
                sub.running_var.uniform_(0.5, 2.0, generator=generator)
            elif isinstance(sub, (nn.LayerNorm, WrittenLayerNorm)):
                sub.weight.uniform_(0.5, 1.5, generator=generator)
                sub.bias.normal_(0.0, 0.1, generator=generator)
            elif isinstance(sub, nn.Linear) and sub.bias is not None:
                sub.bias.normal_(0.0, 0.1, generator=generator)
        for sub in module.modules():
            # As torchvision's zero_init_residual, but small rather than zero: keeps 16 residual
            # additions finite without making the blocks identities.
            if isinstance(sub, Bottleneck):
                sub.bn3.weight.uniform_(0.1, 0.4, generator=generator)
    return module.eval()


def export_resnet50(path: Path, batch: int, seed: int) -> None:
    torch.manual_seed(seed)
    model = randomize(ResNet50(), seed)
    # do_constant_folding=False: in eval mode the TorchScript exporter's constant folding
    # would fold BatchNormalization into the convolutions, and the fold is what we measure.
    torch.onnx.export(model, (torch.randn(batch, 3, 224, 224),), str(path), dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                      do_constant_folding=False)


def export_bert(path: Path, form: str, *, layers: int, hidden: int, heads: int, seq: int,
                batch: int, seed: int) -> None:
    torch.manual_seed(seed)
    model = randomize(Encoder(layers, hidden, heads, seq, written_norm=form != "dynamo_opset20"),
                      seed)
    input_ids = torch.randint(0, 1000, (batch, seq))
    mask = torch.zeros(batch, 1, 1, seq)
    torch.onnx.export(model, (input_ids, mask), str(path), dynamo=form != "torchscript",
                      opset_version=BERT_OPSETS[form], input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    export_resnet50(args.out_dir / RESNET_FILE, batch=1, seed=args.seed)
    print(f"wrote {args.out_dir / RESNET_FILE}")
    for form, name in BERT_FILES.items():
        export_bert(args.out_dir / name, form, layers=args.layers, hidden=args.hidden,
                    heads=args.heads, seq=args.seq, batch=args.batch, seed=args.seed)
        print(f"wrote {args.out_dir / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
