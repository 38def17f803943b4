"""GitHub-flavoured Markdown table checks with markdown-it-py (tables enabled, as GFM renders).

A GFM table whose header and delimiter rows differ in cell count is not a table at all (GitHub
shows the raw pipes), and a body row with extra cells loses them silently. So each table the
parser finds is re-split by GFM's cell rule (unescaped ``|``) and its rows compared, and every
pipe-led line the parser did not take into a table is reported."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

# GFM (and markdown-it) read any "\|" in a table row as a literal pipe, whatever precedes it.
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def _gfm() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def cells(line: str) -> list[str]:
    """A table line's cells by GFM's rule: split on pipes not directly after a backslash."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    parts, start = [], 0
    for m in _UNESCAPED_PIPE.finditer(text):
        end = m.end() - 1
        parts.append(text[start:end])
        start = m.end()
    parts.append(text[start:])
    return [p.strip() for p in parts]


def table_problems(markdown: str) -> list[str]:
    """What is wrong with the tables of ``markdown`` (empty when every table is well formed)."""
    lines = markdown.splitlines()
    tokens = _gfm().parse(markdown)
    problems: list[str] = []
    covered: set[int] = set()
    for i, tok in enumerate(tokens):
        if tok.type != "table_open" or tok.map is None:
            continue
        first, last = tok.map
        covered.update(range(first, last))
        header, delimiter, *body = lines[first:last]
        n = len(cells(header))
        if len(cells(delimiter)) != n:
            problems.append(f"line {first + 2}: {len(cells(delimiter))} delimiter cells for {n} header cells")
        for offset, row in enumerate(body, start=first + 3):
            if row.strip() and len(cells(row)) != n:
                problems.append(f"line {offset}: {len(cells(row))} cells in a row of a {n}-column table: {row[:120]}")
        # The parser's own reading: every row renders exactly n cells.
        depth_cells, row_cells = 0, []
        for t in tokens[i + 1 :]:
            if t.type == "table_close":
                break
            if t.type == "tr_open":
                depth_cells = 0
            elif t.type in ("th_open", "td_open"):
                depth_cells += 1
            elif t.type == "tr_close":
                row_cells.append(depth_cells)
        if any(c != n for c in row_cells):
            problems.append(f"line {first + 1}: parsed rows have {row_cells} cells, header has {n}")
    for number, line in enumerate(lines):
        if line.lstrip().startswith("|") and number not in covered:
            problems.append(f"line {number + 1}: a pipe table line GFM does not render as a table: {line[:120]}")
    return problems
