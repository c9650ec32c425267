"""tools/mkmodel.py's benchmark-file options: --random-blocks for Q4_0 and the K-quant mixes (blocks written
directly, so files of real shapes take seconds) and --damp FROM:S (a target whose first FROM layers are
exactly a smaller model's, for measuring speculative decoding with a draft that agrees at a chosen rate).

Checks: the random blocks decode (tools/pith_gguf.py's dequantizers) to finite values of about the size
the quantized random floats have, in the types the mix asks for, and pith loads and runs the files; a
--damp 2:0 model with 6 layers gives the same greedy tokens as the 2-layer model of the same seed, while
--damp 2:1 writes the same bytes as no --damp at all and --damp 2:0.5 changes only the damped tensors."""

import os
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import pithtest  # noqa: E402

try:
    import numpy as np
except ImportError:
    pithtest.skip("numpy is not importable")
import pith_gguf as G  # noqa: E402

MKMODEL = os.path.join(HERE, "..", "tools", "mkmodel.py")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def mkmodel(out, *args):
    r = subprocess.run([sys.executable, MKMODEL, "--preset", "test-llama", "--out", out, *args],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise RuntimeError(f"mkmodel {' '.join(args)}: {r.stderr.strip()}")


def greedy(path, n=24):
    r = pithtest.run_pith(["run", "-m", path, "-p", "once upon a time", "-n", str(n), "--temp", "0",
                           "--seed", "1"])
    check(r.returncode == 0, f"pith run {os.path.basename(path)}: exit {r.returncode}: {r.stderr[-300:]}")
    return r.stdout


def test_random_blocks(tmp):
    # dim and ffn multiples of 256, so the K-quant mixes really use Q4_K / Q5_K / Q6_K
    for dtype, want in (("Q4_0", {"Q4_0"}), ("Q4_K_M", {"Q4_K", "Q6_K"}), ("Q5_K_M", {"Q5_K", "Q6_K"})):
        path = os.path.join(tmp, f"mkbench-rb-{dtype}.gguf")
        mkmodel(path, "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--layers", "4",
                "--dtype", dtype, "--random-blocks")
        rd = G.GGUFReader(path)
        types = {G.type_name(rd.tensor_type(n)) for n in rd.tensors if n.startswith("blk.")}
        check(want <= types, f"{dtype}: tensor types {sorted(types)}, want {sorted(want)}")
        for name in ("blk.0.attn_q.weight", "blk.0.ffn_down.weight"):
            shape = rd.tensors[name][0]
            w = rd.tensor(name).astype(np.float64)
            rms, expect = float(np.sqrt(np.mean(w * w))), 1.0 / (4.0 * np.sqrt(shape[-1]))
            check(np.all(np.isfinite(w)), f"{dtype} {name}: non-finite values")
            # the quantized random floats have rms ~ 1/(4 sqrt(cols)); random codes land within a few times
            check(expect / 4 < rms < expect * 4, f"{dtype} {name}: rms {rms:.3g}, expected about {expect:.3g}")
        rd.close()
        out = greedy(path, 8)
        check(len(out) > 0, f"{dtype}: pith run printed nothing")


def test_damp(tmp):
    draft, target0 = os.path.join(tmp, "mkbench-d2.gguf"), os.path.join(tmp, "mkbench-t6-d0.gguf")
    mkmodel(draft, "--layers", "2", "--dtype", "Q8_0")
    mkmodel(target0, "--layers", "6", "--dtype", "Q8_0", "--damp", "2:0")
    check(greedy(draft) == greedy(target0), "--damp 2:0: the 6-layer model's greedy tokens differ from the 2-layer one's")

    plain, one, half = (os.path.join(tmp, f) for f in ("mkbench-t6.gguf", "mkbench-t6-d1.gguf", "mkbench-t6-d05.gguf"))
    mkmodel(plain, "--layers", "6")
    mkmodel(one, "--layers", "6", "--damp", "2:1")
    mkmodel(half, "--layers", "6", "--damp", "2:0.5")
    with open(plain, "rb") as a, open(one, "rb") as b:
        check(a.read() == b.read(), "--damp 2:1 wrote different bytes from no --damp")
    rp, rh = G.GGUFReader(plain), G.GGUFReader(half)
    for name in rp.tensors:
        a, b = rp.tensor(name), rh.tensor(name)
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        damped = layer >= 2 and name.endswith(("attn_output.weight", "ffn_down.weight"))
        if damped:
            check(np.allclose(b, 0.5 * a, rtol=1e-6, atol=0), f"--damp 2:0.5: {name} is not half of the plain one")
        else:
            check(np.array_equal(a, b), f"--damp 2:0.5 changed {name}")
    rp.close()
    rh.close()


def main():
    pithtest.pith_bin()
    tmp = pithtest.tmp_dir()
    test_random_blocks(tmp)
    test_damp(tmp)
    if failures:
        print(f"test_mkmodel_bench_files: {len(failures)} failed")
        sys.exit(1)
    print("test_mkmodel_bench_files: all checks passed")


if __name__ == "__main__":
    main()
