"""Export one corpus model with torch: run INSIDE the corpus venv (torch, transformers), never in
FuseForge's own; bench/corpus/cache.py calls it as a subprocess, one model per process.

transformers models are built from a small config with random weights (nothing is downloaded);
ResNet-50 is bench/models/export_torch.py's module. Prints one JSON line describing the export.

    <cache>/venv/bin/python -m bench.corpus.export_torch_model ARCH OUT.onnx --opset 17 [--dynamo]
        [--attention eager|sdpa]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

SEQ = 128
SEED = 0


class _FirstOutput(nn.Module):
    """Calls the wrapped model with its inputs by keyword (GPT-2's second positional parameter
    is past_key_values) and returns its first output only (last_hidden_state).

    Explicit positional parameters, not *args: the dynamo exporter maps dynamic shapes to them.
    """

    def __init__(self, inner: nn.Module, names: list[str], *, keywords: bool = True) -> None:
        super().__init__()
        self.inner = inner
        self.names = names
        self.keywords = keywords  # False: a plain module taking one tensor

    def forward(self, x0: torch.Tensor, x1: torch.Tensor | None = None,
                x2: torch.Tensor | None = None) -> torch.Tensor:
        if not self.keywords:
            plain: torch.Tensor = self.inner(x0)
            return plain
        given = dict(zip(self.names, (x0, x1, x2), strict=False))
        out = self.inner(**given, return_dict=False)
        return out[0] if isinstance(out, tuple) else out


def _randomize_norms(module: nn.Module) -> None:
    """Random LayerNorm gammas/betas and biases: a fusion must not hide behind 1s and 0s."""
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.LayerNorm):
                sub.weight.uniform_(0.5, 1.5, generator=generator)
                sub.bias.normal_(0.0, 0.1, generator=generator)
            elif isinstance(sub, nn.Linear) and sub.bias is not None:
                sub.bias.normal_(0.0, 0.1, generator=generator)


def _attention(opset: int, dynamo: bool) -> str:
    # The TorchScript exporter has no scaled_dot_product_attention below opset 14.
    return "sdpa" if dynamo or opset >= 14 else "eager"


Built = tuple[nn.Module, dict[str, torch.Tensor], dict[str, dict[int, str]], dict[str, Any]]


def build(arch: str, opset: int, dynamo: bool, attention: str | None = None) -> Built:
    """The module, example inputs by name, dynamic axes, and what to record about it."""
    torch.manual_seed(SEED)
    # torch.export specializes dims of size 1: a batch of 2 keeps the batch dim dynamic.
    batch = 2 if dynamo else 1
    if arch == "resnet50":
        from bench.models.export_torch import ResNet50, randomize
        model = randomize(ResNet50(), SEED)
        wrapped = _FirstOutput(model, ["input"], keywords=False).eval()
        return (wrapped, {"input": torch.randn(batch, 3, 224, 224)}, {"input": {0: "batch"}},
                {"config": "torchvision ResNet-50 v1.5 layout, random weights"})
    import transformers
    attention = attention or _attention(opset, dynamo)
    small = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
             "intermediate_size": 512}
    text_axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    ids = torch.randint(0, 1000, (batch, SEQ))
    mask = torch.ones(batch, SEQ, dtype=torch.int64)
    inner: nn.Module
    if arch == "bert":
        config = transformers.BertConfig(**small, attn_implementation=attention)
        inner = transformers.BertModel(config, add_pooling_layer=False)
        inputs = {"input_ids": ids, "attention_mask": mask,
                  "token_type_ids": torch.zeros(batch, SEQ, dtype=torch.int64)}
        axes = {**text_axes, "token_type_ids": {0: "batch", 1: "sequence"}}
    elif arch == "vit":
        config = transformers.ViTConfig(**small, image_size=128, patch_size=16,
                                        attn_implementation=attention)
        inner = transformers.ViTModel(config, add_pooling_layer=False)
        inputs, axes = {"pixel_values": torch.randn(batch, 3, 128, 128)}, {"pixel_values": {0: "batch"}}
    elif arch == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=256,
                                         use_cache=False, attn_implementation=attention)
        inner = transformers.GPT2Model(config)
        inputs, axes = {"input_ids": ids, "attention_mask": mask}, text_axes
    elif arch == "whisper-encoder":
        config = transformers.WhisperConfig(d_model=128, encoder_layers=2, decoder_layers=2,
                                            encoder_attention_heads=4, decoder_attention_heads=4,
                                            encoder_ffn_dim=512, decoder_ffn_dim=512,
                                            num_mel_bins=80, max_source_positions=64,
                                            attn_implementation=attention)
        inner = transformers.WhisperModel(config).encoder
        inputs = {"input_features": torch.randn(batch, 80, 128)}
        axes = {"input_features": {0: "batch"}}
    else:
        raise SystemExit(f"unknown arch {arch!r}")
    _randomize_norms(inner)
    record = {"config": f"{type(config).__name__}: 2 layers, hidden 128, 4 heads, "
                        f"attention {attention}",
              "transformers_version": transformers.__version__}
    return _FirstOutput(inner, list(inputs)).eval(), inputs, axes, record


def export(arch: str, path: Path, opset: int, dynamo: bool,
           attention: str | None = None) -> dict[str, Any]:
    model, inputs, axes, record = build(arch, opset, dynamo, attention)
    names = list(inputs)
    with torch.no_grad():
        if dynamo:
            # dynamic_shapes by parameter name; AUTO lets torch.export keep a dim static where
            # the model needs it (Whisper's frame count) instead of failing.
            shapes = {f"x{i}": {axis: torch.export.Dim.AUTO for axis in axes.get(name, {})}
                      for i, name in enumerate(names)}
            torch.onnx.export(model, tuple(inputs.values()), str(path), dynamo=True,
                              opset_version=opset, input_names=names, output_names=["output"],
                              dynamic_shapes=shapes, external_data=False)
        else:
            torch.onnx.export(model, tuple(inputs.values()), str(path), dynamo=False,
                              opset_version=opset, input_names=names, output_names=["output"],
                              dynamic_axes={**axes, "output": {0: "batch"}})
    exporter = "torch dynamo" if dynamo else "torch TorchScript"
    return {**record, "exporter": exporter, "exporter_version": torch.__version__,
            "source": "generated (random weights)", "licence": "n/a (generated)"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arch")
    parser.add_argument("out", type=Path)
    parser.add_argument("--opset", type=int, required=True)
    parser.add_argument("--dynamo", action="store_true")
    parser.add_argument("--attention", choices=["eager", "sdpa"], default=None,
                        help="transformers' attn_implementation (default: sdpa where exportable)")
    args = parser.parse_args(argv)
    record = export(args.arch, args.out, args.opset, args.dynamo, args.attention)
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
