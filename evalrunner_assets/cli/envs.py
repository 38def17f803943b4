"""``evalrunner envs prune``: delete the Kubernetes environment claims past their retention."""

from __future__ import annotations

import argparse

from evalrunner_assets.cli.options import Add, Parser
from evalrunner_assets.errors import UserError


def cmd_envs(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from evalrunner_assets.execution.kubernetes import KubernetesBackend, KubernetesSandboxConfig
    from resources import SandboxResource

    try:
        sandbox = SandboxResource.from_env()
    except ValueError as exc:
        raise UserError(str(exc), hint="fix the variable (deploy/k8s/40-lake-and-config.yaml sets it)") from exc
    options = {**sandbox.kubernetes_options(), "image": sandbox.k8s_image or "unused-by-prune"}
    for option, field in (
        ("namespace", "namespace"),
        ("kubeconfig", "kubeconfig"),
        ("context", "kube_context"),
        ("retain_days", "env_retain_days"),
    ):
        if getattr(args, option) is not None:
            options[field] = getattr(args, option)
    try:
        config = KubernetesSandboxConfig(**options)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(
            f"{'.'.join(str(x) for x in first['loc']) or 'settings'}: {first['msg']}",
            hint="see `evalrunner envs prune --help`",
        ) from exc
    if config.env_retain_days == 0:
        print(f"retention is 0 days (never): environment claims in {config.namespace} are kept")
        return 0
    decisions = KubernetesBackend(config).prune_environments(dry_run=args.dry_run)
    for d in decisions:
        print(f"{d.action:<12} {d.claim}  {d.reason}")
    deleted = sum(d.action in ("deleted", "would delete") for d in decisions)
    verb = "would be deleted (dry run: nothing was)" if args.dry_run else "deleted"
    print(
        f"{len(decisions)} environment claim(s) in {config.namespace}: {deleted} {verb}, "
        f"retention {config.env_retain_days:g} days"
    )
    return 0


def add_parsers(add: Add) -> None:
    from evalrunner_assets.execution import sandbox_settings

    p = add("envs", help="repository environments on Kubernetes: delete claims past their retention")
    envs_sub = p.add_subparsers(dest="envs_command", required=True, parser_class=Parser)
    q = envs_sub.add_parser(
        "prune",
        help="delete environment claims no pod has mounted for the retention (they are rebuilt on next use)",
        description="Delete the environment claims (evalrunner-env-<digest>) of the sandbox namespace whose last "
        "use is older than the retention, that no pod mounts and whose build Job does not exist; print each "
        "claim with what was done and why. Settings come from the evalrunner-env ConfigMap's variables "
        f"({sandbox_settings.NAMESPACE.env}, {sandbox_settings.ENV_RETAIN_DAYS.env}); the sampling sensor runs the same "
        "sweep every 10 minutes.",
    )
    q.add_argument("--dry-run", action="store_true", help="print what would be deleted; delete nothing")
    q.add_argument(
        "--retain-days",
        type=float,
        default=None,
        help=f"keep claims used within this many days (default: ${sandbox_settings.ENV_RETAIN_DAYS.env}, "
        f"else {sandbox_settings.ENV_RETAIN_DAYS.default:g})",
    )
    q.add_argument(
        "--namespace",
        default=None,
        help=f"sandbox namespace (default: ${sandbox_settings.NAMESPACE.env}, else {sandbox_settings.NAMESPACE.default})",
    )
    q.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    q.add_argument("--context", default=None, help="kubeconfig context")
    q.set_defaults(func=cmd_envs)
