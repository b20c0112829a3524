"""Decide, node by node, whether a precision conversion runs a node in float16/bfloat16.

A node converts when its schema lets the type parameters that bind its float32 values take the
low type, its output types follow its inputs (not an attribute), and neither the keep policy
nor the caller keeps it in float32. Correctness limits come first and are not policy: an op
without a known schema, a custom domain, a contrib op without a low-precision GPU kernel
(FusedConv), a fuseforge plugin whose schema or TensorRT registration lacks the low type, a node
holding subgraphs, or a value of unknown type keeps the node in float32 whatever the policy says.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum

import onnx
import onnx_ir as ir

from optimizer.errors import PluginNotFoundError
from optimizer.passes.matching import MS_DOMAIN, ONNX_DOMAINS
from optimizer.plugins.base import DOMAIN as PLUGIN_DOMAIN
from optimizer.plugins.base import TENSOR_TYPES, Plugin
from optimizer.plugins.registry import plugin_for_op
from optimizer.plugins.trt_aot import same_type_combination
from optimizer.precision.keep_list import KeepPolicy, op_key, policy_reasons
from optimizer.precision.signatures import OpSignature, infer_output_dtypes, node_signature

__all__ = ["NodePlan", "Role", "cast_goes_low", "plan_nodes", "plugin_refusal"]

FLOAT = ir.DataType.FLOAT
# Ops whose cost is arithmetic, where a low type pays off (tensor cores, half the weight bytes).
COMPUTE_BOUND = frozenset({
    "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Attention",
    f"{MS_DOMAIN}.FusedConv", f"{MS_DOMAIN}.FusedMatMul", f"{MS_DOMAIN}.FusedGemm",
    f"{MS_DOMAIN}.MultiHeadAttention", f"{MS_DOMAIN}.Attention",
    f"{PLUGIN_DOMAIN}.MultiHeadAttention",
})
# Contrib ops whose schema admits float16 but whose GPU kernel does not: the type constraint
# alone would let the conversion write a graph onnxruntime's CUDA provider cannot run.
_NO_LOW_PRECISION_KERNEL = {
    f"{MS_DOMAIN}.FusedConv": ("onnxruntime registers its CUDA kernel for float32 only "
                               "(contrib_ops/cuda/fused_conv.cc)"),
}
# The types every plugin's TensorRT registration offers its inputs and outputs (each registers
# an AutoTuneCombination of same_type_combination(n)), in TensorRT's names ("FP16").
_TRT_PLUGIN_TYPES = frozenset(same_type_combination(1).split("|"))
# A region reading a constant this large still gains: the weight is stored in half the bytes
# (an embedding table read by Gather, say).
LARGE_CONSTANT = 1 << 16  # elements
_CAST_ONLY = ("converting it would only add Casts: its low-precision region has no "
              "compute-bound op (MatMul, Gemm, Conv...) or large weight, and float32 on every "
              "side")


class Role(Enum):
    LOW = "low"  # computes in the low type
    FLOAT32 = "float32"  # kept in float32, with a reason
    FOLLOW = "follow"  # has no float output (Shape, comparisons, ArgMax): reads what it is given
    CAST = "cast"  # a Cast: its target type follows what its readers need
    UNTOUCHED = "untouched"  # reads and writes no float32 (integer ops, Constant)


@dataclass(frozen=True)
class NodePlan:
    role: Role
    signature: OpSignature | None = None
    params: frozenset[str] = frozenset()  # type parameters that change to the low type
    reason: str = ""

    def converts_input(self, index: int) -> bool:
        """Whether input `index` takes the low type when the node runs low."""
        if self.signature is None:
            return False
        return self.signature.input_type(index) in self.params

    def converts_output(self, index: int) -> bool:
        if self.signature is None:
            return False
        return self.signature.output_type(index) in self.params


def plan_nodes(graph: ir.Graph, *, low: ir.DataType, opsets: Mapping[str, int],
               policy: KeepPolicy, extra_fp32_nodes: Collection[str],
               keep_io_types: bool) -> dict[ir.Node, NodePlan]:
    """A plan for every node of `graph` (its subgraphs are never converted); `opsets` as
    `signatures.model_opsets` gives them.

    Fills in dtypes that shape inference left unknown where a schema fixes them (contrib ops),
    so call it on a graph whose value types have been inferred.
    """
    signatures = {node: node_signature(node, opsets) for node in graph}
    for node, signature in signatures.items():
        if signature is not None:
            infer_output_dtypes(node, signature)
    kept_by_policy = policy_reasons(graph, policy)
    extra = frozenset(extra_fp32_nodes)
    plans = {}
    for node in graph:
        plans[node] = _plan(node, signatures[node], low, kept_by_policy.get(node),
                            node.name in extra, graph)
    if policy.cast_only_regions:
        _keep_cast_only_regions(graph, plans, keep_io_types)
    return plans


def cast_goes_low(node: ir.Node, plans: Mapping[ir.Node, NodePlan], keep_io_types: bool) -> bool:
    """Whether a Cast to float32 should cast to the low type instead.

    Yes when some reader needs the low type and none needs float32, so the conversion retypes
    the Cast rather than chaining a second Cast after it.
    """
    to = node.attributes.get("to")
    if to is None or to.as_int() != FLOAT:
        return False
    output = node.outputs[0]
    if output.is_graph_output() and keep_io_types:
        return False
    wants_low = False
    for user, index in output.uses():
        plan = plans.get(user)
        if plan is None:
            return False  # read inside a subgraph, which stays float32
        if plan.role in (Role.FOLLOW, Role.CAST):
            continue
        if plan.role is not Role.LOW or not plan.converts_input(index):
            return False
        wants_low = True
    return wants_low


def plugin_refusal(plugin: Plugin, low: ir.DataType) -> str | None:
    """Why nodes of `plugin` cannot compute in `low`, or None when they can.

    Both must admit the type: the plugin's ONNX schema (its `type_constraint`, which the
    checker enforces) and its TensorRT registration (which the engine build enforces).
    """
    onnx_type = f"tensor({onnx.TensorProto.DataType.Name(low).lower()})"
    if onnx_type not in plugin.type_constraint:
        admitted = ", ".join(t.removeprefix("tensor(").removesuffix(")")
                             for t in plugin.type_constraint)
        return (f"plugin {plugin.name} takes {admitted}: its schema admits no "
                f"{low.name.lower()}")
    if TENSOR_TYPES.get(onnx_type) not in _TRT_PLUGIN_TYPES:
        return (f"the TensorRT registration of {plugin.trt_plugin_id} accepts "
                f"{', '.join(sorted(_TRT_PLUGIN_TYPES))}, not {low.name.lower()}")
    return None


def _keep_cast_only_regions(graph: ir.Graph, plans: dict[ir.Node, NodePlan],
                            keep_io_types: bool) -> None:
    """Send each region of LOW nodes (joined by the low values they pass) back to float32
    unless it holds a compute-bound op, reads a large constant, or reads or writes
    low-precision graph inputs/outputs."""
    parent: dict[ir.Node, ir.Node] = {n: n for n, plan in plans.items() if plan.role is Role.LOW}

    def root(node: ir.Node) -> ir.Node:
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    worth: set[ir.Node] = set()
    for node in parent:
        plan = plans[node]
        for index, value in enumerate(node.inputs):
            if value is None or not plan.converts_input(index):
                continue
            if value.const_value is not None and value.const_value.size >= LARGE_CONSTANT:
                worth.add(node)
            producer = value.producer()
            if producer in parent and plans[producer].converts_output(value.index() or 0):
                parent[root(node)] = root(producer)
            elif value.is_graph_input() and not keep_io_types:
                worth.add(node)  # converting avoids a Cast at the boundary
        if not keep_io_types and any(out.is_graph_output() for out in node.outputs):
            worth.add(node)
    regions: dict[ir.Node, list[ir.Node]] = {}
    for node in parent:
        regions.setdefault(root(node), []).append(node)
    for members in regions.values():
        if any(op_key(n) in COMPUTE_BOUND or n in worth for n in members):
            continue
        for node in members:
            plans[node] = NodePlan(Role.FLOAT32, plans[node].signature, reason=_CAST_ONLY)


def _plan(node: ir.Node, signature: OpSignature | None, low: ir.DataType,
          policy_reason: str | None, named: bool, graph: ir.Graph) -> NodePlan:
    def keep(reason: str) -> NodePlan:
        return NodePlan(Role.FLOAT32, signature, reason=reason)

    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    is_onnx = node.domain in ONNX_DOMAINS
    if is_onnx and node.op_type == "Constant":
        return NodePlan(Role.UNTOUCHED)  # constants are retyped where they are read
    if is_onnx and node.op_type == "Cast":
        return NodePlan(Role.CAST, signature)
    # An output nobody reads may stay untyped (e.g. LayerNormalization's unused Mean).
    unknown = [v for v in values if v.dtype is None
               and (v in node.inputs or v.uses() or v.is_graph_output())]
    if not unknown and all(v.dtype != FLOAT for v in values):
        return NodePlan(Role.UNTOUCHED)
    if named:
        return keep("named in extra_fp32_nodes")
    if node.domain not in (*ONNX_DOMAINS, MS_DOMAIN, PLUGIN_DOMAIN):
        return keep(f"op domain {node.domain!r} is not one whose typing rules are known")
    if any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
           for attr in node.attributes.values() if not attr.is_ref()):
        return keep("holds subgraphs (If/Loop/Scan bodies are not converted)")
    if signature is None:
        return keep(f"no schema is known for {op_key(node)} at this opset")
    if op_key(node) in _NO_LOW_PRECISION_KERNEL:
        return keep(_NO_LOW_PRECISION_KERNEL[op_key(node)])
    if node.domain == PLUGIN_DOMAIN:
        try:
            refusal = plugin_refusal(plugin_for_op(node.domain, node.op_type), low)
        except PluginNotFoundError as err:
            refusal = str(err)
        if refusal is not None:
            return keep(refusal)
    if unknown:
        return keep(f"the type of {unknown[0].name!r} is unknown")
    if any(user.graph is not graph for out in node.outputs for user, _ in out.uses()):
        return keep("an output is read inside a subgraph, which stays float32")
    params = _float_params(node, signature)
    convertible = frozenset(p for p in params if low in signature.allowed[p])
    if not convertible:
        shown = ", ".join(sorted(params)) or "its float inputs"
        return keep(f"the {op_key(node)} schema admits no {low.name.lower()} for {shown}")
    bound_by_inputs = {signature.input_type(i) for i, v in enumerate(node.inputs) if v is not None}
    if any(signature.output_type(i) in convertible - bound_by_inputs
           for i, v in enumerate(node.outputs) if v.dtype == FLOAT):
        return keep("its output type is set by an attribute, not by its inputs")
    if policy_reason is not None:
        return keep(policy_reason)
    plan = NodePlan(Role.LOW, signature, convertible)
    if not any(plan.converts_output(i) and v.dtype == FLOAT for i, v in enumerate(node.outputs)):
        return NodePlan(Role.FOLLOW, signature, convertible)
    return plan


def _float_params(node: ir.Node, signature: OpSignature) -> set[str]:
    """The type parameters that bind a float32 input or output of `node`."""
    params = set()
    for index, value in enumerate(node.inputs):
        type_str = signature.input_type(index)
        if value is not None and value.dtype == FLOAT and signature.is_parameter(type_str):
            assert type_str is not None
            params.add(type_str)
    for index, value in enumerate(node.outputs):
        type_str = signature.output_type(index)
        if value.dtype == FLOAT and signature.is_parameter(type_str):
            assert type_str is not None
            params.add(type_str)
    return params
