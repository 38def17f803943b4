"""The webhook inbox as an asset the UI can show: deliveries the PR sensor could not handle
appear as observations of it (with the delivery id, the reason and the dead-letter file)."""

import dagster as dg

GITHUB_INBOX = dg.AssetSpec(
    "github_inbox",
    group_name="github",
    kinds={"github"},
    owners=["team:evals"],
    tags={"evalrunner/noun": "github-inbox"},
    description=(
        "Signed GitHub deliveries written by the webhook receiver under inbox/github/ and read by "
        "pr_sensor. One observation is one delivery moved to inbox/github-dead/ with its reason."
    ),
)
