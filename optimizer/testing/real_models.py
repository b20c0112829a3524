"""Full-size models as exporters write them, built in code with random weights (no torch, no download).

`resnet50` is torchvision's ResNet-50 (v1.5: stride on the 3x3 conv) as torch's TorchScript
exporter writes it with BatchNormalization left unfolded (53 Conv, 53 BatchNormalization).
`bert_encoder` is a BERT-style encoder whose LayerNorm and GELU are written out as elementwise
ops, in the node sequences torch 2.13's exporters produce (learned by exporting a tiny encoder;
see `bert_encoder` for what differs between the forms).

Every bias, BatchNormalization statistic and LayerNorm gamma/beta is random, so a fusion that
drops or misplaces one changes the outputs. Scales keep activations finite and input-dependent:
He-initialised convolutions, and the last BatchNormalization of each bottleneck starts small
(as torchvision's `zero_init_residual`, but not zero) so 16 residual additions do not blow up.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION

__all__ = ["BERT_FORMS", "BertForm", "bert_encoder", "resnet50"]

BertForm = Literal["dynamo", "torchscript", "dynamo_opset20"]
BERT_FORMS: tuple[BertForm, ...] = ("dynamo", "torchscript", "dynamo_opset20")
_RESNET_OPSET = 17
_BN_TRAINING_MODE_SINCE = 14
_BERT_OPSET = {"dynamo": 18, "torchscript": 17, "dynamo_opset20": 20}
# torch 2.13's dynamo exporter runs onnxscript's optimizer, whose `x + 0` rule matches constants
# within abs_tol 1e-8 of zero: BERT's LayerNorm eps of 1e-12 is dropped from the graph.
_DYNAMO_DROPS_ADD_BELOW = 1e-8


class _Graph:
    """Collects nodes and initializers; hands out unique value names."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()
        self._shared: dict[tuple[str, bytes], str] = {}

    def name(self, base: str) -> str:
        candidate, index = base, 0
        while candidate in self._names:
            index += 1
            candidate = f"{base}_{index}"
        self._names.add(candidate)
        return candidate

    def init(self, base: str, values: np.ndarray, dtype: type = np.float32) -> str:
        name = self.name(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def shared(self, base: str, values: object, dtype: type = np.float32) -> str:
        """One initializer per distinct constant, as the dynamo exporter deduplicates them."""
        array: np.ndarray = np.asarray(values, dtype=dtype)
        key = (array.dtype.str + str(array.shape), array.tobytes())
        if key not in self._shared:
            self._shared[key] = self.init(base, array, dtype)
        return self._shared[key]

    def constant(self, base: str, values: object, dtype: type = np.float32) -> str:
        """A Constant node, as the TorchScript exporter writes scalars and shapes."""
        out = self.name(base)
        tensor = numpy_helper.from_array(np.asarray(values, dtype=dtype), out)
        self.nodes.append(helper.make_node("Constant", [], [out], name=out, value=tensor))
        return out

    def op(self, op_type: str, inputs: list[str], base: str, **attrs: Any) -> str:
        out = self.name(base)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def _finish(g: _Graph, name: str, inputs: list[onnx.ValueInfoProto],
            outputs: list[onnx.ValueInfoProto], opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="fuseforge-tests", producer_version="0.1")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


# --- ResNet-50 -----------------------------------------------------------------------------

def _conv_bn(g: _Graph, x: str, prefix: str, bn: str, in_ch: int, out_ch: int, kernel: int,
             stride: int, *, small_gamma: bool = False, opset: int = _RESNET_OPSET) -> str:
    """Conv (no bias, He init) → BatchNormalization, as torchvision's modules export."""
    fan_in = in_ch * kernel * kernel
    w = g.init(f"{prefix}.weight",
               g.rng.normal(0.0, math.sqrt(2.0 / fan_in), (out_ch, in_ch, kernel, kernel)))
    pad = kernel // 2
    y = g.op("Conv", [x, w], f"/{prefix}/Conv", kernel_shape=[kernel, kernel],
             strides=[stride, stride], pads=[pad] * 4, dilations=[1, 1], group=1)
    gamma = g.rng.uniform(0.1, 0.4, out_ch) if small_gamma else g.rng.uniform(0.5, 1.5, out_ch)
    params = [
        g.init(f"{bn}.weight", gamma),
        g.init(f"{bn}.bias", g.rng.normal(0.0, 0.1, out_ch)),
        g.init(f"{bn}.running_mean", g.rng.normal(0.0, 0.2, out_ch)),
        g.init(f"{bn}.running_var", g.rng.uniform(0.5, 2.0, out_ch)),
    ]
    # training_mode came with BatchNormalization-14; the exporters write it from opset 14 on.
    training = {"training_mode": 0} if opset >= _BN_TRAINING_MODE_SINCE else {}
    return g.op("BatchNormalization", [y, *params], f"/{bn}/BatchNormalization",
                epsilon=1e-5, momentum=0.9, **training)


def _bottleneck(g: _Graph, x: str, prefix: str, in_ch: int, planes: int, stride: int,
                opset: int) -> str:
    out_ch = planes * 4
    y = g.op("Relu", [_conv_bn(g, x, f"{prefix}.conv1", f"{prefix}.bn1", in_ch, planes, 1, 1,
                               opset=opset)], f"/{prefix}/relu/Relu")
    y = g.op("Relu", [_conv_bn(g, y, f"{prefix}.conv2", f"{prefix}.bn2", planes, planes, 3,
                               stride, opset=opset)], f"/{prefix}/relu_1/Relu")
    y = _conv_bn(g, y, f"{prefix}.conv3", f"{prefix}.bn3", planes, out_ch, 1, 1, small_gamma=True,
                 opset=opset)
    shortcut = x
    if stride != 1 or in_ch != out_ch:
        shortcut = _conv_bn(g, x, f"{prefix}.downsample.0", f"{prefix}.downsample.1", in_ch,
                            out_ch, 1, stride, opset=opset)
    y = g.op("Add", [y, shortcut], f"/{prefix}/Add")
    return g.op("Relu", [y], f"/{prefix}/relu_2/Relu")


def resnet50(batch: int | str = "N", seed: int = 0, opset: int = _RESNET_OPSET
             ) -> onnx.ModelProto:
    """ResNet-50: input "input" [batch, 3, 224, 224] float32 → output "logits" [batch, 1000].

    Stem: Conv 7x7/2 → BatchNormalization → Relu → MaxPool 3x3/2; then bottlenecks [3, 4, 6, 3]
    (1x1 → 3x3 (stride here) → 1x1 convs, each followed by BatchNormalization, a Conv +
    BatchNormalization shortcut on each stage's first block, Add, Relu); GlobalAveragePool →
    Flatten → Gemm. 53 Conv and 53 BatchNormalization, opset 17 (or `opset`, 13 and up: the
    same ops), about 25.6M float32 weights (the build takes about a second).
    """
    g = _Graph(np.random.default_rng(seed))
    x = g.op("Relu", [_conv_bn(g, "input", "conv1", "bn1", 3, 64, 7, 2, opset=opset)],
             "/relu/Relu")
    x = g.op("MaxPool", [x], "/maxpool/MaxPool", kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1], ceil_mode=0, dilations=[1, 1])
    in_ch = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _bottleneck(g, x, f"layer{stage + 1}.{block}", in_ch, planes, stride, opset)
            in_ch = planes * 4
    x = g.op("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
    x = g.op("Flatten", [x], "/Flatten", axis=1)
    w = g.init("fc.weight", g.rng.normal(0.0, math.sqrt(1.0 / in_ch), (1000, in_ch)))
    b = g.init("fc.bias", g.rng.normal(0.0, 0.1, 1000))
    g.nodes.append(helper.make_node("Gemm", [x, w, b], ["logits"], name="/fc/Gemm",
                                    alpha=1.0, beta=1.0, transB=1))
    return _finish(
        g, "resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])],
        opset)


# --- BERT-style encoder ----------------------------------------------------------------------

class _BertWriter:
    """Writes one BERT form's node sequences; the exporters differ in constants and operand order.

    dynamo: constants are (deduplicated) initializers, `Linear` is MatMul(x, W) then
    Add(y, bias), Reshape has allowzero=1, ReduceMean takes axes as an input (opset 18), GELU
    ends Mul(0.5, t) → Mul(x, ·).
    torchscript: constants are Constant nodes, Add(bias, y), Reshape allowzero=0, ReduceMean
    takes an axes attribute (opset 17), GELU ends Mul(x, t) → Mul(·, 0.5).
    """

    def __init__(self, g: _Graph, form: BertForm, epsilon: float) -> None:
        self.g, self.form, self.epsilon = g, form, epsilon
        self.dynamo = form != "torchscript"

    def const(self, base: str, values: object, dtype: type = np.float32) -> str:
        if self.dynamo:
            return self.g.shared(base, values, dtype)
        return self.g.constant(base, values, dtype)

    def linear(self, x: str, prefix: str, n_in: int, n_out: int) -> str:
        g = self.g
        # Stored as [in, out]: both exporters pre-transpose torch's [out, in] weight for MatMul.
        w = g.init(f"{prefix}.weight_t", g.rng.normal(0.0, 1.0 / math.sqrt(n_in), (n_in, n_out)))
        b = g.init(f"{prefix}.bias", g.rng.normal(0.0, 0.1, n_out))
        y = g.op("MatMul", [x, w], f"/{prefix}/MatMul")
        return g.op("Add", [y, b] if self.dynamo else [b, y], f"/{prefix}/Add")

    def reshape(self, x: str, shape: list[int], base: str) -> str:
        return self.g.op("Reshape", [x, self.const("shape", shape, np.int64)], base,
                         allowzero=1 if self.dynamo else 0)

    def layer_norm(self, x: str, prefix: str, hidden: int) -> str:
        g = self.g
        gamma = g.init(f"{prefix}.weight", g.rng.uniform(0.5, 1.5, hidden))
        beta = g.init(f"{prefix}.bias", g.rng.normal(0.0, 0.1, hidden))
        if self.form == "dynamo_opset20":
            return g.op("LayerNormalization", [x, gamma, beta], f"/{prefix}/LayerNormalization",
                        axis=-1, epsilon=self.epsilon, stash_type=1)
        mean = self._reduce_mean(x, f"/{prefix}/ReduceMean")
        centered = g.op("Sub", [x, mean], f"/{prefix}/Sub")
        squared = g.op("Pow", [centered, self.const("two", 2.0)], f"/{prefix}/Pow")
        var = self._reduce_mean(squared, f"/{prefix}/ReduceMean_1")
        if not (self.dynamo and abs(self.epsilon) <= _DYNAMO_DROPS_ADD_BELOW):
            var = g.op("Add", [var, self.const("eps", self.epsilon)], f"/{prefix}/Add")
        std = g.op("Sqrt", [var], f"/{prefix}/Sqrt")
        normed = g.op("Div", [centered, std], f"/{prefix}/Div")
        scaled = g.op("Mul", [gamma, normed], f"/{prefix}/Mul")
        return g.op("Add", [scaled, beta], f"/{prefix}/Add_1")

    def _reduce_mean(self, x: str, base: str) -> str:
        if self.dynamo:
            return self.g.op("ReduceMean", [x, self.const("axes", [-1], np.int64)], base,
                             keepdims=1, noop_with_empty_axes=0)
        return self.g.op("ReduceMean", [x], base, axes=[-1], keepdims=1)

    def gelu(self, x: str, prefix: str) -> str:
        """Exact (erf) GELU: x * 0.5 * (1 + erf(x / sqrt(2)))."""
        g = self.g
        if self.form == "dynamo_opset20":
            return g.op("Gelu", [x], f"/{prefix}/Gelu", approximate="none")
        scaled = g.op("Div", [x, self.const("sqrt2", math.sqrt(2.0))], f"/{prefix}/Div")
        erf = g.op("Erf", [scaled], f"/{prefix}/Erf")
        shifted = g.op("Add", [erf, self.const("one", 1.0)], f"/{prefix}/Add")
        if self.dynamo:
            half = g.op("Mul", [self.const("half", 0.5), shifted], f"/{prefix}/Mul")
            return g.op("Mul", [x, half], f"/{prefix}/Mul_1")
        product = g.op("Mul", [x, shifted], f"/{prefix}/Mul")
        return g.op("Mul", [product, self.const("half", 0.5)], f"/{prefix}/Mul_1")


def _attention(w: _BertWriter, x: str, mask: str, prefix: str, batch: int, seq: int,
               hidden: int, heads: int) -> str:
    g, head_dim = w.g, hidden // heads
    split = [batch, seq, heads, head_dim]
    q = w.linear(x, f"{prefix}.query", hidden, hidden)
    q = g.op("Transpose", [w.reshape(q, split, f"/{prefix}/Reshape")], f"/{prefix}/Transpose",
             perm=[0, 2, 1, 3])
    k = w.reshape(w.linear(x, f"{prefix}.key", hidden, hidden), split, f"/{prefix}/Reshape_1")
    v = w.reshape(w.linear(x, f"{prefix}.value", hidden, hidden), split, f"/{prefix}/Reshape_2")
    v = g.op("Transpose", [v], f"/{prefix}/Transpose_1", perm=[0, 2, 1, 3])
    # Both exporters fold k.transpose(1, 2).transpose(-1, -2) into one Transpose.
    k = g.op("Transpose", [k], f"/{prefix}/Transpose_2", perm=[0, 2, 3, 1])
    scores = g.op("MatMul", [q, k], f"/{prefix}/MatMul")
    scores = g.op("Div", [scores, w.const("scale", math.sqrt(head_dim))], f"/{prefix}/Div")
    scores = g.op("Add", [scores, mask], f"/{prefix}/Add")
    probs = g.op("Softmax", [scores], f"/{prefix}/Softmax", axis=-1)
    context = g.op("MatMul", [probs, v], f"/{prefix}/MatMul_1")
    context = g.op("Transpose", [context], f"/{prefix}/Transpose_3", perm=[0, 2, 1, 3])
    context = w.reshape(context, [batch, seq, hidden], f"/{prefix}/Reshape_3")
    return w.linear(context, f"{prefix}.output.dense", hidden, hidden)


def bert_encoder(layers: int = 2, hidden: int = 256, heads: int = 4, seq: int = 128,
                 batch: int = 1, seed: int = 0, form: BertForm = "dynamo",
                 epsilon: float = 1e-5, vocab: int = 1000) -> onnx.ModelProto:
    """A BERT-style encoder: "input_ids" int64 [batch, seq] and "attention_mask" float32
    [batch, 1, 1, seq] (additive: 0 keeps a token, -10000 masks it) → "last_hidden_state"
    float32 [batch, seq, hidden].

    Token embedding Gather + position embedding Add → LayerNorm; then per layer: Q/K/V
    MatMul + bias, per-head Reshape/Transpose, softmax(Q·Kᵀ / sqrt(d) + mask)·V, output
    projection, residual Add → LayerNorm, FFN (4 * hidden) MatMul + bias → GELU (erf) →
    MatMul + bias, residual Add → LayerNorm. Shapes are static, as exported from fixed inputs.

    `form` (learned by exporting a tiny encoder with torch 2.13):
      "dynamo": `torch.onnx.export(dynamo=True, opset_version=18)` of a model whose LayerNorm
        is written in Python (mean/pow/sqrt, as the original BERT port): LayerNorm as
        ReduceMean(axes input)/Sub/Pow/ReduceMean/Add eps/Sqrt/Div/Mul/Add and GELU as
        Div/Erf/Add/Mul/Mul. With `epsilon` <= 1e-8 (BERT uses 1e-12) the exporter drops the
        Add eps, and so does this form.
      "torchscript": `dynamo=False, opset_version=17` of the same model: the same ops with
        Constant nodes, ReduceMean axes as an attribute, bias first in the bias Add.
      "dynamo_opset20": the dynamo exporter's default (opset 20) for `nn.LayerNorm` and
        `F.gelu`: single LayerNormalization and Gelu ops, nothing written out.

    Raises:
        ValueError: `form` is unknown or `hidden` is not divisible by `heads`.
    """
    if form not in BERT_FORMS:
        raise ValueError(f"unknown BERT form {form!r}; expected one of {', '.join(BERT_FORMS)}")
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
    g = _Graph(np.random.default_rng(seed))
    w = _BertWriter(g, form, epsilon)
    table = g.init("embeddings.word_embeddings.weight", g.rng.normal(0.0, 1.0, (vocab, hidden)))
    positions = g.init("embeddings.position_embeddings",
                       g.rng.normal(0.0, 0.5, (1, seq, hidden)))
    # The TorchScript exporter leaves Gather's axis at its default.
    gather_axis = {} if form == "torchscript" else {"axis": 0}
    x = g.op("Gather", [table, "input_ids"], "/embeddings/Gather", **gather_axis)
    x = g.op("Add", [x, positions], "/embeddings/Add")
    x = w.layer_norm(x, "embeddings.LayerNorm", hidden)
    for i in range(layers):
        prefix = f"encoder.layer.{i}"
        attended = _attention(w, x, "attention_mask", f"{prefix}.attention", batch, seq,
                              hidden, heads)
        x = g.op("Add", [x, attended], f"/{prefix}/attention/residual/Add")
        x = w.layer_norm(x, f"{prefix}.attention.output.LayerNorm", hidden)
        ffn = w.gelu(w.linear(x, f"{prefix}.intermediate.dense", hidden, 4 * hidden),
                     f"{prefix}/intermediate/gelu")
        ffn = w.linear(ffn, f"{prefix}.output.dense", 4 * hidden, hidden)
        x = g.op("Add", [x, ffn], f"/{prefix}/output/residual/Add")
        x = w.layer_norm(x, f"{prefix}.output.LayerNorm", hidden)
    # Exporters name the last node's output after the graph output.
    g.nodes[-1].output[0] = "last_hidden_state"
    return _finish(
        g, f"bert_encoder_{form}",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [batch, 1, 1, seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       [batch, seq, hidden])],
        _BERT_OPSET[form])
