"""Parse an ONNX model into a strongly typed TensorRT network, reporting parser errors per node.

The network is strongly typed: on 11.x always (the STRONGLY_TYPED creation flag is deprecated
and ignored there), on 10.x by that flag, looked up by name because its bit moved between the
two (10.16: EXPLICIT_BATCH=0, STRONGLY_TYPED=1; 11.4: STRONGLY_TYPED=0,
../shared/tensorrt-stubs/API-NOTES.md §1). So precision comes from the ONNX types, never from
builder flags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, SupportsInt

from optimizer.backends.tensorrt.metadata import release_of
from optimizer.backends.tensorrt.runner import require_tensorrt
from optimizer.errors import EngineBuildError, InternalError

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = [
    "ParserIssue",
    "describe_parser_issues",
    "network_creation_flags",
    "network_from_onnx",
    "parser_issues",
]

_LISTED_PARSER_ISSUES = 20


@dataclass(frozen=True)
class ParserIssue:
    """One error of TensorRT's ONNX parser, at a node when `node_index` >= 0."""

    node_index: int
    node_name: str
    op_type: str
    message: str
    code: str


def network_creation_flags(tensorrt_version: str, members: Mapping[str, SupportsInt]) -> int:
    """The `create_network` flags for a strongly typed network on this TensorRT.

    `members` is `trt.NetworkDefinitionCreationFlag.__members__`. 11.x networks are strongly
    typed by default (the flag is deprecated and ignored), so 0; 10.x needs STRONGLY_TYPED,
    whose bit is taken from the enum, never hard-coded.

    Raises:
        EngineBuildError: a 10.x (or older) TensorRT without STRONGLY_TYPED (before 9.x).
    """
    if release_of(tensorrt_version)[0] >= 11:
        return 0
    flag = members.get("STRONGLY_TYPED")
    if flag is None:
        raise EngineBuildError(
            f"TensorRT {tensorrt_version} cannot build strongly typed networks; FuseForge "
            "needs TensorRT 10.x or 11.x on the GPU worker.")
    return 1 << int(flag)


def network_from_onnx(
    builder: trt.Builder, onnx_bytes: bytes, *, model_path: Path | None = None,
    model_name: str = "model",
) -> tuple[trt.INetworkDefinition, trt.OnnxParser]:
    """Parse an ONNX model into a strongly typed TensorRT network.

    `model_path` lets the parser find external data next to the model. Keep the returned
    parser alive as long as the network: it owns the weights the network points to.

    Raises:
        EngineBuildError: the network cannot be created, or the parser rejects the model; the
            message lists each failing node (name, op type, the parser's reason).
    """
    require_tensorrt()
    import tensorrt as trt

    flags = network_creation_flags(trt.__version__,
                                   trt.NetworkDefinitionCreationFlag.__members__)
    network = builder.create_network(flags)
    if network is None:
        raise EngineBuildError("TensorRT could not create a network definition.")
    strongly_typed = trt.NetworkDefinitionCreationFlag.__members__.get("STRONGLY_TYPED")
    if flags and strongly_typed is not None and not network.get_flag(strongly_typed):
        raise InternalError("TensorRT created a network that is not strongly typed although "
                            "STRONGLY_TYPED was requested.")
    parser = trt.OnnxParser(network, builder.logger)
    if parser is None:
        raise EngineBuildError("TensorRT could not create an ONNX parser.")
    parsed = parser.parse(onnx_bytes, str(model_path)) if model_path else parser.parse(onnx_bytes)
    if not parsed or parser.num_errors:
        raise EngineBuildError(describe_parser_issues(parser_issues(parser), model_name))
    return network, parser


def parser_issues(parser: trt.OnnxParser) -> tuple[ParserIssue, ...]:
    """The parser's errors, read through `get_error(i)`."""
    issues = []
    for index in range(parser.num_errors):
        error = parser.get_error(index)
        if error is None:
            continue
        code = error.code()
        issues.append(ParserIssue(
            node_index=int(error.node()),
            node_name=str(error.node_name() or ""),
            op_type=str(error.node_operator() or ""),
            message=str(error.desc()),
            code=str(getattr(code, "name", code)),
        ))
    return tuple(issues)


def describe_parser_issues(issues: Sequence[ParserIssue], model_name: str) -> str:
    """The job error for a model TensorRT's ONNX parser rejected, one line per node.

    >>> issue = ParserIssue(7, "/a/Foo", "Foo", "No importer for op: Foo", "UNSUPPORTED_NODE")
    >>> describe_parser_issues([issue], "m.onnx").splitlines()[1]
    "- node '/a/Foo' (#7, op 'Foo'): No importer for op: Foo [UNSUPPORTED_NODE]"
    """
    if not issues:
        return (f"TensorRT's ONNX parser rejected model {model_name!r} without saying why; "
                "check the job's TensorRT log.")
    at_nodes = [issue for issue in issues if issue.node_index >= 0 or issue.node_name]
    plural = "s" if len(at_nodes) != 1 else ""
    count = f"{len(at_nodes)} node{plural}" if at_nodes else "graph level"
    lines = [f"TensorRT's ONNX parser rejected model {model_name!r} at {count}:"]
    for issue in issues[:_LISTED_PARSER_ISSUES]:
        if issue.node_index >= 0 or issue.node_name:
            where = (f"node {issue.node_name!r} (#{issue.node_index}, op {issue.op_type!r})"
                     if issue.node_name else f"node #{issue.node_index} (op {issue.op_type!r})")
        else:
            where = "model"
        lines.append(f"- {where}: {issue.message} [{issue.code}]")
    if len(issues) > _LISTED_PARSER_ISSUES:
        lines.append(f"... and {len(issues) - _LISTED_PARSER_ISSUES} more.")
    unsupported = sorted({issue.op_type for issue in issues
                          if issue.code == "UNSUPPORTED_NODE" and issue.op_type})
    for op in unsupported:
        lines.append(f"Op {op!r} has no TensorRT importer and no plugin registered under that "
                     "name: enable the FuseForge plugin for it, or drop the pass that emitted it.")
    return "\n".join(lines)
