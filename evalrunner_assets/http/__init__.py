"""The HTTP apps (Starlette, no Dagster): the GitHub webhook receiver (``webhook``) and the SWE
run API (``swe_api``)."""
