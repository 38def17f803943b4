"""Where the workplace's shared/ folder is: beside the checkout (CI lays it there), else /work/shared."""

from __future__ import annotations

import os
from pathlib import Path


def shared_path(rel: str) -> Path:
    candidates = [
        Path(os.environ["EVALRUNNER_SHARED_DIR"]) if os.environ.get("EVALRUNNER_SHARED_DIR") else None,
        Path(__file__).resolve().parents[3] / "shared",
        Path("/work/shared"),
    ]
    for base in candidates:
        if base is not None and (base / rel).exists():
            return base / rel
    raise FileNotFoundError(f"shared/{rel} not found beside the checkout or at /work/shared")
