"""Redaction of traces from the wild on two synthetic PII corpora: recall per planted kind (the
structured identifiers must reach 0.98), precision over the values redacted, and the time per
trace. The first corpus (bench/_wild_corpus.py) is the tests'; the second, the holdout
(bench/_pii_holdout.py), was written apart from the recognizers, in many more formats, and is
read through all three trace formats; on it a partial survival (a card's last four digits, a
surname, an email's local part) is a miss.

Recall: a planted value counts as caught when no trace of it remains in the redacted trace.
Precision: of the placeholders issued, the share whose original is (part of) a planted value or
one of the corpus's other personal values (dates/times); the rest redacted something harmless.

    python -m bench wild_redaction [--quick]
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

from bench._pii_holdout import measure
from bench._wild_corpus import leaks, write_corpus
from evalrunner_assets.wild import STRUCTURED, Redactor, read_traces

TARGET_RECALL = 0.98


def main(flags: list[str]) -> None:
    count = 40 if "--quick" in flags else 300
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.jsonl"
        corpus = write_corpus(path, count, seed=31)
        traces = read_traces(path)
    start = time.perf_counter()
    per_kind: dict[str, list[int]] = {}
    redactor = Redactor()
    redacted = []
    for trace, planted in zip(traces, corpus, strict=True):
        out = redactor.trace(trace)
        redacted.append(out)
        text = json.dumps([m.__dict__ for m in out.messages], default=str) + out.failure
        for p in planted.planted:
            removed = not leaks(text, [type(planted)(planted.record, [p])])
            per_kind.setdefault(p.kind, [0, 0])
            per_kind[p.kind][0] += int(removed)
            per_kind[p.kind][1] += 1
    elapsed = time.perf_counter() - start
    planted_values = {re.sub(r"[\s().-]", "", p.value).lower() for t in corpus for p in t.planted}
    true = false = 0
    others: list[str] = []
    for (_, value), _placeholder in redactor.mapping.items():
        if any(value and (value in v or v in value) for v in planted_values):
            true += 1
        else:
            false += 1
            others.append(value)
    print(
        f"{count} traces, {sum(n for _, n in per_kind.values())} planted values, {elapsed / count * 1000:.1f} ms/trace"
    )
    structured = [0, 0]
    for kind, (caught, n) in sorted(per_kind.items()):
        mark = "structured" if kind in STRUCTURED else ""
        print(f"  {kind:<15} recall {caught / n:.3f} ({caught}/{n}) {mark}")
        if kind in STRUCTURED:
            structured[0] += caught
            structured[1] += n
    recall = structured[0] / structured[1]
    print(f"structured identifiers: recall {recall:.3f} (target >= {TARGET_RECALL})")
    print(f"precision over distinct values redacted: {true / max(1, true + false):.3f} ({true} planted, {false} other)")
    if "--verbose" in flags:
        print("  not planted:", ", ".join(sorted(set(others))[:40]))
    holdout = _holdout(30 if "--quick" in flags else 150, "--verbose" in flags)
    if recall < TARGET_RECALL or holdout < TARGET_RECALL:
        raise SystemExit(f"recall {recall:.3f} / holdout {holdout:.3f} is below {TARGET_RECALL}")


def _holdout(count: int, verbose: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        m = measure(Path(tmp), count, seed=2026)
    print(f"holdout: {count} traces (chat JSONL, OTel spans, Inspect log), {sum(n for _, n in m.recall.values())} "
          f"planted values, {m.seconds / m.traces * 1000:.1f} ms/trace")  # fmt: skip
    for kind, (caught, n) in sorted(m.recall.items()):
        mark = "structured" if kind in STRUCTURED else ""
        print(f"  {kind:<15} recall {caught / n:.3f} ({caught}/{n}) {mark}")
    recall = m.structured_recall(STRUCTURED)
    print(f"holdout structured identifiers: recall {recall:.3f} (target >= {TARGET_RECALL})")
    print(
        f"holdout precision over distinct values redacted: {m.precision:.3f} ({m.true} planted, {len(m.false)} other)"
    )
    if verbose:
        print("  not planted:", ", ".join(sorted(set(m.false))[:40]))
        print("  left:", "; ".join(m.leaks[:40]))
    return recall
