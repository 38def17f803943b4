"""The SWE agent loop calls its model over the network: a mocked LLM API (an OpenAI-compatible
HTTP server in the test, since no LLM is reachable here) serves ``/v1/chat/completions`` with
the simulated coding model's replies, and the loop reaches it through Inspect's
``openai-api/<service>/<model>`` provider with the agent version's ``model_base_url`` and the
``<SERVICE>_API_KEY`` environment variable. Everything else is real: Inspect's provider and
HTTP client, bubblewrap sandboxes, grading, the policy check, the lake.

A version served over HTTP must give the same attempts as the same behaviour served in-process
(``simcoder/<version>``); a stand-in that stalls past the step timeout stops the attempt with
``step_timeout`` and the attempt is still recorded. Also: ``max_steps`` counts tool calls, and
agent definitions with bad fields are refused with the version and field named."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.log import read_eval_log

from evalrunner_assets.execution.workspace_pool import WorkspacePool
from evalrunner_assets.swe import RunSpec, SweStore
from evalrunner_assets.swe.agent import EXAMPLE_DIR, AgentVersion
from evalrunner_assets.swe.example import build_tinystats_repo
from evalrunner_assets.swe.model import SweError
from evalrunner_assets.swe.runner import SweContext, execute_run, register_task_set
from evalrunner_assets.swe.simcoder import SimulatedCoder, reply_usage
from lake import open_lake
from tests.helpers.swe_example_subset import write_subset_task_set  # noqa: E402

API_KEY = "sk-test-standin"
SUBSET = ("mean-divisor", "median-even")


class MockLLMAPI:
    """An OpenAI-compatible chat-completions endpoint answering with the simulated coder's
    tool calls (stateless: task id from the prompt, step from the count of tool results, the
    attempt's seed from the request). ``stall_s`` > 0 makes every request wait that long."""

    def __init__(self, definition: Path) -> None:
        self.definition = definition
        self.requests: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.stall_s = 0.0
        self.released = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append(body)
                api.auth.append(self.headers.get("Authorization"))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if self.headers.get("Authorization") != f"Bearer {API_KEY}":
                    return self._send(401, {"error": {"message": "bad key", "code": "invalid_api_key"}})
                if api.stall_s and api.released.wait(api.stall_s):
                    return  # the test ended: drop the connection
                reply = api.reply(body)
                api.responses.append(reply)
                self._send(200, reply)

            def _send(self, code: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        coder = SimulatedCoder.load(self.definition, body["model"])
        messages = body["messages"]
        prompt = next(_text(m["content"]) for m in messages if m["role"] == "user")
        command = coder.next_command(prompt, sum(m["role"] == "tool" for m in messages), body.get("seed"))
        if command is None:
            message: dict[str, Any] = {"role": "assistant", "content": "Done."}
            reply_chars = len("Done.")
        else:
            call = {"id": f"call_{len(self.responses)}", "type": "function"}
            call["function"] = {"name": "bash", "arguments": json.dumps({"cmd": command})}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            reply_chars = len(command) + 16
        tokens_in, tokens_out = reply_usage(len(json.dumps(messages)), reply_chars)
        return {
            "id": f"chatcmpl-{len(self.responses)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop" if command is None else "tool_calls"}],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


@pytest.fixture
def mock_llm_api(tmp_path, monkeypatch):
    """The mocked LLM API, and an agent definition: the example's versions plus
    ``<version>-remote`` versions that call it as ``openai-api/standin/<version>``."""
    definition = tmp_path / "agent.json"
    api = MockLLMAPI(EXAMPLE_DIR / "agent.json")
    doc = json.loads((EXAMPLE_DIR / "agent.json").read_text())
    for version in ("better", "cheating"):
        doc["versions"][f"{version}-remote"] = {
            "model": f"openai-api/standin/{version}",
            "model_base_url": api.base_url,
            "price_in_per_mtok": 2.0,
            "price_out_per_mtok": 10.0,
            "max_tokens": 512,
            "max_retries": 0,
        }
    definition.write_text(json.dumps(doc))
    monkeypatch.setenv("EVALRUNNER_SWE_AGENT", str(definition))
    monkeypatch.setenv("STANDIN_API_KEY", API_KEY)
    api.thread.start()
    yield api
    api.released.set()
    api.server.shutdown()
    api.server.server_close()


@pytest.fixture
def swe_ctx(tmp_path, bwrap_backend):
    """The example repository, a task set of SUBSET's tasks registered in a fresh lake."""
    build_tinystats_repo(tmp_path / "repo")
    spec_file = write_subset_task_set(tmp_path / "set", SUBSET)
    ctx = SweContext(
        SweStore(open_lake(str(tmp_path / "lake"))), bwrap_backend, WorkspacePool(tmp_path / "ws"), tmp_path / "exp"
    )
    register_task_set(ctx, spec_file, str(tmp_path / "repo"))
    return ctx


@pytest.mark.slow
def test_an_agent_version_served_by_a_mocked_llm_api_over_http_runs_like_the_in_process_model(
    mock_llm_api, swe_ctx, tmp_path
):
    for version in ("cheating", "cheating-remote"):
        out = execute_run(swe_ctx, RunSpec(agent_version=version, task_set="tinystats-bugs", budget_usd=5.0))
        assert out.status == "done" and out.attempted == len(SUBSET), out.to_dict()
    store = swe_ctx.store
    rows = {(r["agent_version"], r["task_id"]): r for r in store.attempts()}

    for task in SUBSET:
        local, remote = rows[("cheating", task)], rows[("cheating-remote", task)]
        for col in ("status", "passed", "tests_passed_raw", "tests_passed", "tests_failed", "policy_reason", "steps"):
            assert remote[col] == local[col], (task, col)
        local_traj, remote_traj = store.trajectory("cheating", task, 0), store.trajectory("cheating-remote", task, 0)
        assert remote_traj["agent"]["model"] == "openai-api/standin/cheating"
        assert remote_traj["agent"]["stop_reason"] == "done"
        assert [s["action"] for s in remote_traj["agent"]["steps"]] == [
            s["action"] for s in local_traj["agent"]["steps"]
        ]
        assert remote_traj["patch"] == local_traj["patch"]
    # The cheating version's planted conftest.py and its look at git history are failed by policy.
    gamed = rows[("cheating-remote", "median-even")]
    assert gamed["status"] == "policy_failed" and gamed["tests_passed_raw"]
    assert "tests/conftest.py" in gamed["policy_reason"] and "git" in gamed["policy_reason"]
    assert rows[("cheating-remote", "mean-divisor")]["status"] == "passed"

    # Every model call went over HTTP, with the key from STANDIN_API_KEY, the bash tool, and
    # the attempt's seed; the model saw only the prompt and the tool results the harness sent.
    remote_trajs = [store.trajectory("cheating-remote", t, 0) for t in SUBSET]
    assert len(mock_llm_api.requests) == sum(t["agent"]["model_calls"] for t in remote_trajs)
    assert set(mock_llm_api.auth) == {f"Bearer {API_KEY}"}
    for body in mock_llm_api.requests:
        assert body["model"] == "cheating" and [t["function"]["name"] for t in body["tools"]] == ["bash"]
        assert isinstance(body["seed"], int) and body["max_tokens"] == 512
    last_request_of = {}
    for body in mock_llm_api.requests:
        task_id = next(_text(m["content"]) for m in body["messages"] if m["role"] == "user").split()[1]
        last_request_of[task_id] = body
    for task, traj in zip(SUBSET, remote_trajs):
        roles = [m["role"] for m in last_request_of[task]["messages"]]
        assert roles[:2] == ["system", "user"] and set(roles[2:]) <= {"assistant", "tool"}
        seen = [_text(m["content"]) for m in last_request_of[task]["messages"] if m["role"] == "tool"]
        assert seen == [s["observation"] for s in traj["agent"]["steps"]]

    # Each attempt is also an Inspect log (.eval, a lake blob): the same conversation and verdict.
    log_file = tmp_path / "median-even.eval"
    log_file.write_bytes(store.blob(store.trajectory("cheating-remote", "median-even", 0)["inspect_log"]))
    log = read_eval_log(str(log_file))
    assert log.status == "success" and log.eval.model == "openai-api/standin/cheating"
    (sample,) = log.samples or []
    assert sample.id == "median-even" and sample.scores["hidden_tests"].value == 0.0
    assert sample.scores["hidden_tests"].answer == "policy_failed"
    assert sample.metadata["commit"] == gamed["commit"] and sample.metadata["seed"] == gamed["seed"]
    assert [m.text for m in sample.messages if m.role == "tool"] == [
        s["observation"] for s in store.trajectory("cheating-remote", "median-even", 0)["agent"]["steps"]
    ]

    # Cost is the reported usage priced by the version's prices ($2 / $10 per million tokens).
    usage = [r["usage"] for r in mock_llm_api.responses]
    expected = sum(u["prompt_tokens"] * 2.0 + u["completion_tokens"] * 10.0 for u in usage) / 1e6
    spent = sum(rows[("cheating-remote", t)]["cost_usd"] for t in SUBSET)
    assert spent == pytest.approx(expected, rel=1e-6) and spent > 0
    assert sum(t["agent"]["tokens_in"] for t in remote_trajs) == sum(u["prompt_tokens"] for u in usage)


@pytest.mark.slow
def test_a_mocked_llm_api_that_stalls_past_the_step_timeout_stops_the_attempt_as_step_timeout(mock_llm_api, swe_ctx):
    mock_llm_api.stall_s = 30.0
    started = time.monotonic()
    spec = RunSpec(agent_version="better-remote", task_set="tinystats-bugs", budget_usd=5.0, step_timeout_s=0.5)
    out = execute_run(swe_ctx, spec, workers=2)
    elapsed = time.monotonic() - started
    assert out.status == "done" and out.attempted == len(SUBSET), out.to_dict()
    assert elapsed < 25, f"the run took {elapsed:.1f} s: the step timeout did not cut the stalled calls"
    assert len(mock_llm_api.requests) == len(SUBSET) and not mock_llm_api.responses
    for row in swe_ctx.store.attempts():
        traj = swe_ctx.store.trajectory("better-remote", row["task_id"], 0)
        assert traj["agent"]["stop_reason"] == "step_timeout" and traj["agent"]["steps"] == []
        assert row["steps"] == 0 and row["status"] == "failed" and not row["passed"]
        # A timed-out call stays booked at its reservation: its usage is unknown.
        assert row["cost_usd"] > 0


@pytest.mark.slow
def test_the_loop_stops_at_max_steps_tool_calls(swe_ctx):
    spec = RunSpec(agent_version="better", task_set="tinystats-bugs", budget_usd=5.0, max_steps=2)
    out = execute_run(swe_ctx, spec)
    assert out.attempted == len(SUBSET), out.to_dict()
    for row in swe_ctx.store.attempts():
        traj = swe_ctx.store.trajectory("better", row["task_id"], 0)
        assert row["steps"] == 2 and traj["agent"]["stop_reason"] == "max_steps"
        assert traj["agent"]["model_calls"] == 2 and row["status"] == "failed"


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ({"price_in_per_mtok": 1.0}, "'model' must name an Inspect model"),
        ({"model": "gpt-4o"}, "'model' must name an Inspect model"),
        ({"model": "openai/gpt-4o", "model_args": ["x"]}, "'model_args' must be an object"),
        ({"model": "openai/gpt-4o", "model_base_url": 8000}, "'model_base_url' must be a string"),
        ({"model": "openai/gpt-4o", "price_out_per_mtok": "cheap"}, "must be numbers"),
        ({"model": "openai/gpt-4o", "max_tokens": 0}, "'max_tokens' >= 1"),
    ],
)
def test_an_agent_version_with_a_bad_field_is_refused_naming_version_and_field(tmp_path, version, message):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"versions": {"v1": version}}))
    with pytest.raises(SweError, match="agent version 'v1'") as err:
        AgentVersion.load(path, "v1")
    assert message in str(err.value)


def test_unknown_versions_and_unreadable_definitions_are_refused(tmp_path):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"versions": {"real": {"model": "anthropic/claude-sonnet-4-5"}}}))
    with pytest.raises(SweError, match=r"agent version 'nope' is not defined .* \(known: real\)"):
        AgentVersion.load(path, "nope")
    # A version that calls a real model is not a simulated one: simcoder/<it> is refused.
    with pytest.raises(SweError, match="defines no simulated version 'real'"):
        SimulatedCoder.load(path, "real")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SweError, match="is not a readable JSON file"):
        AgentVersion.load(tmp_path / "bad.json", "real")
