"""``evalrunner candidates``: add a candidate configuration, list a repository's, measure them
(the frontier and the promotion gate)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from evalrunner_assets import home
from evalrunner_assets.cli.common import repo_id_of
from evalrunner_assets.cli.options import Add, add_backend, add_repo, add_workers, sandbox_override
from evalrunner_assets.errors import UserError

ADD = "candidates add"  # the command the option errors name


def _model_args(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--model-arg {pair!r} is not KEY=VALUE", command=ADD)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _agent_config_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs as overrides: each VALUE is parsed as YAML (so JSON too:
    ``[triage, runbook]``, ``'{"a": 1}'``, ``true``, ``3``; anything else is a string)."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {pair!r} is not KEY=VALUE", command=ADD)
        key = key.strip()
        if key in out:
            raise UserError(f"--set {key} is given twice", command=ADD)
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            from evalrunner_assets.discovery import yaml_problem

            raise UserError(f"--set {key}: {value!r} is not valid YAML ({yaml_problem(exc)})", command=ADD) from exc
    return out


def cmd_candidates(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver import candidates as candidates_run
    from evalrunner_assets.pipeline import candidates as cands
    from evalrunner_assets.report.frontier_markdown import (
        render_frontier_table,
        render_promotion,
        render_steps_table,
    )
    from lake import LAYOUT, open_lake

    repo_id = repo_id_of(args.repo, args.repo_id)
    from evalrunner_assets.driver.comparison import default_resources

    sandbox = sandbox_override(args)
    resources = default_resources(**({"sandbox": sandbox} if sandbox is not None else {}))
    the_lake = resources["lake"].open()
    # A bad candidate (CandidateError, an input error) ends in main's handler like every error.
    if args.action == "add":
        resources["repos"].register(the_lake, repo_id, args.repo)
        candidate = cands.Candidate(
            name=args.name,
            ref=args.ref,
            model=args.model,
            model_args=_model_args(args.model_arg),
            description=args.description,
            agent_config=_agent_config_overrides(args.set),
        )
        cands.parse_candidates(  # the same schema as the file: one set of rules
            {
                "version": 1,
                "reference": args.name,
                "candidates": [
                    {k: v for k, v in candidate.to_dict().items() if v is not None} | {"ref": args.ref or "HEAD"}
                ],
            },
            source="evalrunner candidates add",
        )
        resolved = candidates_run.add_candidate(resources, repo_id, candidate, reference=args.reference)
        print(f"added candidate {args.name} of {repo_id}: {the_lake.url(LAYOUT.candidate(repo_id, args.name))}")
        if resolved is not None and resolved.overrides is not None:
            print(
                f"its agent config overrides ({', '.join(candidate.agent_config)}) on {resolved.base_commit[:12]} "
                f"are commit {resolved.commit[:12]} ({resolved.overrides['git_ref']})"
            )
        return 0
    if args.action == "list":
        candidates_run.declare_from_repo(resources, repo_id, args.repo)
        reference, _ = cands.load_settings(the_lake, repo_id)
        for name, c in cands.load_candidates(the_lake, repo_id).items():
            where = cands.candidate_provenance(the_lake, repo_id, name).get("declared_in", "?")
            mark = " (reference)" if name == reference else ""
            model = c.model or "the agent config's model"
            overrides = f" · overrides {', '.join(c.agent_config)}" if c.agent_config else ""
            print(f"{name}{mark}: ref {c.ref or 'HEAD'}{overrides} · {model} · declared in {where}")
        return 0
    print(f"measuring the candidates of {repo_id}", flush=True)
    result = candidates_run.measure_candidates(repo_id, args.repo, names=args.name or None, resources=resources)
    for doc in result.measurements.values():
        print(cands.reading(doc))
    frontier = result.frontier
    print()
    print(render_frontier_table(frontier["rows"]))
    print(render_steps_table(frontier["steps"]))
    print(render_promotion(frontier["promotion"]))
    lake = open_lake(home.lake_root())
    print(f"chart: {lake.url(LAYOUT.continuum_frontier(repo_id, 'png'))}")
    print(f"gate : {lake.url(LAYOUT.promotion(repo_id))}")
    return 0


def add_parsers(add: Add) -> None:
    p = add("candidates", help="candidate configurations: add, list, measure (frontier + promotion gate)")
    actions = p.add_subparsers(dest="action", required=True)
    for action, text in (
        ("add", "store one candidate (a ref of the agent repo and a model)"),
        ("list", "list a repository's candidates (its .evals/candidates.yaml and added ones)"),
        ("measure", "measure candidates on the same inputs, then the frontier and the promotion gate"),
    ):
        q = actions.add_parser(action, help=text)
        add_repo(q)
        if action == "add":
            q.add_argument("--name", required=True, help="candidate name, e.g. runbook-skill")
            q.add_argument("--ref", default=None, help="branch, tag or SHA it runs (default: the default branch)")
            q.add_argument(
                "--model",
                default=None,
                help="Inspect model (default: the one the agent config at --ref names, else simagent/support-agent)",
            )
            q.add_argument("--model-arg", action="append", default=[], help="KEY=VALUE model argument (repeatable)")
            q.add_argument(
                "--set",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help="override a top-level key of the agent config at --ref, VALUE parsed as YAML/JSON, e.g. "
                "--set 'skills=[triage, status-updates, runbook]' (repeatable; not model/model_args: use --model)",
            )
            q.add_argument("--description", default="", help="what the candidate changes")
            q.add_argument("--reference", action="store_true", help="make it the reference candidate")
        if action == "measure":
            q.add_argument("--name", action="append", default=[], help="measure only this candidate (repeatable)")
            add_workers(q)
            add_backend(q)
        q.set_defaults(func=cmd_candidates)
