"""GLM-4.5's multi-token-prediction layer (src/model/glm4moe_mtp.c) against a float64 torch reference.

The reference: the head's glue from vLLM's model_executor/models/glm4_moe_mtp.py
(Glm4MoeMultiTokenPredictorLayer.forward: u = eh_proj [enorm(embed(x)) | hnorm(h)], the decoder block,
residual + hidden_states returned; SharedHead: norm, then the vocabulary head; the proposer chains the
returned u into the next step with the drafted token), with the decoder block and the decoder itself from
tests/test_ref_glm4moe.py's glm_by_hand (written from transformers' modeling_glm4_moe.py). glm_by_hand is
reused as it stands, on renamed weights: the decoder's final-normed hidden states are its output with an
identity matrix as the vocabulary head, and the head's layer is a one-layer GLM whose "embedding" rows
are the u rows, whose block 0 is block n_layers and whose output norm and head are shared_head_norm and
the vocabulary projection. vLLM numbers the head's pairs (x_{i+1}, h_i) from position 0 where Pith keeps
them one position later (qwen35_mtp.c: RoPE scores depend only on distances).

Pith's side: tests/tool_mtp_logits prefills several sequences together through the model API (K/V in
F32), in chunks of 7 tokens (the head's last hidden state carried across batches in its RECURRENT slot
and its K/V across chunks) and in one chunk, then drafts 6 tokens for all of them in one mtp_draft call.
Every row (the decoder's last logits row and each draft step's) must match the reference within the
float tolerance 1e-4; each case prints its measured max error. Models: test-glm4moe (Q/K/V biases, no
QK norm) as GGUF and safetensors F32, test-glm4moe-qk with an MTP layer (QK norms, expert groups) as
GGUF F32, and test-glm4moe whose MTP layer has its own embedding and vocabulary head (nextn.embed_tokens,
nextn.shared_head_head; Hugging Face embed_tokens, shared_head.head) in both formats; the prompt of 70
tokens is longer than every chunk.

The test checks its own power: the hidden-state input, the embedding input, the head's attention over
earlier positions and its experts each move the reference's draft logits by far more than the tolerance,
and chaining u rather than shared_head_norm(u) (Qwen3.5's choice) changes the later draft steps.

Where a Vulkan device can run pith (lavapipe in CI), the GGUF cases run again on the device (PITH_DEVICE,
src/backend/vulkan/vk_mtp.c: the plain query of mtp_attention), held to the same tolerance.

Environment: PITH_MTP_LOGITS (the tool), PITH_BIN, PITH_TEST_TMP. Exit 77 (skip) without torch and numpy."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import test_ref_glm4moe as R  # noqa: E402  (exits 77 without numpy / torch)
from test_ref_glm4moe import GLM, fail, glm_by_hand, glm_weights, mkmodel, np, rms, torch  # noqa: E402
from test_reference_mtp import vulkan_device  # noqa: E402

TOL = 1e-4
STEPS = 6


def renamed(w, n_experts, mapping):
    """glm_weights' (w, experts) with names through mapping(name) -> a tensor, None, or another name."""
    def w2(name):
        got = mapping(name)
        return got if got is None or isinstance(got, torch.Tensor) else w(got)
    w2.block = lambda name: 0

    def experts2(layer, kind):
        return torch.stack([w2(f"blk.{layer}.ffn_{kind}.{e}.weight") for e in range(n_experts)])
    return w2, experts2


def decoder_hidden(cfg, weights, tokens):
    """The decoder's final-normed hidden states of tokens, rms(x, output_norm): [T, dim]."""
    w = weights[0]
    return rms(glm_by_hand(cfg, weights, tokens, raw=True), w("output_norm.weight"), cfg.eps)


def head_block(cfg, weights, u, skip=None):
    """GLM's decoder block n_layers over the rows u (causal, positions 0..T-1): its output u' [T, dim].
    skip(name): which of the block's tensors to zero (the power checks)."""
    w = weights[0]
    L = cfg.layers
    c1 = GLM.Config(**dict(cfg.as_dict(), layers=1, dense_leading=1 if L < cfg.dense_leading else 0, nextn=0,
                           tied=False, mtp_copy=False, damp=0))

    def m(name):
        if name == "token_embd.weight":
            return u
        if not name.startswith("blk.0."):
            return name
        real = "blk.%d.%s" % (L, name[len("blk.0."):])
        if skip and skip(real):
            t = w(real)
            return None if t is None else torch.zeros_like(t)
        return real
    return glm_by_hand(c1, renamed(w, cfg.experts, m), list(range(u.shape[0])), raw=True)


def mtp_logits(cfg, weights, seq, steps, chain_normed=False, zero=None, skip=None, shared_only=False):
    """The head's draft logits [steps, vocab] after seq = x_0..x_n (prefill x_0..x_{n-1}, draft from x_n):
    pairs (x_{i+1}, h_i) for i < n, then each step's (drafted token, u') pair; each step's argmax is its
    draft. chain_normed: chain shared_head_norm(u') instead (Qwen3.5's choice, for the power check);
    shared_only: the decoder's embedding and head even where the layer has its own (the power check)."""
    w = weights[0]
    L = cfg.layers
    h = decoder_hidden(cfg, weights, seq[:-1])                       # h_0..h_{n-1}
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
        u = torch.cat([rms(emb[torch.tensor(toks)], enorm, cfg.eps), rms(torch.stack(hid), hnorm, cfg.eps)], -1) @ eh.T
        u_out = head_block(cfg, weights, u, skip)[-1]
        g = rms(u_out, snorm, cfg.eps)
        logits = g @ head.T
        out.append(logits)
        toks.append(int(torch.argmax(logits)))
        hid.append(g if chain_normed else u_out)
    return torch.stack(out)


def sequences(vocab):
    rng = np.random.default_rng(5)
    lens = [70, 9, 33]
    return [[1] + [int(t) for t in rng.integers(3, vocab, size=n - 1)] for n in lens]


def run_tool(tool, model, chunk, seqs, out, device=None):
    args = [tool, model, str(STEPS), str(chunk), out] + [",".join(map(str, s)) for s in seqs]
    env = dict(os.environ, PITH_DEVICE=device) if device else None
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, env=env)
    if r.returncode:
        fail(f"{' '.join(args[:5])}: {r.stderr.decode(errors='replace')}")
    return np.fromfile(out, dtype=np.float32)


def check_power(cfg, weights, toks):
    """The head's inputs, attention, experts and chaining must matter, or matching would prove little."""
    base = mtp_logits(cfg, weights, toks, 3).numpy()
    L = cfg.layers
    cases = (("the hidden-state input", dict(zero="hnorm")), ("the embedding input", dict(zero="enorm")),
             ("the head's attention", dict(skip=lambda n: n == f"blk.{L}.attn_output.weight")),
             ("the head's routed experts", dict(skip=lambda n: "ffn_down." in n and "shexp" not in n)),
             ("chaining u' (vs shared_head_norm(u'))", dict(chain_normed=True)))
    if cfg.mtp_own:
        cases += (("the layer's own embedding and head", dict(shared_only=True)),)
    for what, kw in cases:
        moved = float(np.abs(mtp_logits(cfg, weights, toks, 3, **kw).numpy() - base).max())
        print(f"  {what}: moves the reference's draft logits by up to {moved:.2f}")
        if moved < 100 * TOL:
            fail(f"{what} moves the draft logits by only {moved:.2e}")


def main():
    tool = os.environ.get("PITH_MTP_LOGITS")
    if not tool or not os.path.exists(tool):
        print("skip: PITH_MTP_LOGITS is not set (run through ctest)")
        return 77
    tmp = tempfile.mkdtemp(prefix="glm-mtp-", dir=os.environ.get("PITH_TEST_TMP"))
    worst = 0.0
    device = vulkan_device()
    print(f"Vulkan: {device or 'no device can run pith here: the CPU cases only'}")
    cases = (("test-glm4moe", "gguf", False), ("test-glm4moe", "safetensors", False), ("test-glm4moe-qk", "gguf", False),
             ("test-glm4moe", "gguf", True), ("test-glm4moe", "safetensors", True))
    for preset, fmt, own in cases:
        cfg = GLM.Config(**dict(mkmodel.build_config(preset, mtp=1).as_dict(), mtp_own=own))
        preset += " (own embedding and head)" if own else ""
        path = os.path.join(tmp, f"{preset.split()[0]}{'-own' if own else ''}" + (".gguf" if fmt == "gguf" else "-st"))
        if fmt == "gguf":
            mkmodel.write_gguf(cfg, path, "F32", seed=3)
        else:
            mkmodel.write_safetensors(cfg, path, "F32", seed=3)
        weights = glm_weights(cfg, path=path)
        seqs = sequences(cfg.vocab)
        want = []
        for s in seqs:
            target = glm_by_hand(cfg, weights, s[:-1])[-1]
            want.append(np.concatenate([target[None], mtp_logits(cfg, weights, s, STEPS).numpy()]))
        devices = [None] + ([device] if fmt == "gguf" and device else [])
        for dev, chunk in [(d, c) for d in devices for c in (7, 1000)]:
            got = run_tool(tool, path, chunk, seqs, os.path.join(tmp, "out.bin"), dev)
            got = got.reshape(len(seqs), STEPS + 1, -1)
            where = f"{preset} {fmt}{' on ' + dev if dev else ''}"
            for i, s in enumerate(seqs):
                err = np.abs(got[i] - want[i]).max(axis=1)
                worst = max(worst, float(err.max()))
                print(f"{where}, chunks of {chunk}, sequence of {len(s)} tokens: max |error| target "
                      f"{err[0]:.1e}, drafts {' '.join(f'{e:.1e}' for e in err[1:])}")
                if err.max() > TOL:
                    fail(f"{where} chunk {chunk} sequence {i}: logits off by {err.max():.2e} (tolerance {TOL})")
        if fmt == "gguf":
            check_power(cfg, weights, seqs[1])
    print(f"GLM-4.5's MTP head against the float64 reference: max |error| {worst:.2e} (tolerance {TOL})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
