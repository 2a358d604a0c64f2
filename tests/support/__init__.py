"""Helpers shared by the test suites (``from tests.support.<module> import ...``)."""
