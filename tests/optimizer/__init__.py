"""Tests for the optimizer library, mirroring optimizer/."""
