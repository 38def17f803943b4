"""Helpers and stand-ins shared by the tests (and by bench/): ``*_standin`` modules stand in for
services that are not reachable here (GitHub, the Kubernetes API, model APIs, a package index);
the others build what tests drive (git repositories, deliveries, a served evalrunner, a browser)."""
