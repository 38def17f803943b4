-- events: one row per trajectory event of every committed batch (same file rules as samples).
create or replace view events as
select
    repo,
    "commit",
    task,
    batch,
    sample_id,
    epoch,
    seq,
    event,
    "timestamp",
    working_start,
    span_id,
    role,
    model,
    tool_function,
    tool_arguments,
    tool_calls,
    input_tokens,
    output_tokens,
    total_tokens,
    error,
    text,
    text_truncated
from (
    -- the typed empty table from code first: every column exists, files that predate one read null
    select * from events_schema
    union all by name
    select * from events_parquet
)
