"""Which parts of src/ may include which: the layering the backend interface rests on, checked on every
`#include "..."` line of every .c and .h file under src/ (conditional ones too: a line under #if still
ties the files together).

Rules (a violation names the file, the line and the header):
- only src/backend/cpu/ includes backend/cpu/ headers; the files in CPU_ALLOWLIST below are the
  exceptions that exist today, and the list may only shrink: a listed file that no longer includes any
  backend/cpu/ header fails too, so that it is struck off;
- src/format/ includes nothing from src/model/ (the descriptor interface is format/arch.h);
- src/core/ includes nothing from src/format/ or src/sample/ (the row reductions are util/rows.h);
- src/server/ and src/cli/ include nothing from src/backend/ but backend/info.h, the backend-neutral
  answers a front end prints (kernel table name, PITH_FORCE_SCALAR)."""
import os
import re
import unittest

from pithtest import main

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# Files outside src/backend/cpu/ that include backend/cpu/ headers today. Strike a file off when it stops;
# never add one (new code reaches the CPU kernels through the backend interface).
CPU_ALLOWLIST = {
    # The machine probes time the instructions of the kernel table a model would run: a probe table
    # mirrors the CPU kernel table of the same name and is offered only where that table's CPUID check
    # passes.
    "bench/probe.c",
    "bench/probe_avx2.c",
}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def includes(src):
    """{file relative to src/: [(line number, included path relative to src/ or include/)]}"""
    out = {}
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            found = []
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    # A bare name resolves beside the file first, as the compiler does for "...".
                    if "/" not in inc and os.path.exists(os.path.join(root, inc)):
                        inc = os.path.relpath(os.path.join(root, inc), src).replace(os.sep, "/")
                    found.append((n, inc))
            out[rel] = found
    return out


def under(path, *dirs):
    return any(path.startswith(d.rstrip("/") + "/") for d in dirs)


def violations(incs):
    """One line per broken rule: 'src/FILE:LINE: includes "HEADER": why'."""
    bad = []

    def flag(rel, n, inc, why):
        bad.append(f'src/{rel}:{n}: includes "{inc}": {why}')

    for rel, found in sorted(incs.items()):
        for n, inc in found:
            if under(inc, "backend/cpu") and not under(rel, "backend/cpu") and rel not in CPU_ALLOWLIST:
                flag(rel, n, inc, "only src/backend/cpu/ includes the CPU backend's headers")
            if under(rel, "format") and under(inc, "model"):
                flag(rel, n, inc, "src/format/ includes nothing from src/model/ (format/arch.h is the "
                     "descriptor interface)")
            if under(rel, "core") and under(inc, "format", "sample"):
                flag(rel, n, inc, "src/core/ includes nothing from src/format/ or src/sample/")
            if under(rel, "server", "cli") and under(inc, "backend") and inc != "backend/info.h":
                flag(rel, n, inc, "src/server/ and src/cli/ include nothing from src/backend/ but "
                     "backend/info.h")
    for rel in sorted(CPU_ALLOWLIST):
        if rel not in incs:
            bad.append(f"src/{rel}: in CPU_ALLOWLIST but does not exist: strike it off "
                       "(tests/test_layering.py)")
        elif not any(under(inc, "backend/cpu") for _, inc in incs[rel]):
            bad.append(f"src/{rel}: in CPU_ALLOWLIST but includes no backend/cpu/ header any more: strike "
                       "it off (tests/test_layering.py)")
    return bad


class Layering(unittest.TestCase):
    def test_src_includes(self):
        incs = includes(os.path.join(SRC, "src"))
        self.assertGreater(len(incs), 100, f"found only {len(incs)} files under {SRC}/src")
        n = sum(len(v) for v in incs.values())
        bad = violations(incs)
        print(f"\n{len(incs)} files, {n} #include \"...\" lines, {len(CPU_ALLOWLIST)} files allowed the CPU "
              f"backend's headers")
        if bad:
            self.fail(f"{len(bad)} layering violation(s):\n" + "\n".join(bad))

    def test_rules_bite(self):
        # Each rule, fed one violating include, reports it: a rule that matches nothing would pass forever.
        cases = {
            "server/x.c": "backend/cpu/kernels.h",
            "cli/x.c": "backend/backend.h",
            "format/x.c": "model/llama.h",
            "core/x.c": "sample/rows.h",
            "tokenizer/x.c": "backend/cpu/matmul.h",
        }
        for rel, inc in cases.items():
            with self.subTest(file=rel, include=inc):
                bad = [b for b in violations({rel: [(7, inc)]}) if b.startswith(f"src/{rel}:7:")]
                self.assertTrue(bad, f"{rel} including {inc} was not reported")
        self.assertEqual([b for b in violations({"server/x.c": [(1, "backend/info.h")],
                                                 "core/x.c": [(1, "util/rows.h")]}) if "src/" in b
                          and "CPU_ALLOWLIST" not in b], [])


if __name__ == "__main__":
    main()
