"""Helpers shared by the Python tests that ctest runs (tests/test_*.py).

Each test file is a unittest module run as a script. ctest passes PITH_BIN (the pith binary),
PITH_SHARED (test assets), PITH_SOURCE_DIR and PITH_TEST_TMP. A test that cannot run exits with
SKIP (77) after printing why, which ctest reports as skipped, never as passed."""
import os
import subprocess
import sys
import unittest

SKIP = 77


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(SKIP)


def pith_bin():
    b = os.environ.get("PITH_BIN")
    if not b or not os.path.exists(b):
        skip("PITH_BIN is not set or missing (run through ctest)")
    return b


def shared_dir():
    d = os.environ.get("PITH_SHARED") or os.path.join(os.path.dirname(__file__), "..", "..", "shared")
    if not os.path.exists(os.path.join(d, "README.md")):
        skip("shared test assets not found at %s (set PITH_SHARED)" % d)
    return d


def tmp_dir():
    d = os.environ.get("PITH_TEST_TMP") or "/tmp/pith-test"
    os.makedirs(d, exist_ok=True)
    return d


def run_pith(args, timeout=300, input=None):
    """Runs pith with args; returns CompletedProcess with bytes stdout/stderr."""
    return subprocess.run([pith_bin()] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, input=input)


def main():
    """unittest.main that exits 1 on failure and 0 on success (never 77 after running tests)."""
    prog = unittest.main(exit=False, verbosity=2)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
