"""tinystats: a few small numeric and text helpers (the bundled SWE-style example repository)."""
