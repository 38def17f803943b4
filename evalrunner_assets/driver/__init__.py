"""The driver layer: runs the engine for the CLI and the run API and records the work in Dagster
(the local instance, partitions, runs). One module per thing it runs: ``comparison``
(``evalrunner compare``), ``backfill``, ``candidates``, ``finetune`` and ``swe`` (the run API's
launcher). Import the module you need; this package exports nothing itself."""
