"""The plan of a search: the rules that fire on the model, the candidates with each node
class's precision, and the refusals, before anything is built."""

from optimizer.registries.backends import Backend
from optimizer.registries.precisions import Precision
from optimizer.search.candidates import Candidate, SearchSpace
from optimizer.search.plan import node_class_precisions, search_plan
from optimizer.testing.models import small_cnn


def test_a_cnns_plan_names_the_fired_rules_and_each_candidates_precisions() -> None:
    plan = search_plan(small_cnn(seed=2, batch=1), [SearchSpace(Backend.ONNXRUNTIME)])
    fired = {rule["pass"] for rule in plan["rules"] if rule["applied"]}
    assert "fold_batch_norm" in fired
    assert plan["nodes_after"] < plan["nodes_before"]
    by_name = {c["name"]: c for c in plan["candidates"]}
    assert by_name["int8-dynamic/all"]["precisions"]["Gemm"] == "int8"
    assert by_name["int8-dynamic/all"]["precisions"]["Conv"] == "float (not quantized)"
    assert set(by_name["fp32/all"]["precisions"].values()) == {"fp32"}
    assert "int8-static" in {r["name"] for r in plan["refused"]}


def test_fp16_keeps_the_keep_lists_ops_in_fp32_with_the_reason() -> None:
    fp16 = Candidate("fp16/all", Precision.FP16, "all")
    precisions = node_class_precisions({"Conv": 2, "Softmax": 1}, fp16)
    assert precisions["Conv"] == "fp16"
    assert precisions["Softmax"].startswith("fp32 (kept: softmax statistics")
