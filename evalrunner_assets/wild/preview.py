"""What the person sees before accepting: a terminal diff and a self-contained HTML page.

The left side (what happened, personal values highlighted) exists only in the person's own
terminal and in a private HTML file removed once they answer; the right side is exactly what
is written and sent. :func:`sent_summary` is the only text printed after acceptance: it holds
no original value.
"""

from __future__ import annotations

import html
import json

from evalrunner_assets.wild.eval_writer import EvalFiles
from evalrunner_assets.wild.formats import Trace
from evalrunner_assets.wild.redact import Redactor

_RED, _GREEN, _YELLOW, _RESET = "\033[31m", "\033[32m", "\033[33m", "\033[0m"


def _lines(trace: Trace) -> list[str]:
    out = []
    for m in trace.messages:
        if m.content:
            out.append(f"{m.role}{f' ({m.name})' if m.name else ''}: {m.content}")
        for c in m.tool_calls:
            out.append(f"{m.role} calls {c.name}({c.arguments})")
    return out


def terminal_diff(originals: list[Trace], redacted: list[Trace], color: bool = False) -> str:
    """``-`` lines: the original with each value found marked; ``+`` lines: what is sent."""
    finder = Redactor()  # a separate one: marking must not change the placeholders issued
    out: list[str] = []
    for o, r in zip(originals, redacted, strict=True):
        out.append(f"=== {o.source} ({o.format}): {r.failure}")
        for before, after in zip(_lines(o), _lines(r), strict=False):
            if before == after:
                out.append(f"  {before}")
                continue
            marked, last = [], 0
            for f in finder.find(before):
                marked.append(before[last : f.start])
                value = before[f.start : f.end]
                marked.append(f"{_YELLOW}[{value}]{_RED}" if color else f"[{value}]")
                last = f.end
            marked.append(before[last:])
            minus, plus = "".join(marked), after
            out.append(f"{_RED}- {minus}{_RESET}" if color else f"- {minus}")
            out.append(f"{_GREEN}+ {plus}{_RESET}" if color else f"+ {plus}")
    return "\n".join(out)


def sent_summary(evals: list[EvalFiles], redactor: Redactor) -> str:
    """What is written and sent, by count and type: no original value."""
    found = ", ".join(f"{n} {entity.lower()}" for entity, n in sorted(redactor.found.items())) or "nothing"
    lines = [f"redacted: {found}"]
    for e in evals:
        scorer = e.scorer.get("kind", e.scorer["type"])
        lines.append(
            f"eval {e.task_id}: cohort {e.cohort} ({e.entry['cohort']} in .evals/list), {e.sources} source(s), scorer {scorer}"
        )
        lines += [f"  {path}" for path in e.files]
    return "\n".join(lines)


_CSS = """body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.3em}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1em;margin-bottom:2em}
.pane{border:1px solid #ccc;border-radius:6px;padding:.8em;white-space:pre-wrap;font-family:ui-monospace,monospace}
.pane h2{font:600 13px system-ui;margin:0 0 .5em}mark{background:#ffd54f}.ph{background:#c8e6c9}
.note{color:#555}"""


def html_page(originals: list[Trace] | None, redacted: list[Trace], evals: list[EvalFiles], redactor: Redactor) -> str:
    """A self-contained page (inline CSS, no script, nothing fetched). With ``originals`` None
    the left pane shows only the types found (for an unattended run: nobody reviews it)."""
    finder = Redactor()
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>evalrunner wild import</title>",
             f"<style>{_CSS}</style></head><body><h1>Evals from the wild: review before sending</h1>",
             f"<p class='note'>{html.escape(sent_summary(evals, redactor))}</p>"]  # fmt: skip
    for i, r in enumerate(redacted):
        left = []
        if originals is not None:
            for line in _lines(originals[i]):
                last, chunk = 0, []
                for f in finder.find(line):
                    chunk.append(html.escape(line[last : f.start]))
                    chunk.append(f"<mark title='{f.entity}'>{html.escape(line[f.start : f.end])}</mark>")
                    last = f.end
                chunk.append(html.escape(line[last:]))
                left.append("".join(chunk))
        else:
            left.append(html.escape(f"(originals not shown) found: {json.dumps(redactor.found, sort_keys=True)}"))
        right = [
            html.escape(line).replace("{{", "<span class='ph'>{{").replace("}}", "}}</span>") for line in _lines(r)
        ]
        parts.append(
            f"<h2>{html.escape(r.source)} ({r.format}): {html.escape(r.failure)}</h2><div class='pair'>"
            f"<div class='pane'><h2>What happened (personal data highlighted)</h2>{'<br>'.join(left)}</div>"
            f"<div class='pane'><h2>What is sent</h2>{'<br>'.join(right)}</div></div>"
        )
    for e in evals:
        parts.append(
            f"<h2>{html.escape(e.task_id)}</h2><p>cohort <code>{html.escape(e.cohort)}</code>, {e.sources} source(s), "
            f"scorer <code>{html.escape(json.dumps(e.scorer))}</code></p>"
        )
    parts.append("</body></html>")
    return "".join(parts)
