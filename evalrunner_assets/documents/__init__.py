"""evalrunner's own JSON documents, the shapes the engine writes and the report, the CLI and the
sensors read: the codec (:mod:`.codec`) and the comparison document (:mod:`.comparison`).

They sit below both the engine (``pipeline``) and the report, which therefore import each
other's data without importing each other.
"""
