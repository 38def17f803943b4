"""The comparison engine: what to run for a pull request (spec, facts, windows, scheduler), the
assessment and its comparison document, publishing it, and the series and candidate runs built
on the same steps. Its modules are imported by name (``evalrunner_assets.pipeline.engine``, ...);
this package re-exports nothing."""
