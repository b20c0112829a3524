"""Tests for the inference backends."""
