"""Small, deterministic Inspect tasks and a model provider for lake tests and benchmarks.

Inspect's ``mockllm`` counts tokens with tiktoken, whose encoding file is downloaded on first
use (offline every sample errors), so this provider sets ``ModelOutput.usage`` itself. Every
number it reports is a function of the conversation, so tests can assert exact values:

- a sample whose input contains ``use tool`` first calls ``lookup(topic=<word after say>)``,
  then answers with the tool's result; any other sample answers at once;
- the answer is the word after ``say `` in the input;
- each generate call reports input_tokens = 10 × messages so far, output_tokens = 5,
  input_tokens_cache_read = 3, input_tokens_cache_write = 1, reasoning_tokens = 2.

Importing this module registers the ``lakeprobe`` model API (in-process only).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog
from inspect_ai.model import (
    ChatMessage,
    ChatMessageTool,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    get_model,
    modelapi,
)
from inspect_ai.scorer import Score, Target, includes, mean, scorer
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver, use_tools
from inspect_ai.tool import Tool, ToolChoice, ToolInfo, tool

CALL_INPUT_TOKENS_PER_MESSAGE = 10
CALL_OUTPUT_TOKENS = 5
CALL_CACHE_READ = 3
CALL_CACHE_WRITE = 1
CALL_REASONING = 2

_SAY = re.compile(r"say (\S+)")


def _text(message: ChatMessage) -> str:
    return message.text if hasattr(message, "text") else str(message.content)


class LakeProbeAPI(ModelAPI):
    """A scripted tool-calling model with exact, conversation-derived token usage."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),
        flaky: str = "",
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        # words answered wrongly on every second sample run that asks for them: with 2 epochs
        # exactly one of the two is correct, whatever order the epochs run in
        self.flaky = {w for w in flaky.split(",") if w}
        self.seen: dict[str, int] = {}

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        first_user = next((m for m in input if m.role == "user"), None)
        prompt = _text(first_user) if first_user is not None else ""
        match = _SAY.search(prompt)
        word = match.group(1) if match else "nothing"
        tool_results = [m for m in input if isinstance(m, ChatMessageTool)]
        if "use tool" in prompt and tools and not tool_results:
            output = ModelOutput.for_tool_call(
                model=self.model_name,
                tool_name="lookup",
                tool_arguments={"topic": word},
                tool_call_id=f"call-{word}",
            )
        else:
            answer = _text(tool_results[-1]) if tool_results else word
            if word.strip(".") in self.flaky and not tool_results:
                self.seen[word] = self.seen.get(word, 0) + 1
                if self.seen[word] % 2 == 0:
                    answer = "wrong"
            output = ModelOutput.from_content(model=self.model_name, content=f"ANSWER: {answer}")
        in_tokens = CALL_INPUT_TOKENS_PER_MESSAGE * len(input)
        output.usage = ModelUsage(
            input_tokens=in_tokens,
            output_tokens=CALL_OUTPUT_TOKENS,
            total_tokens=in_tokens + CALL_OUTPUT_TOKENS,
            input_tokens_cache_read=CALL_CACHE_READ,
            input_tokens_cache_write=CALL_CACHE_WRITE,
            reasoning_tokens=CALL_REASONING,
        )
        return output


@modelapi(name="lakeprobe")
def lakeprobe() -> type[ModelAPI]:
    return LakeProbeAPI


@tool
def lookup() -> Tool:
    async def execute(topic: str) -> str:
        """Look a topic up.

        Args:
            topic: What to look up.
        """
        return topic

    return execute


@solver
def explode_when_flagged() -> Solver:
    """Raise for samples whose metadata has ``explode``: an errored sample in the log."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if state.metadata.get("explode"):
            raise RuntimeError(f"planned failure for sample {state.sample_id}")
        return state

    return solve


@scorer(metrics=[mean()])
def answer_length() -> Any:
    """A second, numeric scorer: the answer's length divided by 10 (so several scorers exist)."""

    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=len(state.output.completion) / 10.0, answer=state.output.completion)

    return score


# (id, input, target, metadata): s2 answers wrong, s3 uses the tool, s4 errors.
PROBE_SAMPLES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("s1", "Please say apple.", "apple", {}),
    ("s2", "Please say pear.", "plum", {}),
    ("s3", "Please use tool and say fig.", "fig", {}),
    ("s4", "Please say kiwi.", "kiwi", {"explode": True}),
]


@task
def lake_probe(n: int | None = None, with_errors: bool = True) -> Task:
    """The probe task; ``n`` replaces the dataset with n trivial, always-correct samples."""
    if n is not None:
        dataset = [Sample(id=f"q{i:06d}", input=f"say w{i}", target=f"w{i}") for i in range(n)]
        return Task(dataset=dataset, solver=[generate()], scorer=includes())
    rows = PROBE_SAMPLES if with_errors else [r for r in PROBE_SAMPLES if not r[3]]
    dataset = [Sample(id=i, input=x, target=t, metadata=m) for i, x, t, m in rows]
    return Task(
        dataset=dataset,
        solver=[explode_when_flagged(), use_tools(lookup()), generate()],
        scorer=[includes(), answer_length()],
    )


def run_probe(
    log_dir: str | Path,
    *,
    log_format: str = "eval",
    epochs: int = 1,
    fail_on_error: bool | float = False,
    with_errors: bool = True,
    n: int | None = None,
    max_samples: int | None = None,
    flaky: str = "",
) -> EvalLog:
    """Run the probe task in-process and return its log (``log.location`` is the file)."""
    logs = eval(
        lake_probe(n=n, with_errors=with_errors),
        model=get_model("lakeprobe/probe-1", flaky=flaky),
        log_dir=str(log_dir),
        log_format=log_format,  # type: ignore[arg-type]
        epochs=epochs,
        fail_on_error=fail_on_error,
        display="none",
        max_samples=max_samples,
        log_level="error",
    )
    return logs[0]


def log_file_bytes(log: EvalLog) -> bytes:
    return Path(log.location).read_bytes()


_PROBE_LOGS: dict[str, dict[str, Path]] = {}


def probe_batch_key(repo: str, commit: str, epochs: int) -> Any:
    """The batch key a probe log lands under in the lake tests (one window of the probe's 4 samples)."""
    from lake import BatchKey, Window
    from lake.batch import RunSettings

    return BatchKey(
        repo=repo,
        commit=commit,
        task="qa/probe",
        spec="evals/probe.py@lake_probe",
        window=Window(0, 4),
        config_digest="cfg",
        backend="local-unsafe",
        runtime_digest="rt",
        settings=RunSettings(model="lakeprobe/probe-1", seed=7, epochs=epochs),
    )


def probe_logs(root: Path) -> dict[str, Path]:
    """Real Inspect logs for the lake tests, produced once per process under ``root``.

    - ``head``: .eval, 2 epochs, s4 errors in both, 'apple' (s1) is right in exactly one epoch;
    - ``base``: .json, 1 epoch, no erroring sample (s1..s3, all answered as asked);
    - ``failed``: .eval whose status is ``error`` (fail_on_error=True and s4 raises): the agent's
      failure, since the log's error is a sample's own exception;
    - ``harness_error``: the same log with its header error replaced by one no sample raised
      (as when the harness itself fails the eval): an infrastructure failure.
    """
    # produced once per process (the first root wins): Inspect runs are the slow part of the tests
    key = "logs"
    if key not in _PROBE_LOGS:
        head = run_probe(root / "head", epochs=2, flaky="apple")
        base = run_probe(root / "base", log_format="json", with_errors=False)
        failed = run_probe(root / "failed", fail_on_error=True)
        assert head.status == "success" and base.status == "success" and failed.status == "error"
        from inspect_ai.log import read_eval_log, write_eval_log

        harness = read_eval_log(failed.location)
        assert harness.error is not None
        message = "worker lost its connection to the controller"
        harness.error = harness.error.model_copy(update={"message": message, "traceback": message})
        harness_path = root / "harness" / "harness-error.eval"
        harness_path.parent.mkdir(parents=True, exist_ok=True)
        write_eval_log(harness, str(harness_path))
        _PROBE_LOGS[key] = {
            "head": Path(head.location),
            "base": Path(base.location),
            "failed": Path(failed.location),
            "harness_error": harness_path,
        }
    return _PROBE_LOGS[key]


# paired_samples for head = probe_logs()["head"], base = probe_logs()["base"]:
# (sample_id, head_score, base_score, delta, head_errors, base_errors, head_epochs, base_epochs)
EXPECTED_PAIRS = [
    ("s1", 0.5, 1.0, -0.5, 0, 0, 2, 1),  # right in one of two head epochs
    ("s2", 0.0, 0.0, 0.0, 0, 0, 2, 1),
    ("s3", 1.0, 1.0, 0.0, 0, 0, 2, 1),
    ("s4", 0.0, None, None, 2, 0, 2, 0),  # errored in both head epochs (scored 0), absent from base
]
