"""Replace an `If` whose condition is a constant by the nodes of the branch it takes.

ONNX Runtime does the same at load (level basic and up) once constant folding has made the
condition a constant (a rank check on an input of declared rank, say); doing it here lets the
other passes see through the branch, and it is exact: the branch's nodes compute the same
values in the enclosing graph, and references to outer values stay as they are (values are
objects). Each value moved out of the branch (node outputs and initializers at the branch's top
level) is renamed when its name is used anywhere else in the model, because it now lives in the
enclosing scope, visible to every other subgraph there. The If's outputs are taken over by the
branch's outputs; where an If output is a graph output its name is kept (the branch value takes
it, or an Identity when the branch output is an outer value, an initializer or already an
output), so a subgraph's signature never changes. Works in the main graph and in Loop/Scan bodies;
an inlined branch's own Ifs with constant conditions are inlined in turn, to a fixed point.

An If inside a branch of an If whose condition is not constant (or inside a Loop body that
may run zero times: passes/may_never_run.py) is left alone: that code may never run, and
inlining would show ONNX Runtime's type inference the taken branch at load even with graph
optimizations disabled: a branch that cannot run at the model's fixed shapes (the
8 kHz LSTM of shape_models.lstm_in_nested_ifs, fed rank 4) would then fail to load where it
loaded before; left as an If, ONNX Runtime checks it only at level basic and up. For the same
reason a constant If is not inlined when its taken branch holds such code (an If whose
condition is not constant, a Loop or a Scan): inlining would lift it into the enclosing graph,
where ONNX Runtime checks its bodies at load with that graph's static shapes (silero-vad's
sample-rate If under its rank check did so, failing to load even at level disabled).
An initializer that is also a graph input can be overridden at run time, so it is no constant.
"""

from __future__ import annotations

from collections import Counter

import onnx_ir as ir

from optimizer.passes.matching import ONNX_DOMAINS
from optimizer.passes.may_never_run import may_skip_its_bodies

__all__ = ["inline_constant_ifs"]


def _graph_names(graph: ir.Graph) -> list[str]:
    names = [value.name for value in (*graph.inputs, *graph.outputs) if value.name]
    names += list(graph.initializers)
    names += [value.name for node in graph for value in node.outputs if value.name]
    return names


def _model_names(model: ir.Model) -> Counter[str]:
    names: Counter[str] = Counter()
    for graph in (model.graph, *model.graph.subgraphs()):
        names.update(set(_graph_names(graph)))  # a graph output is also a node output
    return names


def _constant_condition(node: ir.Node) -> bool | None:
    """The value of a constant If condition; None when it is not an ONNX If or not constant."""
    if node.domain not in ONNX_DOMAINS or node.op_type != "If" or not node.inputs:
        return None
    cond = node.inputs[0]
    if cond is None or cond.const_value is None or cond.is_graph_input():
        return None
    array = cond.const_value.numpy()
    return bool(array.reshape(-1)[0]) if array.size == 1 else None


class _Names:
    """Fresh names for moved values: a name used elsewhere in the model gets a suffix."""

    def __init__(self, model: ir.Model) -> None:
        self._counts = _model_names(model)

    def forget(self, graph: ir.Graph) -> None:
        """Free the names of a branch that is being dropped, and of its subgraphs."""
        for inner in (graph, *graph.subgraphs()):
            self._counts.subtract(set(_graph_names(inner)))

    def claim(self, value: ir.Value) -> None:
        name = value.name
        if not name or self._counts[name] <= 1:
            return
        self._counts[name] -= 1
        k = 1
        while self._counts[f"{name}_{k}"]:
            k += 1
        value.name = f"{name}_{k}"
        self._counts[value.name] += 1


def _move_initializers(branch: ir.Graph, graph: ir.Graph, names: _Names) -> None:
    for name in list(branch.initializers):
        value = branch.initializers.pop(name)
        names.claim(value)
        graph.register_initializer(value)


def _move_nodes(branch: ir.Graph, graph: ir.Graph, if_node: ir.Node, names: _Names) -> None:
    for node in list(branch):
        branch.remove(node)  # not safe: the node keeps its inputs and readers
        for value in node.outputs:
            names.claim(value)
        graph.insert_before(if_node, node)


def _take_over(if_out: ir.Value, branch_out: ir.Value, graph: ir.Graph, if_node: ir.Node,
               moved: set[ir.Value]) -> None:
    """Make readers of `if_out` read `branch_out`; a graph output keeps `if_out`'s name."""
    if branch_out.type is None:
        branch_out.type = if_out.type
    if branch_out.shape is None:
        branch_out.shape = if_out.shape
    if not if_out.is_graph_output():
        if_out.replace_all_uses_with(branch_out)
        return
    name = if_out.name
    if branch_out in moved and not branch_out.is_graph_output() and not branch_out.is_initializer():
        replacement = branch_out
    else:  # an outer value, an initializer or an output already: an Identity keeps the name
        identity = ir.node("Identity", [branch_out])
        graph.insert_before(if_node, identity)
        replacement = identity.outputs[0]
        replacement.type, replacement.shape = if_out.type, if_out.shape
    if_out.replace_all_uses_with(replacement, replace_graph_outputs=True)
    if_out.name = None
    replacement.name = name


def _detach(node: ir.Node) -> None:
    """Release the uses the If's remaining bodies hold on outer values."""
    for attr in node.attributes.values():
        if attr.is_ref() or attr.type != ir.AttributeType.GRAPH:
            continue
        for inner in ir.traversal.RecursiveGraphIterator(attr.as_graph()):
            for i in range(len(inner.inputs)):
                inner.replace_input_with(i, None)


def _owners(model: ir.Model) -> dict[ir.Graph, ir.Node]:
    """The node each subgraph of `model` belongs to."""
    owners: dict[ir.Graph, ir.Node] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for attr in node.attributes.values():
            if attr.is_ref() or attr.type not in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                continue
            bodies = [attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else attr.as_graphs()
            owners.update((body, node) for body in bodies)
    return owners


def _scope_chain(owners: dict[ir.Graph, ir.Node], graph: ir.Graph) -> list[ir.Graph]:
    """`graph` and the graphs enclosing it, innermost first."""
    chain = [graph]
    while chain[-1] in owners:
        outer = owners[chain[-1]].graph
        assert outer is not None
        chain.append(outer)
    return chain


def _in_a_branch(owners: dict[ir.Graph, ir.Node], graph: ir.Graph) -> bool:
    """Whether `graph` is an If branch or a Loop body that may not run, or inside one: code
    that runs only when picked (passes/may_never_run.py)."""
    return any(owners[inner].op_type == "If" or may_skip_its_bodies(owners[inner])
               for inner in _scope_chain(owners, graph) if inner in owners)


def _outer_value(model: ir.Model, graph: ir.Graph, name: str | None) -> ir.Value | None:
    """The value called `name` that code in `graph` sees (its own or an enclosing graph's)."""
    for scope in _scope_chain(_owners(model), graph):
        values = [*scope.inputs, *scope.initializers.values(),
                  *(value for node in scope for value in node.outputs)]
        found = [value for value in values if value.name == name]
        if found:
            return found[0]
    return None


def _resolved_outputs(model: ir.Model, branch: ir.Graph, graph: ir.Graph,
                      moved: set[ir.Value]) -> list[ir.Value] | None:
    """The branch's outputs; one that names an outer value is read back as a dangling value
    by onnx_ir, so look that value up by name. None if one cannot be found."""
    outputs = []
    for value in branch.outputs:
        if value in moved or value.is_initializer() or value.producer() is not None:
            outputs.append(value)
            continue
        outer = _outer_value(model, graph, value.name)
        if outer is None:
            return None
        outputs.append(outer)
    return outputs


def _inline(model: ir.Model, if_node: ir.Node, taken: bool, names: _Names) -> bool:
    graph = if_node.graph
    attr = if_node.attributes.get("then_branch" if taken else "else_branch")
    dropped = if_node.attributes.get("else_branch" if taken else "then_branch")
    if graph is None or attr is None or attr.is_ref() or dropped is None or dropped.is_ref():
        return False
    branch = attr.as_graph()
    if branch.inputs or len(branch.outputs) != len(if_node.outputs):
        return False  # not a valid If branch; leave it to the checker
    if any(_open_control_flow(node) for node in branch):
        return False  # see the module doc: it would lift code that may never run
    moved = {value for node in branch for value in node.outputs}
    branch_outputs = _resolved_outputs(model, branch, graph, moved)
    if branch_outputs is None:
        return False
    names.forget(dropped.as_graph())
    branch.outputs.clear()
    _move_initializers(branch, graph, names)
    _move_nodes(branch, graph, if_node, names)
    for if_out, branch_out in zip(list(if_node.outputs), branch_outputs, strict=True):
        _take_over(if_out, branch_out, graph, if_node, moved)
    _detach(if_node)
    graph.remove(if_node, safe=True)
    return True


def _open_control_flow(node: ir.Node) -> bool:
    """A Loop, Scan or If whose condition is not a constant: its bodies may never run."""
    if node.domain not in ONNX_DOMAINS:
        return False
    if node.op_type == "If":
        return _constant_condition(node) is None
    return node.op_type in ("Loop", "Scan")


def _next_constant_if(model: ir.Model, skipped: set[ir.Node]) -> tuple[ir.Node, bool] | None:
    owners = _owners(model)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        taken = _constant_condition(node)
        if taken is None or node in skipped or node.graph is None:
            continue
        if _in_a_branch(owners, node.graph):
            continue  # see the module doc: code that may never run is left as it is
        return node, taken
    return None


def inline_constant_ifs(model: ir.Model) -> int:
    """Inline every If with a constant condition, in every graph of `model`; returns how many.

    One at a time, each time looking again: an inlined branch may bring Ifs of its own.
    """
    count, skipped = 0, set[ir.Node]()
    while (found := _next_constant_if(model, skipped)) is not None:
        if _inline(model, *found, _Names(model)):  # names recounted: the graphs just changed
            count += 1
        else:
            skipped.add(found[0])
    return count
