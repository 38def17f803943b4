"""Charts sized for the Dagster UI's metadata panel.

A materialization's metadata is stored in the event log and shown in a narrow column, so the
chart there is a small PNG at most :data:`PANEL_WIDTH` pixels wide (a full-size chart was
~1,300 × 400 pixels and ~200 KB for every comparison); the full chart stays in the lake beside
it, linked from the same metadata.
"""

from __future__ import annotations

import base64
import struct

PANEL_WIDTH = 480  # pixels: the Dagster asset sidebar's metadata column, with room for its padding


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, read from the PNG header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


def panel_png(spec: str) -> bytes:
    """``spec`` (Vega-Lite JSON) rendered as a PNG no wider than :data:`PANEL_WIDTH`: at 1× when
    it fits, else scaled down to fit (a chart laid out for the panel needs little or no scaling;
    text in a much wider one gets small, which is why each chart has a panel layout)."""
    import vl_convert as vlc

    png = vlc.vegalite_to_png(spec, scale=1)
    width, _ = png_size(png)
    if width <= PANEL_WIDTH:
        return png
    scale = (PANEL_WIDTH - 1) / width
    return vlc.vegalite_to_png(spec, scale=scale)


def markdown_image(alt_text: str, png: bytes) -> str:
    """A Markdown image carrying ``png`` inline (Dagster's metadata Markdown shows data URLs)."""
    return f"![{alt_text}](data:image/png;base64,{base64.b64encode(png).decode()})"
