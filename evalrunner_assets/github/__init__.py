"""GitHub's side of evalrunner that needs no Dagster: the webhook inbox (``inbox``)."""
