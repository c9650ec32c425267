"""Mixture-of-experts files that are wrong in one way each, and what Pith says about them: GGUF
(3-D expert tensors, llama.cpp's expert keys) and safetensors (one tensor per expert). Every refusal is
one clear line naming the key or tensor, with exit status 1, never a crash; and the old GGUF layout with
one blk.N.ffn_gate.E.weight per expert loads and gives the same logits as the 3-D one.

Environment: PITH_BIN, PITH_TEST_TMP. Exit 77 when numpy is missing."""

import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skip: numpy is not importable")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import mkmodel  # noqa: E402
import pith_gguf as G  # noqa: E402

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def run(pith, model, *extra):
    cmd = [pith, "run", "-m", model, "-p", "", "-n", "4", "--temp", "0", "-t", "2", *extra]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)


def expect_refusal(pith, name, model, needle, *extra):
    r = run(pith, model, *extra)
    err = r.stderr.decode(errors="replace").strip()
    if r.returncode != 1 or needle not in err or len(err.splitlines()) != 1:
        fail(f"{name}: exit {r.returncode}, stderr {err[-300:]!r} (wanted exit 1 and one line with {needle!r})")
    else:
        print(f"{name}: refused: {err}")


def rewrite_gguf(src, dst, drop=(), meta=None, rename=None, split=False):
    """Copy a GGUF file, dropping tensors, overriding metadata, renaming tensors, or (split) writing each
    3-D expert tensor as one 2-D tensor per expert."""
    r = G.GGUFReader(src)
    w = G.GGUFWriter(dst)
    for k, v in r.metadata.items():
        if meta and k in meta:
            continue
        if isinstance(v, bool):
            w.add(k, v, G.BOOL)
        elif isinstance(v, int):
            w.add_u32(k, v)
        elif isinstance(v, float):
            w.add_f32(k, v)
        elif isinstance(v, str):
            w.add_str(k, v)
        else:
            w.add_array(k, v if k != "tokenizer.ggml.scores" else np.array(v, dtype=np.float32),
                        G.FLOAT32 if k == "tokenizer.ggml.scores" else (G.STRING if k == "tokenizer.ggml.tokens"
                                                                         else G.INT32))
    for k, (vtype, v) in (meta or {}).items():
        w.add(k, v, vtype)
    for name in r.tensors:
        if name in drop:
            continue
        shape, t = r.tensors[name][0], r.tensor_type(name)
        data = r.tensor(name)
        if split and name.endswith("_exps.weight"):
            kind = name.split(".")[2][:-len("_exps")]
            for e in range(shape[0]):
                w.add_tensor(f"blk.{name.split('.')[1]}.{kind}.{e}.weight", shape[1:], t, data[e])
            continue
        w.add_tensor((rename or {}).get(name, name), shape, t, data)
    w.write()


def logits(pith, model, tmp):
    out = os.path.join(tmp, "l.bin")
    r = run(pith, model, "--logits-out", out, "--ignore-eos", "--kv-f32")
    if r.returncode:
        fail(f"{model}: {r.stderr.decode(errors='replace')[-300:]}")
        return None
    return np.fromfile(out, dtype="<f4")


def main():
    pith = os.environ.get("PITH_BIN")
    if not pith or not os.access(pith, os.X_OK):
        print(f"FAIL: PITH_BIN ({pith!r}) is not an executable pith binary")
        return 1
    with tempfile.TemporaryDirectory(prefix="moefmt-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        cfg = mkmodel.build_config("test-qwen3moe")
        good = os.path.join(tmp, "good.gguf")
        mkmodel.write_gguf(cfg, good, "Q8_0", seed=3)
        base = logits(pith, good, tmp)
        split = os.path.join(tmp, "split.gguf")
        rewrite_gguf(good, split, split=True)
        got = logits(pith, split, tmp)
        if base is not None and got is not None and not np.array_equal(base, got):
            fail("one GGUF tensor per expert gives other logits than the 3-D tensors")
        else:
            print("one GGUF tensor per expert: the same logits as 3-D tensors")
        a = "qwen3moe"
        cases = [
            ("missing expert tensor", dict(drop={"blk.1.ffn_up_exps.weight"}), "blk.1.ffn_up_exps.weight"),
            ("missing router", dict(drop={"blk.0.ffn_gate_inp.weight"}), "blk.0.ffn_gate_inp.weight"),
            ("more experts used than exist", dict(meta={f"{a}.expert_used_count": (G.UINT32, 9)}), "experts used"),
            ("no expert count", dict(meta={f"{a}.expert_count": (G.UINT32, 0)}), "expert count 0"),
            ("expert width disagrees", dict(meta={f"{a}.expert_feed_forward_length": (G.UINT32, 96)}),
             "blk.0.ffn_gate_exps.weight"),
            ("expert count disagrees", dict(meta={f"{a}.expert_count": (G.UINT32, 7)}), "ffn_gate_inp.weight"),
            ("unknown gating", dict(meta={f"{a}.expert_gating_func": (G.UINT32, 3)}), "expert_gating_func"),
            ("expert count of the wrong type", dict(meta={f"{a}.expert_count": (G.STRING, "eight")}),
             f"{a}.expert_count"),
            ("expert groups that do not divide the experts", dict(meta={f"{a}.expert_group_count": (G.UINT32, 3)}),
             "expert groups do not divide"),
            ("too few expert groups open", dict(meta={f"{a}.expert_group_count": (G.UINT32, 8),
                                                      f"{a}.expert_group_used_count": (G.UINT32, 1)}),
             "expert groups used"),
            ("negative expert weights scale", dict(meta={f"{a}.expert_weights_scale": (G.FLOAT32, -1.0)}),
             "expert weights scale"),
            ("more leading dense layers than layers", dict(meta={f"{a}.leading_dense_block_count": (G.UINT32, 99)}),
             "leading dense layers"),
        ]
        for name, kw, needle in cases:
            bad = os.path.join(tmp, "bad.gguf")
            rewrite_gguf(good, bad, **kw)
            expect_refusal(pith, name, bad, needle)

        gcfg = mkmodel.build_config("test-gpt-oss")
        gg = os.path.join(tmp, "gptoss.gguf")
        mkmodel.write_gguf(gcfg, gg, "F32", seed=5)
        for name, kw, needle in [
            ("gpt-oss: missing sinks", dict(drop={"blk.2.attn_sinks.weight"}), "blk.2.attn_sinks.weight"),
            ("gpt-oss: missing expert bias", dict(drop={"blk.0.ffn_up_exps.bias"}), None),
            ("gpt-oss: bad window period", dict(meta={"gpt-oss.attention.sliding_window_pattern": (G.UINT32, 0)}),
             "sliding_window_pattern 0"),
        ]:
            bad = os.path.join(tmp, "bad.gguf")
            rewrite_gguf(gg, bad, **kw)
            if needle:
                expect_refusal(pith, name, bad, needle)
            else:   # expert biases are optional (a GPT-OSS-like model without them is well defined)
                r = run(pith, bad)
                if r.returncode:
                    fail(f"{name}: {r.stderr.decode(errors='replace')[-300:]}")
        gst = os.path.join(tmp, "gptoss-st")
        mkmodel.write_safetensors(gcfg, gst, "F32", seed=6)
        c = json.load(open(os.path.join(gst, "config.json")))
        c["intermediate_size"] = 32
        json.dump(c, open(os.path.join(gst, "config.json"), "w"))
        expect_refusal(pith, "gpt-oss safetensors: fused experts of another width", gst,
                       "mlp.experts.gate_up_proj: expected", "--tokenizer", os.path.join(gst, "tokenizer.bin"))

        st = os.path.join(tmp, "st")
        mkmodel.write_safetensors(mkmodel.build_config("test-mixtral"), st, "F32", seed=4)
        tok = os.path.join(st, "tokenizer.bin")
        conf = json.load(open(os.path.join(st, "config.json")))
        for name, change, needle in [
            ("safetensors: no num_local_experts", {"num_local_experts": None}, "num_local_experts"),
            ("safetensors: top-k above the experts", {"num_experts_per_tok": 5}, "experts used"),
            ("safetensors: an expert more than the file has", {"num_local_experts": 5}, "ffn_gate_inp.weight"),
        ]:
            c = dict(conf)
            for k, v in change.items():
                if v is None:
                    c.pop(k)
                else:
                    c[k] = v
            json.dump(c, open(os.path.join(st, "config.json"), "w"))
            expect_refusal(pith, name, st, needle, "--tokenizer", tok)
        json.dump(conf, open(os.path.join(st, "config.json"), "w"))
        r = run(pith, st, "--tokenizer", tok)
        if r.returncode:
            fail(f"safetensors mixtral: {r.stderr.decode(errors='replace')[-300:]}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all MoE format checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
