#!/usr/bin/env python3
"""Lists the tests a ctest run skipped, with the reason each printed.

Usage: scripts/ctest-skips.py JUNIT_XML

JUNIT_XML is the file `ctest --output-junit` wrote (the Makefile's test targets write
Testing/skips-junit.xml). Prints one line per test that did not run:

    skipped: NAME: REASON

or "skipped: none". REASON is the first line of the test's output that starts with "SKIP", else
the first line that mentions "skip", else its last non-empty line, else ctest's own reason (for
example "SKIP_RETURN_CODE=77"). Exit status: 0, or 2 with a one-line message when the file is
missing or unreadable; the Makefile keeps ctest's exit status either way.
"""
import re
import sys
import xml.etree.ElementTree as ET


def reason(output, fallback):
    lines = [ln.strip() for ln in (output or "").splitlines() if ln.strip()]
    for ln in lines:
        if ln.upper().startswith("SKIP"):
            return ln
    for ln in lines:
        if re.search(r"\bskip", ln, re.IGNORECASE):
            return ln
    if lines:
        return lines[-1]
    return fallback or "printed no reason"


def main(argv):
    if len(argv) != 2:
        print("usage: ctest-skips.py JUNIT_XML", file=sys.stderr)
        return 2
    try:
        root = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"ctest-skips: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    skips = []
    for case in root.iter("testcase"):
        if case.get("status") == "run" or case.find("failure") is not None:
            continue
        sk = case.find("skipped")
        if sk is None and case.get("status") not in ("notrun", "disabled"):
            continue
        out = case.find("system-out")
        why = reason(out.text if out is not None else "", sk.get("message") if sk is not None else "")
        skips.append((case.get("name", "?"), why))
    if not skips:
        print("skipped: none")
    for name, why in skips:
        print(f"skipped: {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
