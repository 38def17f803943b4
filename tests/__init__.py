"""The test suite. Its folders mirror the packages they test (``tests/stats/`` tests
``evalrunner_assets/stats``, ``tests/lake/`` tests ``lake/``, ...); helpers and stand-ins shared
between test modules live in ``tests/helpers/`` and are imported as ``tests.helpers.<module>``.
``tests`` is a package so that no folder of it is ever put on ``sys.path`` (``tests/github``
would shadow PyGithub's ``github``)."""
