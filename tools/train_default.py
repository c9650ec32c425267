#!/usr/bin/python3
"""Trains Pith's embedded default model (assets/default.gguf) from scratch, reproducibly, on the CPU.

Corpus: the King James Bible (public domain) from Debian's bible-kjv-text package, read through its
`bible` program (package bible-kjv). Each chapter is one document: its verses joined by single spaces,
framed as BOS text EOS. The last books of the canon (the smallest suffix of books holding at least 5% of
the text: Colossians to Revelation) are held out for evaluation; the tokenizer and the model never
see them.

Tokenizer: a SentencePiece BPE model trained here (2048 pieces, byte fallback, identity normalisation,
dummy space prefix) and written into the GGUF as a llama SentencePiece vocabulary, so that a
llama.cpp-compatible SPM tokenizer reproduces SentencePiece's ids.

Model: a tiny Llama exactly as a GGUF `llama` forward pass computes it: RMSNorm (eps 1e-5), RoPE
(theta 10000) rotating ADJACENT pairs (x[2i], x[2i+1]) as GGUF llama files expect (so Q/K need no
permutation on export), grouped-query attention scaled by 1/sqrt(head_dim), SwiGLU feed-forward
w2(silu(w1 x) * w3 x), output tied to the token embedding.

Determinism: fixed seeds, torch.use_deterministic_algorithms, one thread, a fixed step count. Bit-exact
reproduction also needs the same BLAS and CPU kernels (the published model was trained with OpenBLAS
serial 0.3.21 on AVX2; see docs/default-model.md).

Stages (default: all, in order):
  data       corpus -> WORK/train.txt, WORK/heldout.txt (one chapter per line)
  tokenizer  SentencePiece model -> WORK/spm.model
  train      -> WORK/ckpt.pt (resumable from WORK/ckpt-partial.pt)
  export     -> assets/default.gguf (F16 matrices, F32 norms) via tools/pith_gguf.py
  eval       held-out perplexity of the exported weights and a unigram baseline -> WORK/eval.json
  expected   float64 torch greedy generation from BOS on the exported weights ->
             tests/data/default_expected.txt, default_expected_tokens.txt, default_expected_logits.npy
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

SEED = 1611
HELDOUT_FRACTION = 0.05

CONFIG = dict(
    vocab_size=2048,
    dim=256,
    n_layers=4,
    n_heads=8,
    n_kv_heads=4,
    ffn_dim=688,          # ~2.7 * dim, a multiple of 16
    ctx_len=256,
    norm_eps=1e-5,
    rope_theta=10000.0,
)

TRAIN = dict(
    batch_size=8,
    steps=2800,
    lr=1.5e-3,
    min_lr=1e-4,
    warmup=100,
    weight_decay=0.1,
    betas=(0.9, 0.95),
    grad_clip=1.0,
)

BOS_ID, EOS_ID, UNK_ID = 1, 2, 0

# Token types of llama's SentencePiece vocabulary in GGUF (tokenizer.ggml.token_type).
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# Corpus.

def read_bible():
    """[(book, chapter, text)] in canonical order, from Debian's `bible` program."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    chapters = []
    for line in out.splitlines():
        ref, _, verse = line.partition(" ")
        book = ref.rstrip("0123456789:")
        chap = ref[len(book):].split(":")[0]
        # Book abbreviations begin with a digit for 1Sm etc.: the chapter is the digits before ':'.
        if not book or not chap or not verse:
            raise ValueError(f"unexpected line from bible: {line!r}")
        key = (book, int(chap))
        if not chapters or chapters[-1][0] != key:
            chapters.append((key, []))
        chapters[-1][1].append(verse.strip())
    if len(chapters) != 1189:
        raise ValueError(f"expected the 1189 chapters of the KJV, read {len(chapters)}")
    return [(b, c, " ".join(vs)) for (b, c), vs in chapters]


def stage_data(work):
    chapters = read_bible()
    books = []
    for b, _, _ in chapters:
        if not books or books[-1] != b:
            books.append(b)
    size = {b: 0 for b in books}
    for b, _, t in chapters:
        size[b] += len(t)
    total = sum(size.values())
    held, acc = [], 0
    for b in reversed(books):
        if acc >= HELDOUT_FRACTION * total:
            break
        held.append(b)
        acc += size[b]
    held = set(held)
    train = [t for b, _, t in chapters if b not in held]
    heldout = [t for b, _, t in chapters if b in held]
    for name, docs in (("train.txt", train), ("heldout.txt", heldout)):
        with open(os.path.join(work, name), "w", encoding="utf-8") as f:
            f.write("\n".join(docs) + "\n")
    log(f"data: {len(train)} training chapters, {len(heldout)} held-out chapters "
        f"({acc / total:.1%} of {total} characters; books {', '.join(b for b in books if b in held)})")


def read_docs(work, name):
    with open(os.path.join(work, name), encoding="utf-8") as f:
        return f.read().splitlines()


# ---------------------------------------------------------------------------------------------------------
# Tokenizer.

def stage_tokenizer(work):
    import sentencepiece as spm
    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(SEED)
    spm.SentencePieceTrainer.train(
        input=os.path.join(work, "train.txt"),  # one chapter per line
        model_prefix=os.path.join(work, "spm"),
        model_type="bpe",
        vocab_size=CONFIG["vocab_size"],
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        max_sentence_length=1 << 20,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=-1,
        minloglevel=2,
    )
    sp = load_spm(work)
    log(f"tokenizer: {sp.get_piece_size()} pieces")


def load_spm(work):
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=os.path.join(work, "spm.model"))


def encode_docs(sp, docs):
    """One stream: BOS doc EOS BOS doc EOS ..."""
    ids = []
    for d in docs:
        ids.append(BOS_ID)
        ids.extend(sp.encode(d))
        ids.append(EOS_ID)
    return np.array(ids, dtype=np.int64)


def vocab_arrays(sp):
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(TT_UNKNOWN)
        elif sp.is_control(i):
            types.append(TT_CONTROL)
        elif sp.is_byte(i):
            types.append(TT_BYTE)
        elif sp.is_unused(i):
            types.append(TT_UNUSED)
        else:
            types.append(TT_NORMAL)
    for b in range(256):
        if tokens[3 + b] != f"<0x{b:02X}>" or types[3 + b] != TT_BYTE:
            raise ValueError("byte-fallback pieces are not at ids 3..258")
    return tokens, np.array(scores, dtype=np.float32), np.array(types, dtype=np.int32)


# ---------------------------------------------------------------------------------------------------------
# Model.

def build_model(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg["norm_eps"]) * self.weight

    head_dim = cfg["dim"] // cfg["n_heads"]

    def rope_tables(n, dtype):
        # Angles in float64 whatever the model's dtype: position * theta^(-2i/head_dim).
        inv = cfg["rope_theta"] ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
        return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)

    def rope(x, cos, sin):
        # x: (B, T, H, head_dim); rotate adjacent pairs (x[2i], x[2i+1]).
        xr = x.unflatten(-1, (head_dim // 2, 2))
        a, b = xr[..., 0], xr[..., 1]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d, h, kv = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"]
            self.attn_norm = RMSNorm(d)
            self.wq = nn.Linear(d, h * head_dim, bias=False)
            self.wk = nn.Linear(d, kv * head_dim, bias=False)
            self.wv = nn.Linear(d, kv * head_dim, bias=False)
            self.wo = nn.Linear(h * head_dim, d, bias=False)
            self.ffn_norm = RMSNorm(d)
            self.w1 = nn.Linear(d, cfg["ffn_dim"], bias=False)  # gate
            self.w3 = nn.Linear(d, cfg["ffn_dim"], bias=False)  # up
            self.w2 = nn.Linear(cfg["ffn_dim"], d, bias=False)  # down

        def forward(self, x, cos, sin, mask):
            B, T, _ = x.shape
            h, kv = cfg["n_heads"], cfg["n_kv_heads"]
            y = self.attn_norm(x)
            q = rope(self.wq(y).view(B, T, h, head_dim), cos, sin).transpose(1, 2)
            k = rope(self.wk(y).view(B, T, kv, head_dim), cos, sin).transpose(1, 2)
            v = self.wv(y).view(B, T, kv, head_dim).transpose(1, 2)
            # Query head j reads KV head j // (h / kv), as llama.cpp groups them.
            k = k.repeat_interleave(h // kv, dim=1)
            v = v.repeat_interleave(h // kv, dim=1)
            att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(head_dim)) + mask
            o = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, h * head_dim)
            x = x + self.wo(o)
            y = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
            self.layers = nn.ModuleList(Block() for _ in range(cfg["n_layers"]))
            self.norm = RMSNorm(cfg["dim"])

        def forward(self, ids):
            T = ids.shape[1]
            dtype = self.tok_embeddings.weight.dtype
            cos, sin = rope_tables(T, dtype)
            mask = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)
            x = self.tok_embeddings(ids)
            for layer in self.layers:
                x = layer(x, cos, sin, mask)
            return self.norm(x) @ self.tok_embeddings.weight.t()  # tied output

    return Llama()


def init_weights(torch, model, cfg):
    std = 0.02
    for name, p in model.named_parameters():
        if p.dim() == 1:
            torch.nn.init.ones_(p)
        elif name.endswith("wo.weight") or name.endswith("w2.weight"):
            torch.nn.init.normal_(p, 0.0, std / math.sqrt(2 * cfg["n_layers"]))
        else:
            torch.nn.init.normal_(p, 0.0, std)


def setup_torch(threads=1):
    import torch
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    return torch


def keep_freed_memory():
    """Speed only (results are unchanged): stop glibc from unmapping and re-faulting the activation
    buffers (up to 17 MB each at batch 8) on every step, which otherwise costs about a third of the time."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)


def blas_in_use():
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.split()[-1]}
    return ", ".join(sorted(libs)) or "unknown"


# ---------------------------------------------------------------------------------------------------------
# Training.

def lr_at(step):
    t = TRAIN
    if step < t["warmup"]:
        return t["lr"] * (step + 1) / t["warmup"]
    frac = (step - t["warmup"]) / max(1, t["steps"] - t["warmup"])
    return t["min_lr"] + 0.5 * (t["lr"] - t["min_lr"]) * (1 + math.cos(math.pi * frac))


def stage_train(work, steps_override=None, stop_after=None):
    torch = setup_torch()
    import torch.nn.functional as F
    keep_freed_memory()
    if steps_override:
        TRAIN["steps"] = steps_override
    sp = load_spm(work)
    train_ids = torch.from_numpy(encode_docs(sp, read_docs(work, "train.txt")))
    held_ids = encode_docs(sp, read_docs(work, "heldout.txt"))
    cfg = CONFIG
    model = build_model(torch, cfg)
    init_weights(torch, model, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"train: {len(train_ids)} training tokens, {n_params} parameters, BLAS {blas_in_use()}")
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": TRAIN["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=TRAIN["lr"], betas=TRAIN["betas"], eps=1e-8)
    rng = np.random.Generator(np.random.PCG64(SEED))
    start, elapsed = 0, 0.0
    partial = os.path.join(work, "ckpt-partial.pt")
    if os.path.exists(partial):
        st = torch.load(partial)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        rng.bit_generator.state = st["rng"]
        torch.set_rng_state(st["torch_rng"])
        start, elapsed = st["step"], st["elapsed"]
        log(f"train: resuming at step {start}")
    T, B = cfg["ctx_len"], TRAIN["batch_size"]
    t0 = time.time() - elapsed
    ema = None
    for step in range(start, TRAIN["steps"] if stop_after is None else min(stop_after, TRAIN["steps"])):
        offs = rng.integers(0, len(train_ids) - T - 1, size=B)
        batch = torch.stack([train_ids[o:o + T + 1] for o in offs.tolist()])
        x, y = batch[:, :-1], batch[:, 1:]
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), TRAIN["grad_clip"])
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 50 == 0 or step == TRAIN["steps"] - 1:
            el = time.time() - t0
            log(f"step {step:5d}  loss {loss.item():.4f}  ema {ema:.4f}  lr {lr_at(step):.2e}  "
                f"{(step + 1 - start) * B * T / max(el - elapsed, 1e-9):.0f} tok/s  {el / 60:.1f} min")
        if (step + 1) % 400 == 0 or step == TRAIN["steps"] - 1:
            # Quick overfitting watch: non-overlapping windows (less context than stage eval's).
            nll, n = heldout_nll(torch, model, held_ids, T, T)
            log(f"step {step:5d}  held-out loss {nll / n:.4f} (ppl {math.exp(nll / n):.2f})")
        if (step + 1) % 200 == 0 and step + 1 < TRAIN["steps"]:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1,
                        "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                        "elapsed": time.time() - t0}, partial)
    if stop_after is not None:
        log(f"train: stopped after {stop_after} steps (determinism check), nothing saved")
        return
    elapsed = time.time() - t0
    torch.save({"model": model.state_dict(), "config": cfg, "train": TRAIN, "n_params": n_params,
                "train_seconds": elapsed, "blas": blas_in_use()}, os.path.join(work, "ckpt.pt"))
    if os.path.exists(partial):
        os.remove(partial)
    log(f"train: done in {elapsed / 60:.1f} min")


# ---------------------------------------------------------------------------------------------------------
# Export: torch state dict -> GGUF names (ne = {in, out} is numpy (out, in), as pith_gguf expects).

def gguf_tensors(state, cfg):
    t = {"token_embd.weight": state["tok_embeddings.weight"],
         "output_norm.weight": state["norm.weight"]}
    names = {"attn_norm.weight": "attn_norm.weight", "attn_q.weight": "wq.weight",
             "attn_k.weight": "wk.weight", "attn_v.weight": "wv.weight",
             "attn_output.weight": "wo.weight", "ffn_norm.weight": "ffn_norm.weight",
             "ffn_gate.weight": "w1.weight", "ffn_up.weight": "w3.weight", "ffn_down.weight": "w2.weight"}
    for i in range(cfg["n_layers"]):
        for g, s in names.items():
            t[f"blk.{i}.{g}"] = state[f"layers.{i}.{s}"]
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in t.items()}


def stage_export(work, out_path):
    import pith_gguf
    import torch
    ck = torch.load(os.path.join(work, "ckpt.pt"))
    cfg = ck["config"]
    sp = load_spm(work)
    tokens, scores, types = vocab_arrays(sp)
    w = pith_gguf.GGUFWriter(out_path)
    w.add_str("general.architecture", "llama")
    w.add_str("general.name", "pith-default-kjv")
    w.add_str("general.description", "Tiny Llama trained on the King James Bible by tools/train_default.py")
    w.add_str("general.license", "public-domain")
    w.add_u32("general.file_type", 1)  # mostly F16
    w.add_u32("llama.context_length", cfg["ctx_len"])
    w.add_u32("llama.embedding_length", cfg["dim"])
    w.add_u32("llama.block_count", cfg["n_layers"])
    w.add_u32("llama.feed_forward_length", cfg["ffn_dim"])
    w.add_u32("llama.rope.dimension_count", cfg["dim"] // cfg["n_heads"])
    w.add_u32("llama.attention.head_count", cfg["n_heads"])
    w.add_u32("llama.attention.head_count_kv", cfg["n_kv_heads"])
    w.add_f32("llama.attention.layer_norm_rms_epsilon", cfg["norm_eps"])
    w.add_f32("llama.rope.freq_base", cfg["rope_theta"])
    w.add_u32("llama.vocab_size", cfg["vocab_size"])
    w.add_str("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens, pith_gguf.STRING)
    w.add_array("tokenizer.ggml.scores", scores, pith_gguf.FLOAT32)
    w.add_array("tokenizer.ggml.token_type", types, pith_gguf.INT32)
    w.add_u32("tokenizer.ggml.bos_token_id", BOS_ID)
    w.add_u32("tokenizer.ggml.eos_token_id", EOS_ID)
    w.add_u32("tokenizer.ggml.unknown_token_id", UNK_ID)
    w.add("tokenizer.ggml.add_bos_token", True, pith_gguf.BOOL)
    w.add("tokenizer.ggml.add_eos_token", False, pith_gguf.BOOL)
    w.add("tokenizer.ggml.add_space_prefix", True, pith_gguf.BOOL)
    for name, arr in gguf_tensors(ck["model"], cfg).items():
        # Norm weights stay F32 (as llama.cpp stores them); matrices are F16 to fit the size budget.
        w.add_tensor(name, arr.shape, "F32" if arr.ndim == 1 else "F16", arr)
    w.write()
    log(f"export: {out_path} ({os.path.getsize(out_path)} bytes)")


def load_gguf_model(torch, path, dtype):
    """The model with the weights exactly as stored in the GGUF (F16 decoded), in `dtype`."""
    import pith_gguf
    r = pith_gguf.GGUFReader(path)
    md = r.metadata
    cfg = dict(vocab_size=int(md["llama.vocab_size"]), dim=int(md["llama.embedding_length"]),
               n_layers=int(md["llama.block_count"]), n_heads=int(md["llama.attention.head_count"]),
               n_kv_heads=int(md["llama.attention.head_count_kv"]),
               ffn_dim=int(md["llama.feed_forward_length"]), ctx_len=int(md["llama.context_length"]),
               norm_eps=float(md["llama.attention.layer_norm_rms_epsilon"]),
               rope_theta=float(md["llama.rope.freq_base"]))
    model = build_model(torch, cfg).to(dtype)
    state = {}
    back = {"token_embd.weight": "tok_embeddings.weight", "output_norm.weight": "norm.weight"}
    per = {"attn_norm.weight": "attn_norm.weight", "attn_q.weight": "wq.weight",
           "attn_k.weight": "wk.weight", "attn_v.weight": "wv.weight", "attn_output.weight": "wo.weight",
           "ffn_norm.weight": "ffn_norm.weight", "ffn_gate.weight": "w1.weight",
           "ffn_up.weight": "w3.weight", "ffn_down.weight": "w2.weight"}
    for i in range(cfg["n_layers"]):
        for g, s in per.items():
            back[f"blk.{i}.{g}"] = f"layers.{i}.{s}"
    if set(back) != set(r.tensors):
        raise ValueError(f"{path}: unexpected tensor set {sorted(set(r.tensors) ^ set(back))}")
    for g, s in back.items():
        state[s] = torch.from_numpy(np.array(r.tensor(g), dtype=np.float64)).to(dtype)
    model.load_state_dict(state)
    r.close()
    return model, cfg


# ---------------------------------------------------------------------------------------------------------
# Evaluation.

def heldout_nll(torch, model, ids, ctx, stride):
    """Summed NLL (nats) of every non-BOS token of the held-out stream, each scored once with at least
    ctx - stride tokens of context (except near the start), and the number of tokens scored."""
    import torch.nn.functional as F
    total, count = 0.0, 0
    ids_t = torch.from_numpy(ids)
    scored_upto = 0  # targets [1, scored_upto) done
    begin = 0
    with torch.no_grad():
        while scored_upto < len(ids):
            end = min(begin + ctx + 1, len(ids))
            window = ids_t[begin:end]
            logits = model(window[None, :-1])[0]
            logp = F.log_softmax(logits.double(), dim=-1)
            tgt = window[1:]
            first = max(scored_upto, begin + 1) - (begin + 1)
            sel = torch.arange(first, len(tgt))
            mask = tgt[sel] != BOS_ID
            total -= logp[sel[mask], tgt[sel][mask]].sum().item()
            count += int(mask.sum())
            scored_upto = end
            if end == len(ids):
                break
            begin += stride
    return total, count


def stage_eval(work, gguf_path):
    torch = setup_torch()
    sp = load_spm(work)
    train_docs, held_docs = read_docs(work, "train.txt"), read_docs(work, "heldout.txt")
    train_ids = encode_docs(sp, train_docs)
    held_ids = encode_docs(sp, held_docs)
    held_bytes = sum(len(d.encode("utf-8")) for d in held_docs)
    model, cfg = load_gguf_model(torch, gguf_path, torch.float32)
    nll, n = heldout_nll(torch, model, held_ids, cfg["ctx_len"], cfg["ctx_len"] // 2)
    # Unigram baseline: token frequencies of the training stream (BOS is never predicted), add-one.
    V = cfg["vocab_size"]
    tr = train_ids[train_ids != BOS_ID]
    counts = np.bincount(tr, minlength=V).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    ho = held_ids[held_ids != BOS_ID]
    uni = -logp[ho].sum()
    res = {
        "heldout_tokens": int(n), "heldout_bytes": int(held_bytes), "heldout_chapters": len(held_docs),
        "model_ppl_token": math.exp(nll / n), "model_ppl_byte": math.exp(nll / held_bytes),
        "model_bits_per_byte": nll / held_bytes / math.log(2),
        "unigram_ppl_token": math.exp(uni / len(ho)), "unigram_ppl_byte": math.exp(uni / held_bytes),
        "unigram_bits_per_byte": uni / held_bytes / math.log(2),
        "train_tokens": int(len(train_ids)),
        "bytes_per_token_heldout": held_bytes / n,
    }
    with open(os.path.join(work, "eval.json"), "w") as f:
        json.dump(res, f, indent=2)
    log("eval: " + json.dumps(res, indent=2))


# Prompts beyond the empty one: ordinary text, and text that needs byte fallback (digits, a non-ASCII
# letter), so the test also checks that Pith's tokenizer reproduces SentencePiece's ids.
PROMPT_CASES = [("And God said", 8), ("Then Jörg counted 1024 sheep", 8)]  # equal lengths


def greedy(torch, model, ids, n_steps):
    """Greedy continuation in the model's dtype: (new ids, logits rows as float32, top-2 gaps)."""
    ids = list(ids)
    gaps, rows = [], []
    with torch.no_grad():
        for _ in range(n_steps):
            logits = model(torch.tensor([ids]))[0, -1]
            top2 = torch.topk(logits, 2)
            gaps.append(float(top2.values[0] - top2.values[1]))
            rows.append(logits.numpy().astype(np.float32))
            ids.append(int(top2.indices[0]))
    return ids[-n_steps:], np.stack(rows), gaps


def stage_expected(work, gguf_path, n_steps=20):
    torch = setup_torch()
    sp = load_spm(work)
    model, cfg = load_gguf_model(torch, gguf_path, torch.float64)
    gen, rows, gaps = greedy(torch, model, [BOS_ID], n_steps)
    if EOS_ID in gen:
        raise ValueError("greedy generation reached EOS within the checked steps")
    text = sp.decode(gen)
    data = os.path.join(ROOT, "tests", "data")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "default_expected.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(data, "default_expected_tokens.txt"), "w") as f:
        f.write(" ".join(map(str, gen)) + "\n")
    np.save(os.path.join(data, "default_expected_logits.npy"), rows)
    log(f"expected: {text!r}")
    log(f"expected: smallest top-2 logit gap {min(gaps):.4f} at step {int(np.argmin(gaps))}; "
        f"gaps {' '.join(f'{g:.3f}' for g in gaps)}")
    cases, case_rows = [], []
    for prompt, n in PROMPT_CASES:
        ids = [BOS_ID] + sp.encode(prompt)
        cgen, crows, cgaps = greedy(torch, model, ids, n)
        # The continuation as it reads after the prompt: its leading space is kept (decoding the new
        # ids alone would drop it, as SentencePiece does at the start of a text).
        full, head = sp.decode(ids[1:] + cgen), sp.decode(ids[1:])
        if not full.startswith(head):
            raise ValueError(f"decoding {prompt!r} is not a prefix of decoding its continuation")
        cases.append({"prompt": prompt, "prompt_ids": ids, "tokens": cgen,
                      "text": full[len(head):] if EOS_ID not in cgen else None, "min_gap": min(cgaps)})
        case_rows.append(crows)
        log(f"expected: {prompt!r} -> {ids} -> {cases[-1]['text']!r} (smallest gap {min(cgaps):.4f})")
    with open(os.path.join(data, "default_expected_prompts.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False, indent=1)
    # Row i of case c: the logits the (i+1)-th generated token of case c was chosen from.
    np.save(os.path.join(data, "default_expected_prompt_logits.npy"), np.stack(case_rows))
    # Tokenizer cases: held-out chapters (real text the tokenizer never saw) and edge cases, with
    # SentencePiece's ids (no BOS; special-token texts are plain text, as SentencePiece treats them).
    held = {len(d): d for d in read_docs(work, "heldout.txt")}
    texts = [held[k] for k in sorted(held)[:3]] + [
        "", " ", "  two leading spaces", "trailing space ", "double  space", "tab\there", "new\nline\n",
        "Ünïcödé ✝ 𝔊 — “quotes”", "digits 0123456789", "<s> and </s> are text here", "LORD, LORD!",
        "supercalifragilisticexpialidocious"]
    tok_cases = [{"text": t, "ids": sp.encode(t)} for t in texts]
    for c in tok_cases:
        if sp.decode(c["ids"]) != c["text"] and c["text"].strip() == c["text"]:
            raise ValueError(f"SentencePiece does not round-trip {c['text']!r}")
    with open(os.path.join(data, "default_tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": tok_cases}, f, ensure_ascii=False, indent=0)
    # A longer sample for the docs.
    more, _, _ = greedy(torch, model, [BOS_ID], 100)
    log(f"expected: 100-token greedy sample: {sp.decode(more)!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stages", nargs="*", default=["all"])
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "default-model"))
    ap.add_argument("--out", default=os.path.join(ROOT, "assets", "default.gguf"))
    ap.add_argument("--steps", type=int, default=None, help="override the step count (benchmarks only)")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="train: stop after this many steps of the real schedule, saving nothing (to compare "
                         "the logged losses with a full run's)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    stages = a.stages
    if stages == ["all"]:
        stages = ["data", "tokenizer", "train", "export", "eval", "expected"]
    for s in stages:
        t0 = time.time()
        if s == "data":
            stage_data(a.work)
        elif s == "tokenizer":
            stage_tokenizer(a.work)
        elif s == "train":
            stage_train(a.work, a.steps, a.stop_after)
        elif s == "export":
            os.makedirs(os.path.dirname(a.out), exist_ok=True)
            stage_export(a.work, a.out)
        elif s == "eval":
            stage_eval(a.work, a.out)
        elif s == "expected":
            stage_expected(a.work, a.out)
        else:
            ap.error(f"unknown stage {s}")
        log(f"stage {s}: {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
