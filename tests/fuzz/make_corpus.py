#!/usr/bin/python3
"""Writes the generated seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/.

Run from anywhere: /usr/bin/python3 (Debian's, with numpy) tests/fuzz/make_corpus.py. The output is deterministic and committed; the
hand-written seeds next to the generated ones (and inputs saved by scripts/fuzz.sh) are left alone.
Models are tiny random-weight ones from tools/mkmodel.py (a few KB each, under libFuzzer's -max_len)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import mkmodel  # noqa: E402

CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


SMALL = ["--dim", "8", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--ffn", "16", "--vocab", "300",
         "--ctx", "32"]
MODELS = {
    "llama": ["--arch", "llama"] + SMALL,
    "qwen2": ["--arch", "qwen2"] + SMALL,
    "gemma3": ["--arch", "gemma3", "--dim", "8", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--ffn",
               "16", "--vocab", "300", "--ctx", "32", "--sliding-window", "4"],
    "llama-q8": ["--arch", "llama", "--dim", "32", "--layers", "1", "--heads", "2", "--kv-heads", "2", "--ffn",
                 "32", "--vocab", "260", "--ctx", "32", "--dtype", "Q8_0"],
}


def mk(args, out):
    if mkmodel.main(args + ["--out", out]) != 0:
        raise SystemExit(f"mkmodel failed: {args}")


def byte_level_tokenizer():
    """A GPT-2-style byte-level BPE tokenizer.json: the 256-byte alphabet, a few merges and added tokens."""
    def byte_char(b):
        if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174:
            return chr(b)
        return chr(256 + (b if b <= 32 else b - 127 + 33 if b <= 160 else 67))
    vocab = {byte_char(b): b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("\u0120", "w"), ("o", "r"), ("\u0120w", "or"),
              ("l", "d"), ("\u0120wor", "ld")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added = []
    for text in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        added.append({"id": len(vocab), "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
        vocab[text] = len(vocab)
    return json.dumps({
        "version": "1.0", "added_tokens": added, "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                   "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges],
                  "byte_fallback": False},
    }, ensure_ascii=False)


def spm_tokenizer():
    """A JSON SentencePiece-style (Metaspace + byte fallback) tokenizer.json."""
    pieces, scores, types = mkmodel.vocabulary(300)
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = []
    for p in pieces[259:]:
        if len(p) == 2:
            merges.append(f"{p[0]} {p[1]}")
    return json.dumps({
        "added_tokens": [{"id": 1, "content": "<s>", "special": True}, {"id": 2, "content": "</s>", "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                    {"Sequence": {"id": "A", "type_id": 0}}]},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                                      "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": True, "unk_token": "<unk>"},
    }, ensure_ascii=False)


def varint(v):
    out = b""
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def spm_model(n_vocab, byte_fallback=True):
    """A SentencePiece BPE ModelProto: pieces (text, score, type), trainer_spec, normalizer_spec."""
    pieces, scores, types = mkmodel.vocabulary(n_vocab)
    out = b""
    for p, s, t in zip(pieces, scores, types):
        out += field(1, 2, field(1, 2, p.encode()) + field(2, 5, struct.pack("<f", s)) + field(3, 0, varint(t)))
    trainer = field(3, 0, varint(2)) + field(35, 0, varint(int(byte_fallback))) + field(40, 0, varint(0)) + \
        field(41, 0, varint(1)) + field(42, 0, varint(2)) + field(43, 0, varint(-1))
    out += field(2, 2, trainer) + field(3, 2, field(3, 0, varint(1)))
    return out


def images():
    """The image target (fuzz_image.c): small encoded images (a few hundred bytes) reaching each decoder path: JPEG baseline,
    progressive, gray, CMYK and with an EXIF orientation; PNG RGB, RGBA, gray, palette with tRNS, 16-bit
    and with eXIf; WebP lossy, lossless with alpha, animated and with EXIF. Pillow writes them."""
    import io
    from PIL import Image
    px = bytes((x * 37 + y * 11 + c * 90) % 256 for y in range(6) for x in range(8) for c in range(3))
    rgb = Image.frombytes("RGB", (8, 6), px)

    def enc(im, fmt, **kw):
        buf = io.BytesIO()
        im.save(buf, fmt, **kw)
        return buf.getvalue()

    exif = Image.Exif()
    exif[0x0112] = 6
    put("image", "baseline.jpg", enc(rgb, "JPEG", quality=50, optimize=True))
    put("image", "progressive.jpg", enc(rgb, "JPEG", quality=50, progressive=True))
    put("image", "gray.jpg", enc(rgb.convert("L"), "JPEG", quality=50, optimize=True))
    put("image", "cmyk.jpg", enc(rgb.convert("CMYK"), "JPEG", quality=50, optimize=True))
    put("image", "exif6.jpg", enc(rgb, "JPEG", quality=50, optimize=True, exif=exif.tobytes()))
    put("image", "rgb.png", enc(rgb, "PNG"))
    put("image", "rgba.png", enc(rgb.convert("RGBA"), "PNG"))
    put("image", "gray.png", enc(rgb.convert("L"), "PNG"))
    put("image", "palette-trns.png", enc(rgb.convert("P", palette=Image.ADAPTIVE, colors=4), "PNG",
                                              transparency=1))
    put("image", "gray16.png", enc(rgb.convert("L").convert("I"), "PNG"))
    put("image", "exif6.png", enc(rgb, "PNG", exif=exif.tobytes()))
    put("image", "lossy.webp", enc(rgb, "WEBP", quality=50))
    put("image", "lossless-alpha.webp", enc(rgb.convert("RGBA"), "WEBP", lossless=True))
    put("image", "exif6.webp", enc(rgb, "WEBP", lossless=True, exif=exif.tobytes()))
    put("image", "anim.webp", enc(rgb, "WEBP", save_all=True, append_images=[rgb.rotate(90)], duration=50,
                                        lossless=True))


def main():
    images()
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in MODELS.items():
            path = os.path.join(tmp, name + ".gguf")
            mk(args, path)
            put("gguf", name + ".gguf", open(path, "rb").read())
            if name == "llama-q8":
                continue
            d = os.path.join(tmp, name + "-hf")
            mk(args + ["--format", "safetensors"], d)
            cfg = open(os.path.join(d, "config.json"), "rb").read()
            st = open(os.path.join(d, "model.safetensors"), "rb").read()
            put("safetensors", name, cfg + b"\0" + st)
        bin_path = os.path.join(tmp, "tok.bin")
        mkmodel.write_tokenizer_bin(bin_path, 300)
        put("llama2c_tok", "tok300", b"\0" + open(bin_path, "rb").read())
        put("llama2c_tok", "tok300-first100", b"\x64" + open(bin_path, "rb").read())
    put("tokenizer_json", "bytelevel.json", byte_level_tokenizer())
    put("tokenizer_json", "spm.json", spm_tokenizer() + "\0" + json.dumps(
        {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
         "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}))
    put("spm_model", "bpe300.model", spm_model(300))
    put("spm_model", "bpe300-nofallback.model", spm_model(300, byte_fallback=False))
    # Chat templates: every template shipped in tests/chat.
    chat = os.path.join(ROOT, "tests", "chat")
    for f in sorted(os.listdir(chat)):
        if f.endswith(".jinja"):
            put("jinja_template", f, open(os.path.join(chat, f), "rb").read())
    convs = json.load(open(os.path.join(chat, "conversations.json")))
    items = convs.items() if isinstance(convs, dict) else enumerate(convs)
    for i, (key, conv) in enumerate(items):
        msgs = conv.get("messages", conv) if isinstance(conv, dict) else conv
        put("jinja_messages", f"conv{i}", bytes([i]) + json.dumps(msgs, ensure_ascii=False).encode())
    # Tokenizer text: byte 0 = tokenizer (bit 0), ADD_BOS (2), PARSE_SPECIAL (4), ids as int16 (8).
    texts = ["Hello world", "And God said, Let there be light: and there was light.", "<s>x</s> <|im_start|>",
             "caf\u00e9 \U0001F600 \u4e2d\u6587", "  lead\n\ttabs\r\n", "\u0301\u00e9e\u0301 nfc"]
    for i, t in enumerate(texts):
        put("tok_encode", f"text{i}", bytes([i % 8]) + t.encode())
    put("tok_encode", "invalid-utf8", b"\x07\xff\xfe\xc3(\xe2\x82\xf0\x9f\x98")
    put("tok_encode", "ids", b"\x08" + struct.pack("<12h", 1, 300, 3 + 0xE2, 3 + 0x82, 3 + 0xAC, -1, 2, 5000, 0,
                                                     3 + 0xF0, 3 + 0x9F, 260))
    # HTTP bodies: byte 0 = endpoint (0 completions, 1 chat completions, 2 tokenize, 3 detokenize).
    bodies = [
        (0, {"prompt": "And God said", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n", "."],
             "n": 2, "seed": 7, "logprobs": 3, "stream": True, "stream_options": {"include_usage": True}}),
        (0, {"prompt": [[1, 2, 3], "text", [4]], "max_tokens": 1, "model": "pith", "stop_token_ids": [2]}),
        (0, {"prompt": [1, 5, 9], "best_of": 1, "priority": 3, "cache_salt": "s", "ignore_eos": True}),
        (0, {"prompt": "x", "echo": True}),
        (1, {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
             "max_completion_tokens": 4, "top_logprobs": 2, "logprobs": True, "response_format": {"type": "text"}}),
        (1, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
             "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
             "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": False}),
        (1, {"messages": [{"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "content": "1"}]}),
        (2, {"prompt": "Hello <s> world", "add_special_tokens": False}),
        (2, {"messages": [{"role": "user", "content": "Hi"}], "model": "pith"}),
        (3, {"tokens": [1, 100, 200, 2]}),
        (3, {"tokens": [1.5, -1, 99999999999]}),
    ]
    for i, (ep, body) in enumerate(bodies):
        put("http", f"body{i}", bytes([ep]) + json.dumps(body).encode())
    put("http", "not-json", b"\x00{\"prompt\": ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
