-- Every SWE attempt row of the given files (one row per agent version, task and sample index).
select
    id, run_id, agent_version, task_set, task_id, sample_idx, status, passed, tests_passed_raw,
    tests_passed, tests_failed, exit_code, reason, policy_reason, sandbox_id, cost_usd, steps,
    repo, "commit", env_digest, prompt_version, seed, trajectory, created_at
from read_parquet($files, union_by_name = true)
order by agent_version, task_id, sample_idx
