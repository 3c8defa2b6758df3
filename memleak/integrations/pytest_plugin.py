"""pytest plugin (entry point pytest11): fail a test whose training step leaks memory."""


def pytest_configure(config):
    config.addinivalue_line("markers", "memleak(steps=..., max_growth='1 MiB/step'): fail the test when memory leaks")
