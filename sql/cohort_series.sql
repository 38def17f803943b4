-- cohort_series: one row per (main-branch point, scope) — scope 'task' (one eval), 'cohort'
-- (pooled Wilson over the cohort's evals) or 'combined' (all evals) — with the mean, its
-- interval, inputs, errored (inputs that raised), the paired label against the previous
-- point, and flags/annotations (regression, evals added/removed, "not measured: <cause>").
-- A row more than half of whose inputs raised has status 'not measured' and a null mean.
-- Rows come from series/<repo>/rows/<commit>.parquet, registered as series_rows.
create or replace view cohort_series as
select
    repo,
    branch,
    "commit",
    position,
    cast(committed_at as timestamptz) as committed_at,
    subject,
    scope,
    name,
    cohort,
    mean,
    lo,
    hi,
    inputs,
    errored,
    label,
    status,
    flagged,
    annotation
from series_rows
order by repo, branch, position, scope, name
