"""Skill fixes from findings: the miner's pattern, written as a rule in the skill it points at.

A finding names what failing trajectories do that passing ones do not ("never calls
runbook_search", "page_oncall without service_owner first"). The template fixer turns the first
finding it has a rule for into one bullet under a "Learned from failing trajectories" section of
the skill file that teaches the tool; the PR that carries it states the evidence (counts, lift,
q-value, sample ids), so the evals judge the edit like any other change and the number on the PR
says whether the pattern was the cause. A fixer is anything with ``propose``; a model-written
edit would be one more, called through the model gateway.

Which skill: a skill file (``SKILL.md``, or Markdown under a ``skills/`` folder) inside the task's
manifest paths that names the tool. When several do, the one whose text the agent was actually
given (found in a failing sample's messages) wins; when that cannot tell, the user names it.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evalrunner_assets.errors import UserError
from evalrunner_assets.mining.lake_findings import SOURCE, Mined
from evalrunner_assets.mining.miner import Finding

SECTION = "## Learned from failing trajectories"
# The PR label (and the first line of its description) that says who wrote the edit.
AUTHOR_LABEL = f"authored by {SOURCE}"


class NoFixableFinding(UserError):
    """No finding has a rule the fixer can write, or no skill file names its tool."""


@dataclass(frozen=True)
class SkillFix:
    """One proposed edit of one skill file, and the finding it answers."""

    task: str
    commit: str
    path: str  # the skill file, relative to the checkout, POSIX
    before: str
    after: str
    rule: str  # the bullet added
    finding: Finding

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=f"a/{self.path}",
                tofile=f"b/{self.path}",
            )
        )


class Fixer(Protocol):
    """Proposes a skill edit for a mining run (the template fixer; a model-written one)."""

    def propose(self, mined: Mined, checkout: Path, task_paths: Sequence[str]) -> SkillFix: ...


def rule_for(finding: Finding) -> str | None:
    """The rule that answers ``finding``, or None when the template has none for its kind
    (raised errors, limits, long tails: those need a person or a model, not a template)."""
    f = finding.feature
    tools = [f"`{t}`" for t in f.tools]
    if f.kind == "never_calls":
        return (
            f"Always call {tools[0]} before you answer; do not answer from memory. Put the most specific "
            f"identifiers from the request (ids, error codes, names) in the query or arguments you pass it."
        )
    if f.kind == "without_first":
        first, then = tools
        return f"Before you call {then}, call {first} and use what it returns."
    if f.kind == "before":
        first, then = tools
        return f"Call {then} before {first}."
    if f.kind == "tool_error":
        return (
            f"When {tools[0]} returns an error, read it, correct the arguments and call it again; never answer "
            f"as if it had succeeded."
        )
    if f.kind == "repeats":
        times = re.search(r"(\d+)\+ times", f.name)
        most = int(times.group(1)) - 1 if times else 1
        return (
            f"Call {tools[0]} at most {most} time(s) per request; if it does not give you what you need, say "
            f"what is missing instead of calling it again."
        )
    if f.kind == "calls":
        return f"Call {tools[0]} only when the request needs it."
    return None


def skill_files(checkout: Path) -> list[str]:
    """Skill files of the checkout: every ``SKILL.md`` and every Markdown file under a ``skills/``
    folder (relative POSIX paths, sorted; ``.git`` is skipped)."""
    found = set()
    for path in checkout.rglob("*.md"):
        rel = path.relative_to(checkout)
        if ".git" in rel.parts:
            continue
        if path.name == "SKILL.md" or "skills" in rel.parts[:-1]:
            found.add(rel.as_posix())
    return sorted(found)


def _in_paths(rel: str, task_paths: Sequence[str]) -> bool:
    return not task_paths or any(fnmatch.fnmatch(rel, pattern) for pattern in task_paths)


def _body(text: str) -> str:
    """A skill's text without its front matter."""
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            return text[end + 4 :]
    return text


def _seen_share(skill_text: str, prompts: Iterable[str]) -> float:
    """Share of the skill's paragraphs (30+ characters; whitespace does not count) that appear in
    any of ``prompts``: how surely the agent was given this skill."""
    chunks = (re.sub(r"\s+", " ", chunk).strip() for chunk in re.split(r"\n\s*\n", skill_text))
    paragraphs = [p for p in chunks if len(p) >= 30]
    if not paragraphs:
        return 0.0
    flat = [re.sub(r"\s+", " ", text) for text in prompts]
    return sum(any(p in text for text in flat) for p in paragraphs) / len(paragraphs)


@dataclass
class TemplateFixer:
    """The default fixer: a rule per feature kind (``rule_for``) in the skill that names the tool.
    ``prompts`` are texts the agent was given on failing samples (system messages), used only to
    choose between several skills that name the tool; ``skill`` forces the file."""

    prompts: Sequence[str] = ()
    skill: str | None = None

    def propose(self, mined: Mined, checkout: Path, task_paths: Sequence[str]) -> SkillFix:
        findings = mined.contrast.findings
        if not findings:
            raise NoFixableFinding(f"{mined.task} at {mined.commit[:12]}: the miner found no pattern to fix")
        reasons = []
        for finding in findings:
            rule = rule_for(finding)
            if rule is None:
                reasons.append(f"{finding.feature.name!r}: no template for {finding.feature.kind}")
                continue
            path = self._skill_for(finding, checkout, task_paths)
            if path is None:
                reasons.append(
                    f"{finding.feature.name!r}: no skill file in the task's paths names {finding.feature.tools[0]}"
                )
                continue
            before = (checkout / path).read_text(encoding="utf-8")
            if rule in before:
                reasons.append(f"{finding.feature.name!r}: {path} already has the rule")
                continue
            return SkillFix(mined.task, mined.commit, path, before, add_rule(before, rule), rule, finding)
        raise NoFixableFinding(
            f"{mined.task} at {mined.commit[:12]}: no finding can be fixed by the template ({'; '.join(reasons)})"
        )

    def _skill_for(self, finding: Finding, checkout: Path, task_paths: Sequence[str]) -> str | None:
        if self.skill is not None:
            if not (checkout / self.skill).is_file():
                raise UserError(f"--skill {self.skill}: no such file in {checkout}")
            return self.skill
        tool = finding.feature.tools[0]
        named = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(tool)}(?![A-Za-z0-9_])")
        candidates = [
            rel
            for rel in skill_files(checkout)
            if _in_paths(rel, task_paths) and named.search((checkout / rel).read_text(encoding="utf-8"))
        ]
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        seen = {
            rel: _seen_share(_body((checkout / rel).read_text(encoding="utf-8")), self.prompts) for rel in candidates
        }
        best = max(seen.values())
        chosen = [rel for rel, share in seen.items() if share == best]
        if best > 0 and len(chosen) == 1:
            return chosen[0]
        raise UserError(
            f"several skill files name {tool} ({', '.join(candidates)}) and the trajectories do not tell which one "
            f"the agent was given; choose one with --skill"
        )


def add_rule(text: str, rule: str) -> str:
    """``text`` with ``rule`` as a bullet of its "Learned from failing trajectories" section
    (added at the end when missing)."""
    bullet = f"- {rule}\n"
    body = text if text.endswith("\n") else text + "\n"
    at = body.find(SECTION + "\n")
    if at == -1:
        return f"{body}\n{SECTION}\n{bullet}"
    end = at + len(SECTION) + 1
    nxt = re.search(r"^#{1,2} ", body[end:], flags=re.M)
    insert = end + nxt.start() if nxt else len(body)
    head = body[:insert].rstrip("\n") + "\n"
    return head + bullet + ("\n" + body[insert:] if nxt else "")


def branch_name(fix: SkillFix) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", f"{fix.task} {fix.finding.feature.name}".lower()).strip("-")[:60]
    return f"{SOURCE}/{slug}-{fix.commit[:8]}"


def pr_title(fix: SkillFix) -> str:
    f = fix.finding
    return f"{fix.task}: {fix.rule.split(';')[0].rstrip('.')} ({f.failing_with}/{f.failing} failing samples)"


def pr_body(fix: SkillFix, mined: Mined) -> str:
    f = fix.finding
    c = mined.contrast
    lift = "∞" if f.lift == float("inf") else f"{f.lift:.1f}"
    against = f" on the inputs it fails and {mined.base[:12]} passes" if mined.base else ""
    shown = ", ".join(f"`{s}`" for s in f.samples[:20]) + (" …" if len(f.samples) > 20 else "")
    also = f" (the same samples: {', '.join(f.aliases)})" if f.aliases else ""
    lines = [
        f"**{AUTHOR_LABEL}**",
        "",
        f"> {f.headline}{also}",
        "",
        f"- Mined: `{fix.task}` at `{fix.commit[:12]}`{against}: {c.failing} failing and {c.passing} passing "
        f"trajectories, {c.tested} features tested.",
        f"- Evidence: lift {lift}, one-sided Fisher exact p {f.p_value:.2g}, Benjamini–Hochberg q {f.q_value:.2g} "
        f"(false discovery rate {c.fdr:g}).",
        f"- Failing samples with the pattern: {shown}",
        "",
        f"The edit adds one rule to `{fix.path}` (section *{SECTION.lstrip('# ')}*):",
        "",
        f"> {fix.rule}",
        "",
        "The evals judge this PR like any other change: the verdict below says whether the pattern was the cause.",
    ]
    return "\n".join(lines) + "\n"


class PullRequestOpener(Protocol):
    """What opens the PR (``resources.github.GitHubClient`` does)."""

    def open_files_pr(
        self,
        repo: str,
        *,
        branch: str,
        files: dict[str, str],
        message: str,
        title: str,
        body: str,
        base: str | None = None,
        labels: Sequence[str] = (),
    ) -> Any: ...


def open_fix_pr(opener: PullRequestOpener, repo_id: str, fix: SkillFix, mined: Mined, base: str | None = None) -> Any:
    """Open the fix as a branch and PR on ``repo_id``, labelled ``authored by trajectory-miner``."""
    return opener.open_files_pr(
        repo_id,
        branch=branch_name(fix),
        files={fix.path: fix.after},
        message=f"{fix.path}: {fix.rule.split(';')[0].rstrip('.')} (trajectory miner: {fix.finding.feature.name})",
        title=pr_title(fix),
        body=pr_body(fix, mined),
        base=base,
        labels=(AUTHOR_LABEL,),
    )
