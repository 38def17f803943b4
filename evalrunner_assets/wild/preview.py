"""What the person sees before accepting: a terminal diff and a self-contained HTML page.

The left side (what happened, personal values highlighted) exists only in the person's own
terminal and in a private HTML file removed once they answer; the right side is exactly what
is written and sent. :func:`sent_summary` is the only text printed after acceptance: it holds
no original value.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class TracePreview:
    """One trace as the review shows it: per line, the original cut into runs of text and the
    values found in it (with their entity), and what is sent cut at its placeholders."""

    source: str  # the redacted source name
    format: str
    failure: str  # redacted
    original: list[list[tuple[str, str | None]]]  # per line: (text, entity found or None)
    sent: list[list[tuple[str, bool]]]  # per line: (text, is a placeholder)


_PLACEHOLDER = re.compile(r"(\{\{[a-z_]+_\d+\}\})")


def previews(originals: list[Trace] | None, redacted: list[Trace]) -> list[TracePreview]:
    """The review's two panes per trace; ``originals`` None leaves the left pane empty."""
    finder = Redactor()  # a separate one: marking must not change the placeholders issued
    out = []
    for i, r in enumerate(redacted):
        left = []
        for line in _lines(originals[i]) if originals is not None else []:
            runs: list[tuple[str, str | None]] = []
            last = 0
            for f in finder.find(line):
                runs += [(line[last : f.start], None), (line[f.start : f.end], f.entity)]
                last = f.end
            runs.append((line[last:], None))
            left.append([run for run in runs if run[0]])
        right = [
            [(part, bool(_PLACEHOLDER.fullmatch(part))) for part in _PLACEHOLDER.split(line) if part]
            for line in _lines(r)
        ]
        out.append(TracePreview(r.source, r.format, r.failure, left, right))
    return out


def html_page(originals: list[Trace] | None, redacted: list[Trace], evals: list[EvalFiles], redactor: Redactor) -> str:
    """A self-contained page (inline CSS, no script, nothing fetched). With ``originals`` None
    the left pane shows only the types found (for an unattended run: nobody reviews it)."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>evalrunner wild import</title>",
             f"<style>{_CSS}</style></head><body><h1>Evals from the wild: review before sending</h1>",
             f"<p class='note'>{html.escape(sent_summary(evals, redactor))}</p>"]  # fmt: skip
    for shown in previews(originals, redacted):
        if originals is not None:
            left = [
                "".join(
                    f"<mark title='{entity}'>{html.escape(text)}</mark>" if entity else html.escape(text)
                    for text, entity in line
                )
                for line in shown.original
            ]
        else:
            left = [html.escape(f"(originals not shown) found: {json.dumps(redactor.found, sort_keys=True)}")]
        right = [
            "".join(f"<span class='ph'>{html.escape(t)}</span>" if ph else html.escape(t) for t, ph in line)
            for line in shown.sent
        ]
        parts.append(
            f"<h2>{html.escape(shown.source)} ({shown.format}): {html.escape(shown.failure)}</h2><div class='pair'>"
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
