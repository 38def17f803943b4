-- samples: one row per (sample id, epoch) of every committed batch.
-- samples_parquet reads exactly the files the batch records commit (a table file without a
-- record is never read); samples_schema is the empty table of the current schema, from code.
create or replace view samples as
select
    repo,
    "commit",
    task,
    batch,
    "window",
    window_start,
    window_stop,
    sample_id,
    epoch,
    score,
    score_raw,
    scorer,
    scores,
    error,
    limit_type,
    input_tokens,
    output_tokens,
    total_tokens,
    input_tokens_cache_read,
    input_tokens_cache_write,
    reasoning_tokens,
    cost_usd,
    total_time_s,
    working_time_s,
    started_at,
    completed_at,
    model,
    spec,
    model_args,
    config_digest,
    backend,
    runtime_digest,
    seed,
    epochs,
    log_status,
    eval_id,
    sample_uuid,
    input_digest,
    error_where
from (
    -- the typed empty table from code first: every column exists, files that predate one read null
    select * from samples_schema
    union all by name
    select * from samples_parquet
)
