"""`cmake --install` (what `make install PREFIX=...` runs) into a temporary prefix, then use what it put
there the way a user would:
  1. the layout: bin/pith, share/pith/pith-default.gguf (identical to assets/default.gguf),
     lib/libpith.a, every public header under include/pith/ (each with extern "C" guards),
     lib/pkgconfig/pith.pc;
  2. the installed `pith run -n 4` without -m finds the default model in ../share/pith and writes the
     same greedy text as the build tree's binary;
  3. a copy of the binary in a directory with no model beside it and no ../share/pith fails with exit 2
     and a one-line error naming both paths it looked at and $PITH_DEFAULT_MODEL; with
     $PITH_DEFAULT_MODEL set, the same copy runs;
  4. a small C11 program built with `cc $(pkg-config --cflags --libs pith)` (PKG_CONFIG_PATH pointing
     into the prefix) loads the installed default model and prints its vocabulary size, which must
     equal the width of the logits rows the installed binary writes (--logits-out);
  5. where a C++ compiler exists, the same program compiled as C++ links against libpith.a (it would
     not without the headers' extern "C" guards);
  6. the installed libpith.a exports exactly the public API: its global defined symbols (nm) all start
     with pith_ and are the functions the installed headers mark PITH_API, and no function declared
     there lacks the mark (include/pith/api.h; CMakeLists.txt localizes everything else).
"""

import filecmp
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77

failures = []

PROGRAM = r"""
#include <stdio.h>
#include <pith/model.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: vocab MODEL\n");
        return 2;
    }
    pith_err err = {{0}};
    pith_model *m = NULL;
    if (pith_model_load(argv[1], NULL, &m, &err) != 0) {
        fprintf(stderr, "vocab: %s\n", err.msg);
        return 1;
    }
    printf("%d\n", m->hp.n_vocab);
    pith_model_free(m);
    return 0;
}
"""


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run(cmd, env=None, timeout=300):
    return subprocess.run(cmd, env=env, capture_output=True, timeout=timeout)


def text(b):
    return b.decode("utf-8", errors="replace")


def cache_value(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                m = re.match(r"%s:[A-Z]+=(.*)$" % re.escape(key), line.strip())
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


def main():
    src = os.environ.get("PITH_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pith = os.environ.get("PITH_BIN", "")
    if not pith or not os.access(pith, os.X_OK):
        print(f"SKIP: the pith binary is missing (PITH_BIN={pith!r})")
        return SKIP
    build = os.environ.get("PITH_BUILD_DIR") or os.path.dirname(os.path.abspath(pith))
    cmake = shutil.which("cmake")
    pkg_config = shutil.which("pkg-config")
    if not cmake or not pkg_config:
        print(f"SKIP: cmake or pkg-config is not installed (cmake={cmake}, pkg-config={pkg_config})")
        return SKIP
    asset = os.path.join(src, "assets", "default.gguf")
    cc = cache_value(build, "CMAKE_C_COMPILER") or shutil.which("cc") or "cc"
    # libpith.a from a sanitizer build needs the sanitizer runtimes at link time.
    san = ["-fsanitize=address,undefined"] if cache_value(build, "PITH_SANITIZE") in ("ON", "TRUE", "1") else []

    base = os.environ.get("PITH_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="install-", dir=base)
    try:
        return body(src, pith, build, cmake, pkg_config, asset, cc, san, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def body(src, pith, build, cmake, pkg_config, asset, cc, san, tmp):
    prefix = os.path.join(tmp, "prefix")
    r = run([cmake, "--install", build, "--prefix", prefix])
    if not check(r.returncode == 0, f"cmake --install exited {r.returncode}: {text(r.stderr)}"):
        return 1

    # 1: the layout.
    bin_pith = os.path.join(prefix, "bin", "pith")
    model = os.path.join(prefix, "share", "pith", "pith-default.gguf")
    check(os.access(bin_pith, os.X_OK), f"{bin_pith} is missing or not executable")
    check(os.path.exists(model) and filecmp.cmp(model, asset, shallow=False),
          f"{model} is missing or differs from assets/default.gguf")
    check(not os.path.exists(os.path.join(prefix, "bin", "pith-default.gguf")),
          "bin/pith-default.gguf was installed: the installed binary must find the model in ../share/pith")
    check(os.path.exists(os.path.join(prefix, "lib", "libpith.a")), "lib/libpith.a is missing")
    check(os.path.exists(os.path.join(prefix, "lib", "pkgconfig", "pith.pc")), "lib/pkgconfig/pith.pc is missing")
    want_headers = sorted(os.path.basename(h) for h in glob.glob(os.path.join(src, "include", "pith", "*.h")))
    got_headers = sorted(os.path.basename(h) for h in glob.glob(os.path.join(prefix, "include", "pith", "*.h")))
    check(want_headers and got_headers == want_headers,
          f"installed headers {got_headers} differ from include/pith {want_headers}")
    for h in got_headers:
        with open(os.path.join(prefix, "include", "pith", h), encoding="utf-8") as f:
            t = f.read()
        # api.h only defines PITH_API: nothing in it has linkage.
        check('extern "C"' in t or not re.search(r"^PITH_API ", t, re.M),
              f"include/pith/{h} declares functions but has no extern \"C\" guard")
    print(f"layout: bin/pith, share/pith/pith-default.gguf, lib/libpith.a, lib/pkgconfig/pith.pc, "
          f"{len(got_headers)} headers")
    if not os.access(bin_pith, os.X_OK):
        return 1

    env = dict(os.environ)
    env.pop("PITH_DEFAULT_MODEL", None)

    # 2: the installed binary, no -m.
    args = ["run", "-n", "4", "--temp", "0"]
    r = run([bin_pith] + args, env=env)
    check(r.returncode == 0, f"installed pith run -n 4 exited {r.returncode}: {text(r.stderr)}")
    ref = run([pith] + args, env=env)
    check(ref.returncode == 0, f"build tree pith run -n 4 exited {ref.returncode}: {text(ref.stderr)}")
    if r.returncode == 0 and ref.returncode == 0:
        check(r.stdout.strip() != b"", "installed pith run -n 4 wrote nothing")
        check(r.stdout == ref.stdout,
              f"installed pith wrote {text(r.stdout)!r}, the build tree's {text(ref.stdout)!r}")
        print(f"installed pith run -n 4 without -m: {text(r.stdout)!r}")

    # 3: a copied binary with no model anywhere it looks.
    elsewhere = os.path.join(tmp, "elsewhere", "bin")
    os.makedirs(elsewhere)
    copy = os.path.join(elsewhere, "pith")
    shutil.copy2(bin_pith, copy)
    r = run([copy, "run", "-n", "4"], env=env)
    err = text(r.stderr)
    check(r.returncode == 2, f"copied pith without a model exited {r.returncode}, expected 2: {err}")
    real = os.path.realpath(elsewhere)
    for path in (os.path.join(real, "pith-default.gguf"),
                 os.path.join(os.path.dirname(real), "share", "pith", "pith-default.gguf"),
                 "$PITH_DEFAULT_MODEL"):
        check(path in err, f"the error does not name {path}: {err!r}")
    check(len(err.strip().splitlines()) == 1, f"the error is not one line: {err!r}")
    print(f"copied binary: {err.strip()}")
    r = run([copy, "run", "-n", "4"], env=dict(env, PITH_DEFAULT_MODEL=model))
    check(r.returncode == 0, f"copied pith with $PITH_DEFAULT_MODEL exited {r.returncode}: {text(r.stderr)}")

    # 4: a program against the installed library, through pkg-config.
    pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    r = run([pkg_config, "--cflags", "--libs", "pith"], env=pc_env)
    if not check(r.returncode == 0, f"pkg-config --cflags --libs pith exited {r.returncode}: {text(r.stderr)}"):
        return 1
    flags = text(r.stdout).split()
    check(any(f.startswith("-L") and os.path.realpath(f[2:]) == os.path.realpath(os.path.join(prefix, "lib"))
              for f in flags), f"pkg-config's flags do not point into the prefix: {flags}")
    prog_c = os.path.join(tmp, "vocab.c")
    with open(prog_c, "w", encoding="utf-8") as f:
        f.write(PROGRAM)
    exe = os.path.join(tmp, "vocab")
    r = run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror"] + san + ["-o", exe, prog_c] + flags)
    if check(r.returncode == 0, f"{cc} against the installed library failed: {text(r.stderr)}"):
        r = run([exe, model], env=env)
        check(r.returncode == 0, f"the program exited {r.returncode}: {text(r.stderr)}")
        logits = os.path.join(tmp, "logits.f32")
        g = run([bin_pith, "run", "-n", "1", "--ignore-eos", "--logits-out", logits], env=env)
        check(g.returncode == 0, f"pith run --logits-out exited {g.returncode}: {text(g.stderr)}")
        if r.returncode == 0 and g.returncode == 0:
            n_vocab = int(text(r.stdout).strip() or "0")
            width = os.path.getsize(logits) // 4
            check(n_vocab > 0 and n_vocab == width,
                  f"the program printed vocabulary size {n_vocab}, the logits rows have {width} entries")
            print(f"program built with pkg-config: vocabulary size {n_vocab} (logits row: {width})")

    # 5: the same program as C++ (the extern "C" guards make the names link).
    cxx = shutil.which("c++")
    if cxx:
        prog_cc = os.path.join(tmp, "vocab.cc")
        shutil.copy(prog_c, prog_cc)
        r = run([cxx, "-Wall", "-Wextra", "-Werror"] + san + ["-o", exe + "-cxx", prog_cc] + flags)
        if check(r.returncode == 0, f"{cxx} against the installed library failed: {text(r.stderr)}"):
            r = run([exe + "-cxx", model], env=env)
            check(r.returncode == 0, f"the C++ program exited {r.returncode}: {text(r.stderr)}")
            print(f"C++ program: vocabulary size {text(r.stdout).strip()}")
    else:
        print("note: no C++ compiler (c++), the C++ link check was not run")

    # 6: what the installed archive exports.
    check_exports(build, prefix)

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("install: all checks passed")
    return 0


# A declaration the headers mark, and a top-level one they forgot to (a line at column 0 that declares a
# pith_ function without PITH_API; struct members and continuation lines are indented, static inline
# helpers have no linkage to export).
MARKED = re.compile(r"^PITH_API\s[^;(]*?\b(pith_\w+)\s*\(", re.M)
UNMARKED = re.compile(r"^(?!PITH_API\s|static\s|typedef\s|#)[A-Za-z_][\w\s*]*?\b(pith_\w+)\s*\(", re.M)


def check_exports(build, prefix):
    nm = cache_value(build, "CMAKE_NM") or shutil.which("nm")
    if not nm or not os.access(nm, os.X_OK):
        print("note: no nm, the exported-symbol check was not run")
        return
    lib = os.path.join(prefix, "lib", "libpith.a")
    r = run([nm, "-g", "--defined-only", lib])
    if not check(r.returncode == 0, f"nm -g --defined-only {lib} exited {r.returncode}: {text(r.stderr)}"):
        return
    # "ADDRESS TYPE NAME" lines; member headers ("x.o:") and blank lines carry no symbol.
    exported = sorted(line.split()[-1] for line in text(r.stdout).splitlines()
                      if len(line.split()) == 3)
    stray = [s for s in exported if not s.startswith("pith_")]
    check(exported and not stray,
          f"libpith.a exports {len(stray)} symbol(s) not named pith_*: {' '.join(stray[:20])}")
    marked, unmarked = set(), []
    for h in sorted(glob.glob(os.path.join(prefix, "include", "pith", "*.h"))):
        with open(h, encoding="utf-8") as f:
            t = f.read()
        marked.update(MARKED.findall(t))
        unmarked += [f"{os.path.basename(h)}: {n}" for n in UNMARKED.findall(t)]
    check(not unmarked, f"functions declared without PITH_API: {', '.join(unmarked)}")
    missing = sorted(marked - set(exported))
    extra = sorted(set(exported) - marked)
    check(not missing, f"declared PITH_API but not exported by libpith.a: {' '.join(missing)}")
    check(not extra, f"exported by libpith.a but not declared PITH_API: {' '.join(extra)}")
    print(f"libpith.a exports {len(exported)} symbols, {len(stray)} not named pith_*; the headers mark "
          f"{len(marked)} functions PITH_API")


if __name__ == "__main__":
    sys.exit(main())
