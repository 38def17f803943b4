"""evalrunner wild import: the three trace formats, bad input (one line, exit 2, nothing
written), consistent placeholders, near-duplicates merged, the eval and its manifest entry."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from evalrunner_assets.cli import main
from evalrunner_assets.example_repo import build_example_repo
from evalrunner_assets.wild import Check, EmptyTrace, NoFailure, Redactor, UnknownTraceFormat, prepare, read_traces

CHAT = {
    "messages": [
        {"role": "user", "content": "I'm Maria Keller, order ORD-77341 was charged twice. Mail maria@globex.example."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "order_lookup", "arguments": "{\"order_id\": \"ORD-77341\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"customer\": \"Maria Keller\", \"charges\": 2}"},
        {"role": "assistant", "content": "Dear Maria Keller, there is one charge on ORD-77341."},
    ],
    "outcome": "failure",
    "reason": "denied a duplicate charge",
}  # fmt: skip


def _repo(tmp_path: Path) -> Path:
    return build_example_repo(tmp_path / "repo", variants=()).path


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _tree(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): p.read_text() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_chat_jsonl_one_conversation_per_line_and_one_message_per_line(tmp_path):
    per_line = _write(tmp_path / "a.jsonl", json.dumps(CHAT) + "\n" + json.dumps({**CHAT, "outcome": "success"}) + "\n")
    [trace] = read_traces(per_line)
    assert trace.format == "chat-jsonl" and trace.failure == "denied a duplicate charge"
    assert [m.role for m in trace.messages] == ["user", "assistant", "tool", "assistant"]
    assert trace.messages[1].tool_calls[0].name == "order_lookup"
    messages = "".join(json.dumps(m) + "\n" for m in CHAT["messages"]) + json.dumps({"outcome": "failed"}) + "\n"
    [flat] = read_traces(_write(tmp_path / "b.jsonl", messages))
    assert len(flat.messages) == 4


def _otlp(status_code: int) -> dict:
    def attr(k, v):
        return {"key": k, "value": {"stringValue": v}}

    chat = {
        "traceId": "ab" * 16,
        "name": "chat gpt-4o",
        "startTimeUnixNano": "1",
        "status": {"code": status_code},
        "attributes": [
            attr("gen_ai.operation.name", "chat"),
            attr("gen_ai.request.model", "gpt-4o"),
            attr(
                "gen_ai.input.messages",
                json.dumps(
                    [
                        {
                            "role": "user",
                            "parts": [{"type": "text", "content": "Refund order ORD-55123 for Jonas Okafor"}],
                        }
                    ]
                ),
            ),
            attr(
                "gen_ai.output.messages",
                json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [
                                {
                                    "type": "tool_call",
                                    "id": "t1",
                                    "name": "refund",
                                    "arguments": {"order_id": "ORD-55123"},
                                }
                            ],
                        }
                    ]
                ),
            ),
        ],
    }
    tool = {
        "traceId": "ab" * 16,
        "name": "execute_tool refund",
        "startTimeUnixNano": "2",
        "attributes": [
            attr("gen_ai.operation.name", "execute_tool"),
            attr("gen_ai.tool.name", "refund"),
            attr("gen_ai.tool.call.id", "t1"),
            attr("gen_ai.tool.call.result", "refund denied"),
        ],
    }
    return {"resourceSpans": [{"scopeSpans": [{"spans": [chat, tool]}]}]}  # fmt: skip


def test_otel_genai_spans_grouped_by_trace_and_failed_by_error_status(tmp_path):
    [trace] = read_traces(_write(tmp_path / "spans.json", json.dumps(_otlp(2))))
    assert trace.format == "otel-genai" and trace.metadata["model"] == "gpt-4o"
    assert trace.messages[0].content.startswith("Refund order ORD-55123")
    assert trace.messages[1].tool_calls[0].name == "refund"
    assert trace.messages[2].role == "tool" and trace.messages[2].content == "refund denied"
    with pytest.raises(NoFailure):
        read_traces(_write(tmp_path / "ok.json", json.dumps(_otlp(1))))


@pytest.mark.slow
def test_inspect_log_failed_samples_become_traces(tmp_path):
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import exact

    samples = [Sample(input="Say the order id of Maria Keller", target="ORD-77341"), Sample(input="x", target="")]
    [log] = eval(
        Task(dataset=samples, scorer=exact()), model="simagent/support-agent", log_dir=str(tmp_path), display="none"
    )
    traces = read_traces(Path(log.location))
    assert traces and all(t.format == "inspect" for t in traces)
    assert "ORD-77341" == traces[0].metadata["target"]


@pytest.mark.parametrize(
    ("text", "error", "says"),
    [
        ("", EmptyTrace, "empty"),
        ("hello, this is a bug report\n", UnknownTraceFormat, "line 1 is not JSON"),
        ('{"foo": 1}\n', UnknownTraceFormat, "neither a chat message"),
        ('{"messages": []}\n', EmptyTrace, "no conversation"),
        (json.dumps({**CHAT, "outcome": "success"}) + "\n", NoFailure, "none of its 1 conversation"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, text, error, says):
    repo = _repo(tmp_path)
    before = _tree(repo)
    bad = _write(tmp_path / "t.jsonl", text)
    with pytest.raises(error, match=says):
        read_traces(bad)
    good = _write(tmp_path / "good.jsonl", json.dumps(CHAT) + "\n")
    # A bad file among good ones: nothing of the good one is written either.
    code = main(["wild", "import", str(good), str(bad), "--repo", str(repo), "--expect-contains", "refund", "--yes"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[0].startswith("evalrunner wild import: ") and str(bad) in err[0] and len(err) <= 2
    assert _tree(repo) == before


def test_placeholders_are_consistent_across_a_trace():
    r = Redactor()
    out = r.trace(read_traces_from(CHAT))
    texts = [m.content for m in out.messages] + [c.arguments for m in out.messages for c in m.tool_calls]
    joined = "\n".join(texts)
    assert "Maria" not in joined and "ORD-77341" not in joined and "maria@globex" not in joined
    assert joined.count("{{person_1}}") == 3 and "{{person_2}}" not in joined
    assert joined.count("{{order_id_1}}") == 3


def read_traces_from(record: dict):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return read_traces(_write(Path(tmp) / "t.jsonl", json.dumps(record) + "\n"))[0]


def test_near_duplicates_are_one_eval_counting_its_sources(tmp_path):
    other = json.loads(json.dumps(CHAT).replace("Maria Keller", "Jonas Okafor").replace("ORD-77341", "ORD-11223"))
    different = {**CHAT, "messages": [{"role": "user", "content": "The status page shows the wrong incident time."},
                                      {"role": "assistant", "content": "It is correct."}]}  # fmt: skip
    path = _write(tmp_path / "t.jsonl", "".join(json.dumps(r) + "\n" for r in (CHAT, other, different)))
    sub = prepare([path], scorer=Check("contains", "refund"), cohort="customer-reported/2026-Q4")
    assert sorted(e.sources for e in sub.evals) == [1, 2]


def test_the_eval_is_written_with_its_manifest_entry_and_cohort(tmp_path, capsys):
    repo = _repo(tmp_path)
    path = _write(tmp_path / "t.jsonl", json.dumps(CHAT) + "\n")
    code = main(["wild", "import", str(path), "--repo", str(repo), "--expect-tool", "refund", "--yes",
                 "--cohort", "customer-reported/2026-Q4", "--name", "duplicate_charge"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    listing = subprocess.run([str(repo / ".evals/list")], capture_output=True, text=True, check=True).stdout
    tasks = {t["id"]: t for t in json.loads(listing)["tasks"]}
    assert tasks["wild/duplicate_charge"]["cohort"] == "customer-reported.2026-q4"
    assert tasks["wild/duplicate_charge"]["spec"] == "evals/wild/duplicate_charge.py@duplicate_charge"
    data = json.loads((repo / "evals/wild/duplicate_charge.json").read_text())
    assert data["scorer"] == {"type": "check", "kind": "tool", "value": "refund"} and data["sources"] == 1
    assert data["samples"][0]["tools"]["order_lookup"][0]["result"] == '{"charges": 2, "customer": "{{person_1}}"}'
    # The task file is valid Python that Inspect can load.
    subprocess.run([sys.executable, "-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())",
                    str(repo / "evals/wild/duplicate_charge.py")], check=True)  # fmt: skip


def test_not_accepted_nothing_written_and_the_html_preview_removed(tmp_path, monkeypatch, capsys):
    repo = _repo(tmp_path)
    before = _tree(repo)
    path = _write(tmp_path / "t.jsonl", json.dumps(CHAT) + "\n")
    seen = {}
    # The preview goes to the temporary directory: make it this test's, so no other test's
    # (or another worker's) preview can be the one found.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def answer(prompt: str) -> str:
        import glob

        [page] = glob.glob(f"{tmp_path}/evalrunner-wild-*.html")
        seen["page"] = Path(page)
        seen["html"] = Path(page).read_text()
        return "n"

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", answer)
    code = main(["wild", "import", str(path), "--repo", str(repo), "--expect-contains", "refund", "--html"])
    out = capsys.readouterr().out
    assert code == 0 and "nothing written or sent" in out
    assert "[Maria Keller]" in out and "+ user: I'm {{person_1}}" in out  # the diff, before the answer
    assert "<mark title='PERSON'>Maria Keller</mark>" in seen["html"] and "<script" not in seen["html"]
    assert "http" not in seen["html"].split("<body>")[0]  # no CDN: the page fetches nothing
    assert not seen["page"].exists()
    assert _tree(repo) == before


def test_without_a_terminal_it_needs_yes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    path = _write(tmp_path / "t.jsonl", json.dumps(CHAT) + "\n")
    assert main(["wild", "import", str(path), "--repo", str(tmp_path), "--expect-contains", "x"]) == 2
    assert "--yes" in capsys.readouterr().err
