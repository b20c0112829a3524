"""HTTP routes: each parses, calls one service function and returns a schema."""
