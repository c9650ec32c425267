#!/usr/bin/python3
"""DeepSeek-V3's multi-token-prediction layer (src/model/deepseek2_mtp.c) against a float64 torch reference.

The reference: the head's glue from vLLM's model_executor/models/deepseek_mtp.py
(DeepSeekMultiTokenPredictorLayer.forward: u = eh_proj [enorm(embed(x)) | hnorm(h)], the decoder block,
residual + hidden_states returned; SharedHead: norm, then the vocabulary head; the proposer chains the
returned u into the next step with the drafted token), with the decoder block and the decoder itself from
tests/test_ref_deepseek2.py's by_hand (written from transformers' modeling_deepseek_v3.py, MLA in its
expanded form: pith's draft attention is the absorbed form, so the absorption is checked too). by_hand is
reused on renamed weights: the decoder's last block output, final-normed, is h; the head's layer is a
one-layer DeepSeek whose "embedding" rows are the u rows and whose block 0 is block n_layers. vLLM
numbers the head's pairs (x_{i+1}, h_i) from position 0 where Pith keeps them one position later
(glm4moe_mtp.c: RoPE scores depend only on distances).

Pith's side: tests/tool_mtp_logits prefills several sequences together through the model API (K/V in
F32), in chunks of 7 tokens and in one chunk, then drafts 6 tokens for all of them in one mtp_draft call.
Every row (the decoder's last logits row and each draft step's) must match the reference within the
float tolerance 1e-4; each case prints its measured max error. Models: test-deepseek2 with one MTP layer
(V3: q_lora, sigmoid routing with groups, YaRN) as GGUF and safetensors F32, and with the layer's own
embedding and vocabulary head (nextn.embed_tokens, nextn.shared_head_head; Hugging Face embed_tokens,
shared_head.head) in both formats; the prompt of 70 tokens is longer than every chunk.

The test checks its own power: the hidden-state input, the embedding input, the head's attention over
earlier positions and its experts each move the reference's draft logits by far more than the tolerance,
and chaining u rather than shared_head_norm(u) changes the later draft steps.

Environment: PITH_MTP_LOGITS (the tool), PITH_TEST_TMP. Exit 77 (skip) without torch and numpy."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import test_ref_deepseek2 as R  # noqa: E402  (exits 77 without numpy / torch)
from test_ref_deepseek2 import DS2, by_hand, np, torch  # noqa: E402

TOL = 1e-4
STEPS = 6


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def rms(x, weight, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def decoder_hidden(c, w, tokens):
    """The decoder's final-normed hidden states of tokens: [T, dim]."""
    return rms(by_hand(c, w, tokens, raw=True), w("output_norm.weight"), c.eps)


def head_block(c, w, u, skip=None):
    """DeepSeek's block n_layers over the rows u (causal, positions 0..T-1): its output u' [T, dim].
    skip(name): which of the block's tensors to zero (the power checks)."""
    L = c.layers
    c1 = DS2.config(c.preset, layers=1, dense=0 if L >= c.dense else 1, mtp=0, mtp_copy=False, mtp_own=False)

    def w1(name):
        if name == "token_embd.weight":
            return u
        if not name.startswith("blk.0."):
            return w(name)
        real = "blk.%d.%s" % (L, name[len("blk.0."):])
        t = w(real)
        if skip and skip(real) and t is not None:
            return torch.zeros_like(t)
        return t
    return by_hand(c1, w1, list(range(u.shape[0])), raw=True)


def mtp_logits(c, w, seq, steps, chain_normed=False, zero=None, skip=None, shared_only=False):
    """The head's draft logits [steps, vocab] after seq = x_0..x_n (prefill x_0..x_{n-1}, draft from x_n):
    pairs (x_{i+1}, h_i) for i < n, then each step's (drafted token, u') pair; each step's argmax is its
    draft. chain_normed: chain shared_head_norm(u') instead (the power check); shared_only: the decoder's
    embedding and head even where the layer has its own (the power check)."""
    L = c.layers
    h = decoder_hidden(c, w, seq[:-1])                       # h_0..h_{n-1}
    emb = None if shared_only else w(f"blk.{L}.nextn.embed_tokens.weight")
    emb = w("token_embd.weight") if emb is None else emb
    head = None if shared_only else w(f"blk.{L}.nextn.shared_head_head.weight")
    if head is None:
        head = w("output.weight") if w("output.weight") is not None else w("token_embd.weight")
    enorm, hnorm = w(f"blk.{L}.nextn.enorm.weight"), w(f"blk.{L}.nextn.hnorm.weight")
    if zero == "enorm":
        enorm = torch.zeros_like(enorm)
    if zero == "hnorm":
        hnorm = torch.zeros_like(hnorm)
    eh, snorm = w(f"blk.{L}.nextn.eh_proj.weight"), w(f"blk.{L}.nextn.shared_head_norm.weight")
    toks, hid, out = list(seq[1:]), [h[i] for i in range(len(seq) - 1)], []
    for _ in range(steps):
        u = torch.cat([rms(emb[torch.tensor(toks)], enorm, c.eps), rms(torch.stack(hid), hnorm, c.eps)], -1) @ eh.T
        u_out = head_block(c, w, u, skip)[-1]
        g = rms(u_out, snorm, c.eps)
        logits = g @ head.T
        out.append(logits)
        toks.append(int(torch.argmax(logits)))
        hid.append(g if chain_normed else u_out)
    return torch.stack(out)


def sequences(vocab):
    rng = np.random.default_rng(5)
    lens = [70, 9, 33]
    return [[1] + [int(t) for t in rng.integers(3, vocab, size=n - 1)] for n in lens]


def run_tool(tool, model, chunk, seqs, out):
    args = [tool, model, str(STEPS), str(chunk), out] + [",".join(map(str, s)) for s in seqs]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if r.returncode:
        fail(f"{' '.join(args[:5])}: {r.stderr.decode(errors='replace')}")
    return np.fromfile(out, dtype=np.float32)


def check_power(c, w, toks):
    """The head's inputs, attention, experts and chaining must matter, or matching would prove little."""
    base = mtp_logits(c, w, toks, 3).numpy()
    L = c.layers
    cases = (("the hidden-state input", dict(zero="hnorm")), ("the embedding input", dict(zero="enorm")),
             ("the head's attention", dict(skip=lambda n: n == f"blk.{L}.attn_output.weight")),
             ("the head's routed experts", dict(skip=lambda n: "ffn_down." in n and "shexp" not in n)),
             ("chaining u' (vs shared_head_norm(u'))", dict(chain_normed=True)))
    if c.mtp_own:
        cases += (("the layer's own embedding and head", dict(shared_only=True)),)
    for what, kw in cases:
        moved = float(np.abs(mtp_logits(c, w, toks, 3, **kw).numpy() - base).max())
        print(f"  {what}: moves the reference's draft logits by up to {moved:.2f}")
        if moved < 100 * TOL:
            fail(f"{what} moves the draft logits by only {moved:.2e}")


def main():
    tool = os.environ.get("PITH_MTP_LOGITS")
    if not tool or not os.path.exists(tool):
        print("skip: PITH_MTP_LOGITS is not set (run through ctest)")
        return 77
    tmp = tempfile.mkdtemp(prefix="ds2-mtp-", dir=os.environ.get("PITH_TEST_TMP"))
    worst = 0.0
    for fmt, own in (("gguf", False), ("safetensors", False), ("gguf", True), ("safetensors", True)):
        c = DS2.config("test-deepseek2", mtp=1, mtp_own=own)
        name = "test-deepseek2" + (" (own embedding and head)" if own else "")
        path, _ = R.make(tmp, c, fmt, "F32", seed=3)
        if own:
            os.rename(path, path.replace("test-deepseek2", "test-deepseek2-own"))
            path = path.replace("test-deepseek2", "test-deepseek2-own")
        w = R.weights(c, path)
        seqs = sequences(c.vocab)
        want = []
        for s in seqs:
            target = by_hand(c, w, s[:-1])[-1]
            want.append(np.concatenate([target[None], mtp_logits(c, w, s, STEPS).numpy()]))
        for chunk in (7, 1000):
            got = run_tool(tool, path, chunk, seqs, os.path.join(tmp, "out.bin")).reshape(len(seqs), STEPS + 1, -1)
            for i, s in enumerate(seqs):
                err = np.abs(got[i] - want[i]).max(axis=1)
                worst = max(worst, float(err.max()))
                print(f"{name} {fmt}, chunks of {chunk}, sequence of {len(s)} tokens: max |error| target "
                      f"{err[0]:.1e}, drafts {' '.join(f'{e:.1e}' for e in err[1:])}")
                if err.max() > TOL:
                    fail(f"{name} {fmt} chunk {chunk} sequence {i}: logits off by {err.max():.2e} (tolerance {TOL})")
        if fmt == "gguf":
            check_power(c, w, seqs[1])
    print(f"DeepSeek-V3's MTP head against the float64 reference: max |error| {worst:.2e} (tolerance {TOL})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
