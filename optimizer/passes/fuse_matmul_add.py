"""Lower MatMul + bias Add to Gemm, and fold constant scalings into MatMul weights.

Algebra (B, bias and c constants; B is [K, N]):
- Add(MatMul(A, B), bias) = Gemm(A, B, bias) for 2-D A ([M, K]), where Gemm computes
  A @ B + C with C unidirectionally broadcast to [M, N].
- For A of rank r >= 3 ([d0, ..., K]) the same holds after flattening the leading dims:
  Reshape(Gemm(Reshape(A, [-1, K]), B, bias), [d0, ..., N]). ONNX Runtime does not do this
  itself; it pays off only while the bias Add is a noticeable share of the work, i.e. for small
  K. Measured with bench/fuse_matmul_add.py (ORT CPU, graph optimizations off, one thread, Relu
  before and after, median unfused/fused time over 100 interleaved rounds, 16-1024 rows, fp32
  and fp16, two runs): K = 32 1.00-1.30x, 64 1.01-1.12x, 128 1.02-1.05x, 256 1.00-1.03x, and
  K = 768 0.98-1.03x, a tie within noise. So it is lowered for K <= 256 only.
- Mul(MatMul(x, W), c) = MatMul(x, W * c) when c is a scalar or one value per output column
  ([N]); MatMul(Mul(x, c), W) = MatMul(x, W * c) when c is a scalar. W * c is computed in
  float64 and rounded once to W's type.

Safe only when: B / W, bias and c are constants (not graph inputs); the fused-away MatMul or
Mul output feeds only the next op of the pattern and is not a graph output; the types are
floating point (float16, float, double) and the same throughout; a bias or scale never
broadcasts the result to a larger shape; a rewritten W feeds no other node; and for the rank-3
form all leading dims but one are static and non-zero.

TensorRT parses Gemm and MatMul natively, so it gets the same 2-D lowering and weight folds;
the rank-3 reshape form is an ONNX Runtime CPU measurement and is left out there.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRule, RewriteRuleClassBase

from optimizer.passes.base import FusionPass, LazyRules, PassStage
from optimizer.passes.checks import (
    const_array,
    const_shape,
    first_refusal,
    refuse_if_escapes,
    refuse_if_not_constant,
    refuse_if_shared,
    refuse_unless_same_float,
    unique_initializer_name,
)
from optimizer.registries.backends import Backend

__all__ = [
    "FUSE_MATMUL_ADD",
    "FoldInputScaleIntoMatMul",
    "FoldInputScaleIntoMatMulScaleFirst",
    "FoldOutputScaleIntoMatMul",
    "FoldOutputScaleIntoMatMulScaleFirst",
    "MatMulAddToGemm",
    "MatMulAddToGemmBiasFirst",
    "MatMulAddToReshapedGemm",
    "MatMulAddToReshapedGemmBiasFirst",
]

# Largest reduction dim K for which Reshape → Gemm → Reshape measured faster (see above).
RESHAPED_GEMM_MAX_K = 256


def _graph_of(value: ir.Value) -> ir.Graph | None:
    producer = value.producer()
    return None if producer is None else producer.graph


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def _refuse_unless_2d_weight(w: ir.Value) -> MatchResult | None:
    shape = const_shape(w)
    if len(shape) != 2:
        return MatchResult().fail(f"weight '{w.name}' has shape {shape}, expected 2-D [K, N]")
    return None


def _refuse_unless_per_column(shape: tuple[int, ...], n: int, max_rank: int | None
                              ) -> MatchResult | None:
    """Refuse a bias/scale shape unless it is a scalar or [N] with leading 1s, not too high-rank."""
    if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, n)):
        return MatchResult().fail(f"shape {shape} is not a scalar or one value per column ({n})")
    if len(shape) > 1 and (max_rank is None or len(shape) > max_rank):
        return MatchResult().fail(f"shape {shape} could broadcast the result to a higher rank")
    return None


# -- MatMul + Add → Gemm ------------------------------------------------------------------------

class _MatMulAddBase(RewriteRuleClassBase):
    bias_first: ClassVar[bool] = False

    def pattern(self, op: Any, a: ir.Value, b: ir.Value, bias: ir.Value) -> ir.Value:
        product = op.MatMul(a, b, _outputs=["mm_out"])
        if self.bias_first:
            return op.Add(bias, product, _outputs=["add_out"])
        return op.Add(product, bias, _outputs=["add_out"])

    def check_common(self, a: ir.Value, b: ir.Value, bias: ir.Value, mm_out: ir.Value,
                     add_out: ir.Value) -> MatchResult | None:
        add = add_out.producer()
        assert add is not None
        return first_refusal(
            refuse_if_not_constant(b, bias),
            refuse_if_escapes(mm_out, add),
            refuse_unless_same_float(a, b, bias),
            lambda: _refuse_unless_2d_weight(b),  # reads b, known constant only by now
        )


class MatMulAddToGemm(_MatMulAddBase):
    """Add(MatMul(A, B), bias) → Gemm(A, B, bias) for 2-D A."""

    def check(self, context: Any, a: ir.Value, b: ir.Value, bias: ir.Value, mm_out: ir.Value,
              add_out: ir.Value) -> MatchResult:
        if _rank(a) != 2:
            return MatchResult().fail(f"'{a.name}' has rank {_rank(a)}, Gemm needs 2")
        refusal = self.check_common(a, b, bias, mm_out, add_out)
        if refusal is not None:
            return refusal
        assert a.shape is not None
        m, n = a.shape[0], const_shape(b)[1]
        shape = const_shape(bias)
        if len(shape) == 2 and shape[0] != 1 and shape[0] == m:
            shape = (1, shape[1])  # a bias row per row of A is fine: Gemm's C may be [M, N]
        refusal = _refuse_unless_per_column(shape, n, max_rank=2)
        return refusal if refusal is not None else MatchResult()

    def rewrite(self, op: Any, a: ir.Value, b: ir.Value, bias: ir.Value, **_: Any) -> ir.Value:
        return op.Gemm(a, b, bias)


class MatMulAddToGemmBiasFirst(MatMulAddToGemm):
    """Add(bias, MatMul(A, B)) → Gemm(A, B, bias) for 2-D A (the order PyTorch exports)."""

    bias_first = True


class MatMulAddToReshapedGemm(_MatMulAddBase):
    """Add(MatMul(A, B), bias) → Reshape(Gemm(Reshape(A, [-1, K]), B, bias), [..., N]), rank 3+."""

    def __init__(self, max_k: int = RESHAPED_GEMM_MAX_K) -> None:
        super().__init__()
        self.max_k = max_k

    def check(self, context: Any, a: ir.Value, b: ir.Value, bias: ir.Value, mm_out: ir.Value,
              add_out: ir.Value) -> MatchResult:
        rank = _rank(a)
        if rank is None or rank < 3:
            return MatchResult().fail(f"'{a.name}' has rank {rank}, this form is for rank >= 3")
        refusal = self.check_common(a, b, bias, mm_out, add_out)
        if refusal is not None:
            return refusal
        assert a.shape is not None
        k, n = const_shape(b)
        if k > self.max_k:
            return MatchResult().fail(
                f"K = {k} > {self.max_k}: Reshape → Gemm → Reshape measured no faster there")
        leading = list(a.shape)[:-1]
        if sum(not isinstance(d, int) for d in leading) > 1 or 0 in leading:
            return MatchResult().fail(
                f"'{a.name}' has shape {a.shape}: needs all leading dims static and non-zero "
                "but at most one")
        refusal = _refuse_unless_per_column(const_shape(bias), n, max_rank=rank)
        return refusal if refusal is not None else MatchResult()

    def rewrite(self, op: Any, a: ir.Value, b: ir.Value, bias: ir.Value, mm_out: ir.Value,
                **_: Any) -> ir.Value:
        assert a.shape is not None
        graph = _graph_of(mm_out)
        k, n = const_shape(b)
        out_shape = [d if isinstance(d, int) else -1 for d in list(a.shape)[:-1]] + [n]
        flat = op.initializer(ir.tensor(np.array([-1, k], np.int64),
                                        name=unique_initializer_name(graph, f"{b.name}_rows")))
        back = op.initializer(ir.tensor(np.array(out_shape, np.int64),
                                        name=unique_initializer_name(graph, f"{b.name}_out_shape")))
        c = bias
        if const_array(bias).ndim > 1:  # [1, ..., 1, N] → [N]: Gemm's C must broadcast to 2-D
            array = const_array(bias).reshape(-1)
            name = unique_initializer_name(graph, f"{bias.name}_1d")
            c = op.initializer(ir.tensor(array, name=name))
        return op.Reshape(op.Gemm(op.Reshape(a, flat), b, c), back)


class MatMulAddToReshapedGemmBiasFirst(MatMulAddToReshapedGemm):
    """Add(bias, MatMul(A, B)) for rank-3+ A, as MatMulAddToReshapedGemm."""

    bias_first = True


# -- constant scalings folded into W ----------------------------------------------------------

class _FoldScaleBase(RewriteRuleClassBase):
    """Shared by the scale folds: checks on W and c, and the rewrite to MatMul(x, W * c)."""

    scale_first: ClassVar[bool] = False  # Mul(c, v) rather than Mul(v, c)
    scale_after: ClassVar[bool]  # Mul(MatMul(...)) rather than MatMul(Mul(...))

    def mul(self, op: Any, value: ir.Value, c: ir.Value) -> ir.Value:
        args = (c, value) if self.scale_first else (value, c)
        return op.Mul(*args, _outputs=["mul_out"])

    def check_scale(self, x: ir.Value, c: ir.Value, w: ir.Value) -> MatchResult | None:
        raise NotImplementedError

    def check(self, context: Any, x: ir.Value, w: ir.Value, c: ir.Value, mm_out: ir.Value,
              mul_out: ir.Value) -> MatchResult:
        mm, mul = mm_out.producer(), mul_out.producer()
        assert mm is not None and mul is not None
        # The fused-away value is the output of whichever op comes first.
        first, second = (mm_out, mul) if self.scale_after else (mul_out, mm)
        refusal = first_refusal(
            refuse_if_not_constant(w, c),
            refuse_if_shared(w, mm),
            refuse_if_escapes(first, second),
            refuse_unless_same_float(x, w, c),
            # These read W and c, known constant only by now.
            lambda: _refuse_unless_2d_weight(w),
            lambda: self.check_scale(x, c, w),
        )
        return refusal if refusal is not None else MatchResult()

    def rewrite(self, op: Any, x: ir.Value, w: ir.Value, c: ir.Value, mm_out: ir.Value,
                **_: Any) -> ir.Value:
        weights = const_array(w)
        scaled = weights.astype(np.float64) * const_array(c).astype(np.float64).reshape(-1)
        name = unique_initializer_name(_graph_of(mm_out), f"{w.name}_scaled")
        return op.MatMul(
            x, op.initializer(ir.tensor(scaled.astype(weights.dtype), name=name)))


class FoldOutputScaleIntoMatMul(_FoldScaleBase):
    """Mul(MatMul(x, W), c) → MatMul(x, W * c) for a scalar or per-column c."""

    scale_after = True

    def pattern(self, op: Any, x: ir.Value, w: ir.Value, c: ir.Value) -> ir.Value:
        return self.mul(op, op.MatMul(x, w, _outputs=["mm_out"]), c)

    def check_scale(self, x: ir.Value, c: ir.Value, w: ir.Value) -> MatchResult | None:
        rank = _rank(x)
        return _refuse_unless_per_column(const_shape(c), const_shape(w)[1],
                                         max_rank=None if rank is None else max(rank, 1))


class FoldOutputScaleIntoMatMulScaleFirst(FoldOutputScaleIntoMatMul):
    """Mul(c, MatMul(x, W)) → MatMul(x, W * c), as FoldOutputScaleIntoMatMul."""

    scale_first = True


class FoldInputScaleIntoMatMul(_FoldScaleBase):
    """MatMul(Mul(x, c), W) → MatMul(x, W * c) for a scalar c."""

    scale_after = False

    def pattern(self, op: Any, x: ir.Value, w: ir.Value, c: ir.Value) -> ir.Value:
        return op.MatMul(self.mul(op, x, c), w, _outputs=["mm_out"])

    def check_scale(self, x: ir.Value, c: ir.Value, w: ir.Value) -> MatchResult | None:
        shape, rank = const_shape(c), _rank(x)
        if const_array(c).size != 1:
            return MatchResult().fail(f"'{c.name}' has shape {shape}, only a scalar moves into W")
        if len(shape) > 1 and (rank is None or len(shape) > rank):
            return MatchResult().fail(f"'{c.name}' of shape {shape} could raise the rank of "
                                      f"'{x.name}' (rank {rank})")
        return None


class FoldInputScaleIntoMatMulScaleFirst(FoldInputScaleIntoMatMul):
    """MatMul(Mul(c, x), W) → MatMul(x, W * c), as FoldInputScaleIntoMatMul."""

    scale_first = True


def _rules(*, reshaped_gemm: bool) -> list[RewriteRule]:
    rules = [cls.rule() for cls in (
        FoldOutputScaleIntoMatMul, FoldOutputScaleIntoMatMulScaleFirst,
        FoldInputScaleIntoMatMul, FoldInputScaleIntoMatMulScaleFirst,
        MatMulAddToGemm, MatMulAddToGemmBiasFirst,
    )]
    if reshaped_gemm:
        rules += [MatMulAddToReshapedGemm.rule(), MatMulAddToReshapedGemmBiasFirst.rule()]
    return rules


FUSE_MATMUL_ADD = FusionPass(
    name="fuse_matmul_add",
    summary="MatMul + bias Add → Gemm (rank 3+ through Reshape for small K); fold scales into W",
    stage=PassStage.MATMUL_GEMM,
    rules=LazyRules({Backend.ONNXRUNTIME: lambda: _rules(reshaped_gemm=True),
                     Backend.TENSORRT: lambda: _rules(reshaped_gemm=False)}),
)
