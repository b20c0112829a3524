"""Tests for the ONNX Runtime backend."""
