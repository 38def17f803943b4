-- comparison_samples: the sample rows of the given committed batches, for pairing and accounting.
-- Parameters: $batches (list of batch-key digests).
select
    batch,
    "commit",
    task,
    sample_id,
    epoch,
    score,
    score_raw,
    scorer,
    error,
    error_where,
    input_digest,
    input_tokens,
    output_tokens,
    total_tokens,
    cost_usd,
    total_time_s,
    working_time_s,
    model
from samples
where batch in (select unnest($batches::varchar[]))
order by batch, sample_id, epoch
