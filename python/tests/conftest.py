"""Shared set-up of the jomoim Python tests (run by CTest, label python):

    PYTHONPATH=build/release/python /usr/bin/python3 -m pytest -q python/tests

The "timing" marker selects the test that measures wall time (the GIL test); CTest runs it
alone (python_gil, RUN_SERIAL) and everything else as python_attention.
"""
import os


def pytest_configure(config):
    config.addinivalue_line("markers", "timing: measures wall time; run it on an otherwise idle machine")


# Set by CMake for the ASan+UBSan build, whose module runs with the ASan runtime preloaded.
SANITIZED = os.environ.get("JOMOIM_SANITIZED") == "1"
