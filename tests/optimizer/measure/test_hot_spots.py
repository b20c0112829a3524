"""The profile report: hot spots named with their origin, memory-bound time by the machine's
bandwidth, original nodes left unfused with the fusion report's refusal."""

from optimizer.measure.hot_spots import MEMORY_BOUND_FRACTION, ProfileInputs, profile_report
from optimizer.measure.node_profile import NodeProfile, NodeTime


def _profile(*nodes: NodeTime, latency_ms: float) -> NodeProfile:
    return NodeProfile(tuple(sorted(nodes, key=lambda n: -n.time_ms)), latency_ms=latency_ms,
                       profiled_run_ms=latency_ms * 1.1, runs=5)


ORIGINAL = _profile(NodeTime("conv", "Conv", 4.0, 1, 10**6), NodeTime("bn", "BatchNormalization",
                    1.0, 1, 2 * 10**6), NodeTime("relu", "Relu", 1.0, 1, 2 * 10**6),
                    NodeTime("pool", "MaxPool", 2.0, 1, 8 * 10**6), latency_ms=8.5)
# The fused conv moves 1 MB in 4 ms (0.25 GB/s); the pool 8 MB in 2 ms (4 GB/s).
ENGINE = _profile(NodeTime("fused_conv", "Conv", 4.0, 1, 10**6),
                  NodeTime("pool_nchwc", "MaxPool", 2.0, 1, 8 * 10**6),
                  NodeTime("reorder", "ReorderOutput", 0.5, 1, 0), latency_ms=7.0)


def _report(**changes: object) -> dict:  # type: ignore[type-arg]
    inputs = {
        "original": ORIGINAL, "engine": ENGINE,
        "original_op_types": {"conv": "Conv", "bn": "BatchNormalization", "relu": "Relu",
                              "pool": "MaxPool"},
        "original_provenance": {n: (n,) for n in ("conv", "bn", "relu", "pool")},
        "engine_provenance": {"fused_conv": ("conv", "bn", "relu"), "pool_nchwc": ("pool",),
                              "reorder": ()},
        "refusals": {"pool": "FusePoolRelu: no Relu follows"}, "float_reasons": {},
        "bandwidth_gb_s": 5.0, **changes}
    return profile_report(ProfileInputs(**inputs))  # type: ignore[arg-type]


def test_the_top_node_is_named_with_the_original_nodes_it_came_from() -> None:
    report = _report()

    top = report["top_nodes"][0]
    assert top["node"] == "fused_conv" and top["from"] == ["conv", "bn", "relu"]
    assert top["from_op_types"] == ["BatchNormalization", "Conv", "Relu"]
    assert top["share"] == round(4.0 / 6.5, 4)
    assert report["hot_spot"].startswith("fused_conv (Conv) takes 4 ms, 62%")
    assert "conv, bn, relu" in report["hot_spot"]


def test_time_by_op_type_compares_original_and_engine() -> None:
    rows = {row["op_type"]: row for row in _report()["by_op_type"]}

    assert rows["BatchNormalization"] == {"op_type": "BatchNormalization", "original_ms": 1.0,
                                          "engine_ms": 0.0}
    assert rows["ReorderOutput"]["original_ms"] == 0.0 and rows["Conv"]["engine_ms"] == 4.0


def test_a_node_near_the_bandwidth_counts_as_memory_bound() -> None:
    report = _report()

    # The pool reaches 4 GB/s of 5: above the threshold; the conv's 0.25 GB/s is not.
    assert 4.0 >= MEMORY_BOUND_FRACTION * 5.0
    by_node = {row["node"]: row for row in report["top_nodes"]}
    assert by_node["pool_nchwc"]["memory_bound"] is True
    assert by_node["fused_conv"]["memory_bound"] is False
    assert by_node["reorder"]["memory_bound"] is None  # no bytes recorded: unknown
    assert report["memory_bound"]["share"] == round(2.0 / 6.5, 4)
    assert _report(bandwidth_gb_s=None)["memory_bound"]["share"] is None


def test_an_original_node_that_reached_the_engine_alone_is_listed_with_its_refusal() -> None:
    report = _report()

    assert report["unfused"] == [{"node": "pool", "op_type": "MaxPool", "original_ms": 2.0,
                                  "engine_ms": 2.0, "refusal": "FusePoolRelu: no Relu follows"}]


def test_the_mapping_counts_engine_nodes_traced_to_no_original_node() -> None:
    mapping = _report()["mapping"]

    assert mapping["engine_nodes"] == 3 and mapping["engine_nodes_mapped"] == 2
    assert mapping["unmapped"] == ["reorder"] and mapping["original_nodes_reached"] == 4


def test_nodes_left_in_float_carry_their_reason_and_engine_time() -> None:
    report = _report(float_reasons={"pool": "no integer kernel"})

    assert report["in_float"] == [{"node": "pool", "op_type": "MaxPool", "original_ms": 2.0,
                                   "engine_ms": 2.0, "reason": "no integer kernel"}]
