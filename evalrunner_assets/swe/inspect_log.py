"""An attempt as an Inspect log: one ``.eval`` file holding one sample (the task), with the
conversation the model saw (system prompt, task prompt, its replies and tool calls, the tool
results), its usage, the hidden-test verdict as the score and the attempt's reproducibility
columns as metadata, so ``inspect view`` and ``inspect_ai.log.read_eval_log`` read it.

The runner stores the bytes as a content-addressed blob and names the digest in the attempt's
trajectory document (``inspect_log``); the trajectory JSON stays the record the policy and the
API read.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, EvalStats, write_eval_log
from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant, ModelOutput, ModelUsage
from inspect_ai.scorer import Score

from evalrunner_assets.swe.agent import AgentOutcome, task_prompt
from evalrunner_assets.swe.model import SweTask

SCORER = "hidden_tests"


def attempt_eval_log(
    task: SweTask, row: dict[str, Any], outcome: AgentOutcome, started_at: str, completed_at: str
) -> bytes:
    """The ``.eval`` bytes of one graded attempt (``row`` is its attempt row)."""
    replies = [m for m in outcome.messages if isinstance(m, ChatMessageAssistant)]
    output = (
        ModelOutput(model=outcome.model, choices=[ChatCompletionChoice(message=replies[-1])])
        if replies
        else ModelOutput(model=outcome.model)
    )
    usage = ModelUsage(
        input_tokens=outcome.tokens_in,
        output_tokens=outcome.tokens_out,
        total_tokens=outcome.tokens_in + outcome.tokens_out,
        total_cost=outcome.cost_usd,
    )
    metadata = {
        k: row.get(k)
        for k in (
            "run_id",
            "agent_version",
            "task_set",
            "task_id",
            "sample_idx",
            "status",
            "repo",
            "commit",
            "env_digest",
            "prompt_version",
            "seed",
            "sandbox_id",
            "cost_usd",
            "exit_code",
        )
    }
    metadata["stop_reason"] = outcome.stop_reason
    sample = EvalSample(
        id=task.id,
        epoch=int(row["sample_idx"]) + 1,
        input=task_prompt(task),
        target=task.fail_to_pass,
        messages=list(outcome.messages),
        output=output,
        scores={
            SCORER: Score(
                value=1.0 if row["passed"] else 0.0,
                answer=row["status"],
                explanation="; ".join(r for r in (row.get("policy_reason"), row.get("reason")) if r) or None,
            )
        },
        metadata=metadata,
        model_usage={outcome.model: usage},
    )
    log = EvalLog(
        status="success",
        eval=EvalSpec(
            created=started_at,
            run_id=str(row["run_id"]),
            task=task.task_set,
            dataset=EvalDataset(name=task.task_set, samples=1, sample_ids=[task.id]),
            model=outcome.model,
            config=EvalConfig(),
            metadata={"agent_version": row["agent_version"]},
        ),
        stats=EvalStats(started_at=started_at, completed_at=completed_at, model_usage={outcome.model: usage}),
        samples=[sample],
    )
    with tempfile.TemporaryDirectory(prefix="evalrunner-swe-log-") as tmp:
        path = Path(tmp) / "attempt.eval"
        write_eval_log(log, str(path), format="eval")
        return path.read_bytes()
