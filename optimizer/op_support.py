"""Refuse models whose opsets or operator domains the installed onnx and ONNX Runtime cannot load.

The ONNX checker accepts any opset number (it checked opset 10000 happily) and skips nodes of
domains it does not know, so such a model used to be stored and then failed its job when ONNX
Runtime refused it. What can be loaded is read from the installed packages: the newest opset
per domain that onnx and ONNX Runtime each know, the operators ONNX Runtime registers beyond
ONNX (`com.microsoft` contrib ops and its internal layout domains), and FuseForge's own plugin
ops (domain `fuseforge`). A node calling one of the model's local functions is the model's own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import onnx
import onnx.defs
import onnxruntime

from optimizer.errors import UnsupportedModelError
from optimizer.model.graphs import iter_nodes
from optimizer.plugins import DOMAIN as PLUGIN_DOMAIN
from optimizer.plugins import OPSET_VERSION as PLUGIN_OPSET_VERSION
from optimizer.plugins import PLUGINS

__all__ = ["OpSupport", "check_op_support", "installed_op_support"]

_DEFAULT_DOMAIN_ALIASES = ("", "ai.onnx")


@dataclass(frozen=True)
class OpSupport:
    """What can be loaded: newest opset per domain, per package, and the ops beyond ONNX's."""

    onnx_opsets: Mapping[str, int]  # domain ("" = default) -> newest opset the onnx package knows
    ort_opsets: Mapping[str, int]  # domain -> newest opset ONNX Runtime's schemas know
    ort_ops: Mapping[str, frozenset[str]]  # op types per domain ONNX Runtime adds to ONNX's
    plugin_opset: int
    plugin_ops: frozenset[str]

    def describe_domains(self) -> str:
        """The domains a node may use, for messages."""
        onnx_domains = ", ".join(repr(d) for d in sorted(self.onnx_opsets))
        ort_domains = ", ".join(repr(d) for d in sorted(self.ort_ops))
        return (f"ONNX ({onnx_domains}), ONNX Runtime ({ort_domains}) and FuseForge's plugins "
                f"({PLUGIN_DOMAIN!r})")


@lru_cache
def installed_op_support() -> OpSupport:
    """What the installed onnx and onnxruntime packages, and our plugins, can load."""
    onnx_opsets: dict[str, int] = defaultdict(int)
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain != PLUGIN_DOMAIN:  # registered with onnx.defs by optimizer.plugins
            onnx_opsets[schema.domain] = max(onnx_opsets[schema.domain], schema.since_version)
    # A release may add an opset without changing an op; onnx states its own newest ones.
    onnx_opsets[""] = onnx.defs.onnx_opset_version()
    onnx_opsets["ai.onnx.ml"] = onnx.defs.onnx_ml_opset_version()

    # ONNX Runtime refuses a model importing an opset newer than its schema registry knows
    # (model_load_utils.h, ValidateOpsetForDomain); Python does not expose that table, so the
    # newest since_version per domain stands in for it. A test holds the two equal.
    ort_opsets: dict[str, int] = defaultdict(int)
    ort_ops: dict[str, set[str]] = defaultdict(set)
    for ort_schema in onnxruntime.capi._pybind_state.get_all_operator_schema():
        domain = ort_schema.domain
        ort_opsets[domain] = max(ort_opsets[domain], ort_schema.since_version)
        if domain not in onnx_opsets:
            ort_ops[domain].add(ort_schema.name)
    return OpSupport(
        onnx_opsets=dict(onnx_opsets),
        ort_opsets=dict(ort_opsets),
        ort_ops={domain: frozenset(ops) for domain, ops in ort_ops.items()},
        plugin_opset=PLUGIN_OPSET_VERSION,
        plugin_ops=frozenset(plugin.op_type for plugin in PLUGINS.values()),
    )


def check_op_support(model: onnx.ModelProto, file_name: str,
                     support: OpSupport | None = None) -> None:
    """Refuse an opset newer than onnx or ONNX Runtime supports, or a node nothing implements.

    `file_name` is the upload's name, for messages; `support` defaults to what is installed.

    Raises:
        UnsupportedModelError: naming the opset (with both packages' newest) or the node.
    """
    support = support or installed_op_support()
    opset_imports = list(model.opset_import)
    for function in model.functions:
        opset_imports += function.opset_import
    _check_opsets(opset_imports, file_name, support)
    local_functions = {(function.domain, function.name) for function in model.functions}
    for node in iter_nodes(model):
        if (node.domain, node.op_type) not in local_functions:
            _check_node_domain(node, file_name, support)


def _check_opsets(opset_imports: Iterable[onnx.OperatorSetIdProto], file_name: str,
                  support: OpSupport) -> None:
    for opset in opset_imports:
        domain = "" if opset.domain in _DEFAULT_DOMAIN_ALIASES else opset.domain
        if domain == PLUGIN_DOMAIN:
            newest = {"FuseForge's plugins": support.plugin_opset}
        else:
            newest = {package: opsets[domain]
                      for package, opsets in ((f"onnx {onnx.__version__}", support.onnx_opsets),
                                              (f"ONNX Runtime {onnxruntime.__version__}",
                                               support.ort_opsets))
                      if domain in opsets}
        if not newest or opset.version <= min(newest.values()):
            continue  # an import of an unknown domain matters only if a node uses it
        name = "the default ONNX domain" if domain == "" else f"domain {domain!r}"
        supported = ", ".join(f"{package} up to opset {version}"
                              for package, version in newest.items())
        oldest_newest = min(newest.values())
        raise UnsupportedModelError(
            f"Model file {file_name!r} imports opset {opset.version} of {name}, newer than "
            f"the installed runtimes load ({supported}). Export the model at opset "
            f"{oldest_newest} or older (e.g. torch.onnx.export(..., opset_version={oldest_newest}))"
            " and upload that file.")


def _check_node_domain(node: onnx.NodeProto, file_name: str, support: OpSupport) -> None:
    domain = "" if node.domain in _DEFAULT_DOMAIN_ALIASES else node.domain
    if domain in support.onnx_opsets:
        return  # the ONNX checker knows these domains' ops and refuses unknown ones
    where = f"Model file {file_name!r}: node {node.name!r} (op {node.op_type!r}"
    if domain in support.ort_ops:
        if node.op_type in support.ort_ops[domain]:
            return
        raise UnsupportedModelError(
            f"{where} in domain {domain!r}) is not an operator ONNX Runtime "
            f"{onnxruntime.__version__} implements in that domain. Export the model with "
            "standard ONNX ops, or with ONNX Runtime's contrib ops as its tools write them.")
    if domain == PLUGIN_DOMAIN:
        if node.op_type in support.plugin_ops:
            return
        known = ", ".join(sorted(support.plugin_ops))
        raise UnsupportedModelError(
            f"{where}) claims FuseForge's plugin domain {PLUGIN_DOMAIN!r}, which has only: "
            f"{known}.")
    raise UnsupportedModelError(
        f"{where}) is in domain {domain!r}, which no installed runtime implements: only "
        f"{support.describe_domains()} ops can be loaded, besides the model's own local "
        "functions. Export the model with standard ONNX ops, or include the custom op as a "
        "local function.")
