"""The path to a JSON body's too-deep value, found without recursion."""

from api.http.json_depth import too_deep_path


def test_the_path_names_the_keys_and_indices_down_to_the_too_deep_value() -> None:
    body = ('{"model_id": "m", "validation": {"samples": 2}, "input_ranges": {"x": [1, '
            + "[" * 100 + "]" * 100 + "]}}").encode()
    assert too_deep_path(body, limit=10) == ["input_ranges", "x", 1, 0, 0, 0, 0, 0, 0, 0]


def test_a_body_within_the_limit_and_strings_holding_brackets_are_not_too_deep() -> None:
    assert too_deep_path(b'{"a": {"b": [1, 2, {"c": "[[[[{{{{"}]}}', limit=4) is None
    assert too_deep_path(b'{"a": "quote \\" then [[[["}', limit=1) is None
    assert too_deep_path(b"[" * 100_000 + b"]" * 100_000, limit=64) == [0] * 64
    assert too_deep_path(b"not json at all", limit=1) is None
