"""Images through `pith serve --mmproj` (docs/multimodal.md): test-gemma3 with Gemma 3's image tokens in its
vocabulary (tools/mkmodel.py --image-tokens) and a random SigLIP projector (test_ref_siglip.write_mmproj),
and a local HTTP server standing in for remote hosts.

Checks: a data: URL PNG answers 200 and the image's tokens count in usage; the same request again gives the
same tokens from the prefix cache; another image changes the logprobs; the same PNG fetched from an allowed
host gives the very tokens of the data: URL (and hits the cache); n = 2; Responses input_image and the
Messages API's image block. Bad input, each a 4xx with its code and the server healthy afterwards: a
corrupt PNG, a truncated one, a 30000x30000 PNG header, a non-image data: URL, a host off the allow list
(no connection made), a redirect off it, a slow server (the fetch timeout), too many images, an image_url
without a URL; and a server without --mmproj refuses image parts.

Several models (the same two files): `-m a=... -m b=... --mmproj a=PROJ` answers an image for a with its
tokens in usage and refuses it for b (unsupported_content, naming b) while b answers text, and a's loaded
bytes exceed b's by the projector file; a --models-dir model c as a directory holding its GGUF and
mmproj-c.gguf takes images (neither that file nor a mmproj*.gguf beside the models is listed as a model),
and a directory with two mmproj files fails its load with both named while the server goes on; a plain
--mmproj FILE with two models, --mmproj NAME=FILE with an unknown NAME, and two projectors for one model
are startup errors. A Hugging Face directory with its vision tower (the same weights) takes images with no
--mmproj, served alone (the start-up summary names it as the projector) and beside a GGUF model that
refuses them.

The numerics of the encoder and the engine's image spans are test_ref_siglip's and
test_ref_gemma3_vision's. Last, `pith bench --mmproj` runs both image tests and reports positive times and
shares of the peak. Skipped without numpy or PIL."""

import base64
import http.server
import io
import os
import struct
import sys
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import pithtest  # noqa: E402
from pithtest import Server, pith_bin  # noqa: E402

pith_bin()
try:
    import numpy as np
    from PIL import Image
except ImportError:
    pithtest.skip("numpy or PIL is missing (Debian: python3-numpy python3-pil)")
try:
    import test_ref_siglip as S  # noqa: E402
except SystemExit:
    pithtest.skip("test_ref_siglip's modules are missing (torch)")
import mkmodel  # noqa: E402

IMAGE = 112
VISION = dict(S.SO400M, dim=64, ffn=96, heads=4, out_dim=256, pool=2)
TPI = (IMAGE // VISION["patch"] // VISION["pool"]) ** 2

failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def png(color, size=(40, 30)):
    b = io.BytesIO()
    Image.new("RGB", size, color).save(b, "PNG")
    return b.getvalue()


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


def huge_png_header():
    """A valid PNG signature and IHDR for 30000x30000 RGB, then a little IDAT: the decoder must refuse it
    from the header, before allocating 2.7 GB."""
    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b"")


def data_url(b, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(b).decode()


def image_part(url):
    return {"type": "image_url", "image_url": {"url": url}}


def chat(url_or_parts, text="Describe the image.", **kw):
    parts = url_or_parts if isinstance(url_or_parts, list) else [image_part(url_or_parts)]
    body = {"messages": [{"role": "user", "content": parts + [{"type": "text", "text": text}]}],
            "max_tokens": 6, "temperature": 0}
    body.update(kw)
    return body


class Remote(http.server.BaseHTTPRequestHandler):
    """The stand-in for remote hosts: /img.png, /slow.png (answers after 3 s), /redirect-off (to a host
    off the list), /redirect-on (to /img.png here). Counts the requests by path."""
    seen = {}
    body = b""

    def do_GET(self):
        Remote.seen[self.path] = Remote.seen.get(self.path, 0) + 1
        if self.path == "/slow.png":
            time.sleep(3)
        if self.path.startswith("/redirect"):
            port = self.server.server_address[1]
            to = (f"http://localhost:{port}/img.png" if self.path == "/redirect-off"
                  else f"http://127.0.0.1:{port}/img.png")
            self.send_response(302)
            self.send_header("Location", to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(Remote.body)))
        self.end_headers()
        try:
            self.wfile.write(Remote.body)
        except OSError:
            pass

    def log_message(self, *a):
        pass


def code_of(r):
    return r[1].get("error", {}).get("code") if isinstance(r[1], dict) else None


def text_chat(**kw):
    body = {"messages": [{"role": "user", "content": "Describe the image."}], "max_tokens": 6, "temperature": 0}
    body.update(kw)
    return body


def several_models(tmp, model, mmproj, red):
    """Images with several models per server: a projector per model (--mmproj NAME=FILE, a mmproj*.gguf in a
    --models-dir directory), a model without one refusing images, and the startup errors."""
    admin = "images-admin-key"
    with Server(["-m", f"a={model}", "-m", f"b={model}", "--mmproj", f"a={mmproj}", "--admin-key", admin,
                 "-t", "2"]) as s:
        text_a = s.post("/v1/chat/completions", text_chat(model="a"))
        img_a = s.post("/v1/chat/completions", chat(data_url(red), model="a"))
        check(text_a[0] == 200 and img_a[0] == 200, f"several models: text and image to a: {text_a[0]} {img_a[0]} {img_a[1]}")
        if text_a[0] == 200 and img_a[0] == 200:
            extra = img_a[1]["usage"]["prompt_tokens"] - text_a[1]["usage"]["prompt_tokens"]
            check(extra >= TPI + 2, f"several models: a's image adds {extra} prompt tokens (at least {TPI} + 2)")
        bytes_a = s.metric("pith_models_loaded_bytes")
        img_b = s.post("/v1/chat/completions", chat(data_url(red), model="b"))
        msg = img_b[1].get("error", {}).get("message", "") if isinstance(img_b[1], dict) else ""
        check(img_b[0] == 400 and code_of(img_b) == "unsupported_content" and "'b'" in msg,
              f"several models: an image to b (no projector) is refused: {img_b[0]} {code_of(img_b)} {msg}")
        text_b = s.post("/v1/chat/completions", text_chat(model="b"))
        check(text_b[0] == 200 and text_a[0] == 200 and text_b[1]["choices"] == text_a[1]["choices"],
              f"several models: b answers text (as a does): {text_b[0]}")
        bytes_b = s.metric("pith_models_loaded_bytes") - bytes_a
        size = os.path.getsize(mmproj)
        check(bytes_a - bytes_b == size, f"--models-mem accounting: a ({bytes_a:.0f} bytes) counts its projector "
              f"({size}) beyond b ({bytes_b:.0f})")
        rc = s.close()
        check(rc == 0, f"several models: the server drains and exits 0: {rc}")

    # --models-dir: c/ holds a model and its projector; d/ a model and two projectors; a projector beside
    # the models is none of them
    mdir = os.path.join(tmp, "models-dir")
    if os.path.exists(mdir):
        import shutil
        shutil.rmtree(mdir)
    for sub, projs in (("c", ["mmproj-c.gguf"]), ("d", ["mmproj-1.gguf", "mmproj-2.gguf"])):
        os.makedirs(os.path.join(mdir, sub))
        os.symlink(model, os.path.join(mdir, sub, "model.gguf"))
        for p in projs:
            os.symlink(mmproj, os.path.join(mdir, sub, p))
    os.symlink(model, os.path.join(mdir, "plain.gguf"))
    os.symlink(mmproj, os.path.join(mdir, "mmproj-stray.gguf"))
    with Server(["--models-dir", mdir, "--admin-key", admin, "-t", "2"]) as s:
        import json
        import urllib.request
        with urllib.request.urlopen(s.base + "/v1/models", timeout=30) as r:
            ids = sorted(m["id"] for m in json.loads(r.read())["data"])
        check(ids == ["c", "d", "plain"], f"--models-dir lists c, d and plain, no projector: {ids}")
        text_c = s.post("/v1/chat/completions", text_chat(model="c"))
        img_c = s.post("/v1/chat/completions", chat(data_url(red), model="c"))
        check(text_c[0] == 200 and img_c[0] == 200, f"--models-dir: c/ with mmproj-c.gguf takes an image: {img_c[0]} {img_c[1]}")
        if text_c[0] == 200 and img_c[0] == 200:
            extra = img_c[1]["usage"]["prompt_tokens"] - text_c[1]["usage"]["prompt_tokens"]
            check(extra >= TPI + 2, f"--models-dir: c's image adds {extra} prompt tokens")
        plain = s.post("/v1/chat/completions", chat(data_url(red), model="plain"))
        check(plain[0] == 400 and code_of(plain) == "unsupported_content", f"--models-dir: plain.gguf takes no images: {plain[0]}")
        d = s.post("/v1/admin/models/load", {"model": "d"}, key=admin)
        msg = d[1].get("error", {}).get("message", "") if isinstance(d[1], dict) else ""
        check(d[0] == 500 and "mmproj-1.gguf" in msg and "mmproj-2.gguf" in msg,
              f"--models-dir: d/ with two projectors fails to load, naming them: {d[0]} {msg}")
        again = s.post("/v1/chat/completions", chat(data_url(red), model="c"))
        check(again[0] == 200, f"--models-dir: the server goes on after d's failure: {again[0]}")

    # startup errors: exit non-zero at once with the reason
    for what, args, want in (
            ("a plain --mmproj FILE with two models", ["--mmproj", mmproj], "NAME=FILE"),
            ("--mmproj with an unknown NAME", ["--mmproj", f"nosuch={mmproj}"], "nosuch"),
            ("two projectors for one model", ["--mmproj", f"a={mmproj}", "--mmproj", f"a={mmproj}"], "two projectors")):
        r = pithtest.run_pith(["serve", "--port", "0", "-m", f"a={model}", "-m", f"b={model}"] + args, timeout=30)
        err = r.stderr.decode()
        check(r.returncode != 0 and want in err, f"{what}: exit {r.returncode}, {err.strip()[-200:]}")


def vision_in_model(tmp, model, vision_w, red):
    """A Hugging Face directory carrying its vision tower (pith_vision_in_model) is its own projector, with
    one model and with several; its tokenizer (with the image tokens) is the GGUF's, as the directory has
    none."""
    if not hasattr(S, "write_hf_multimodal"):
        print("skip: test_ref_siglip cannot write a Hugging Face directory")
        return
    hf = S.write_hf_multimodal(os.path.join(tmp, "hf-gemma3"), mkmodel.build_config("test-gemma3", image_tokens=True),
                               VISION, vision_w, IMAGE, VISION["pool"], 4200)
    with Server(["-m", hf, "--tokenizer", model, "-t", "2"]) as s:
        text = s.post("/v1/chat/completions", text_chat())
        img = s.post("/v1/chat/completions", chat(data_url(red)))
        extra = img[1]["usage"]["prompt_tokens"] - text[1]["usage"]["prompt_tokens"] if img[0] == text[0] == 200 else -1
        check(extra >= TPI + 2, f"one model, a directory with its vision tower, no --mmproj: {img[0]}, the image adds {extra} tokens")
        check(any("projector" in line and hf in line for line in s.log),
              "the start-up summary names the directory as the projector")
    with Server(["-m", f"h={hf}", "-m", f"g={model}", "--tokenizer", model, "-t", "2"]) as s:
        img_h = s.post("/v1/chat/completions", chat(data_url(red), model="h"))
        img_g = s.post("/v1/chat/completions", chat(data_url(red), model="g"))
        check(img_h[0] == 200 and img_g[0] == 400 and code_of(img_g) == "unsupported_content",
              f"several models: the directory h takes images, the GGUF g without a projector does not: {img_h[0]} {img_g[0]}")


def main():
    tmp = os.path.join(pithtest.tmp_dir(), "server_images")
    os.makedirs(tmp, exist_ok=True)
    model = os.path.join(tmp, "test-gemma3-image-tokens.gguf")
    mkmodel.write_gguf(mkmodel.build_config("test-gemma3", image_tokens=True), model, "F32", seed=4200)
    mmproj = os.path.join(tmp, "mmproj.gguf")
    vision_w = S.make_weights(VISION, 2, IMAGE, seed=4201)
    S.write_mmproj(mmproj, VISION, vision_w, IMAGE, pool=VISION["pool"])

    red, blue = png((200, 20, 20)), png((20, 20, 200), (64, 48))
    Remote.body = red
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Remote)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    here = f"http://127.0.0.1:{port}"

    with Server(["-m", model, "--mmproj", mmproj, "--allowed-media-domains", "127.0.0.1", "--media-timeout", "1",
                 "-t", "2"]) as s:
        text_only = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Describe the image."}],
                                                     "max_tokens": 6, "temperature": 0})
        check(text_only[0] == 200, f"text request: {text_only[0]}")
        a = s.post("/v1/chat/completions", chat(data_url(red), logprobs=True))
        check(a[0] == 200, f"data: URL PNG: {a[0]} {a[1]}")
        if a[0] == 200:
            extra = a[1]["usage"]["prompt_tokens"] - text_only[1]["usage"]["prompt_tokens"]
            check(extra >= TPI + 2, f"the image adds {extra} prompt tokens (at least its {TPI} and its markers)")
            again = s.post("/v1/chat/completions", chat(data_url(red), logprobs=True))
            check(again[0] == 200 and again[1]["choices"][0]["message"] == a[1]["choices"][0]["message"],
                  "the same image again: the same reply")
            cached = again[1]["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            check(cached >= TPI, f"the same image again: {cached} cached tokens")
            other = s.post("/v1/chat/completions", chat(data_url(blue), logprobs=True))
            lp = lambda r: [t["logprob"] for t in r[1]["choices"][0]["logprobs"]["content"]]  # noqa: E731
            check(other[0] == 200 and lp(other) != lp(a), "another image changes the logprobs")
            remote = s.post("/v1/chat/completions", chat(here + "/img.png", logprobs=True))
            check(remote[0] == 200 and lp(remote) == lp(a), f"the same PNG from an allowed host: {remote[0]}")
            redirected = s.post("/v1/chat/completions", chat(here + "/redirect-on", logprobs=True))
            check(redirected[0] == 200 and lp(redirected) == lp(a), f"a redirect on the list: {redirected[0]}")
            two = s.post("/v1/chat/completions", chat(data_url(red), n=2))
            check(two[0] == 200 and len(two[1]["choices"]) == 2, f"n = 2: {two[0]}")
            resp = s.post("/v1/responses", {"input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": data_url(red)}, {"type": "input_text", "text": "Describe."}]}],
                "max_output_tokens": 4, "temperature": 0})
            check(resp[0] == 200 and resp[1]["usage"]["input_tokens"] >= TPI, f"Responses input_image: {resp[0]} {resp[1]}")
            msg = s.post("/v1/messages", {"model": "test-gemma3-image-tokens", "max_tokens": 4, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(red).decode()}},
                {"type": "text", "text": "Describe."}]}]})
            check(msg[0] == 200 and msg[1]["usage"]["input_tokens"] >= TPI, f"Messages image block: {msg[0]} {msg[1]}")

        bad = [
            ("a corrupt PNG", data_url(b"\x89PNG\r\n\x1a\n" + os.urandom(200)), 400, "invalid_image"),
            ("a truncated PNG", data_url(red[:len(red) // 2]), 400, "invalid_image"),
            ("a 30000x30000 PNG header", data_url(huge_png_header()), 400, "invalid_image"),
            ("a non-image data: URL", data_url(b"hello", "text/plain"), 400, "invalid_image"),
            ("a host off the list", f"http://localhost:{port}/off.png", 400, "media_domain_not_allowed"),
            ("a redirect off the list", here + "/redirect-off", 400, "media_domain_not_allowed"),
            ("a slow server", here + "/slow.png", 400, "media_fetch_timeout"),
            ("a file: URL", "file:///etc/passwd", 400, "invalid_image_url"),
        ]
        for what, url, status, code in bad:
            t0 = time.time()
            r = s.post("/v1/chat/completions", chat(url), timeout=30)
            check(r[0] == status and code_of(r) == code, f"{what}: {r[0]} {code_of(r)} in {time.time() - t0:.1f} s")
        check(Remote.seen.get("/off.png", 0) == 0, "no connection to a host off the list")
        many = s.post("/v1/chat/completions", chat([image_part(data_url(red))] * 17))
        check(many[0] == 400, f"17 images: {many[0]}")
        nourl = s.post("/v1/chat/completions", chat([{"type": "image_url", "image_url": {}}]))
        check(nourl[0] == 400, f"an image_url part without a URL: {nourl[0]}")
        after = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Describe the image."}],
                                                "max_tokens": 6, "temperature": 0})
        check(after[0] == 200 and after[1]["choices"] == text_only[1]["choices"],
              "the server is healthy afterwards (a text request answers as before)")
        rc = s.close()
        check(rc == 0, f"the server drains and exits 0 (sanitizer builds report leaks here): {rc}")

    with Server(["-m", model, "-t", "2"]) as s:
        r = s.post("/v1/chat/completions", chat(data_url(red)))
        check(r[0] == 400 and code_of(r) == "unsupported_content", f"no --mmproj: {r[0]} {code_of(r)}")
    httpd.shutdown()

    several_models(tmp, model, mmproj, red)
    vision_in_model(tmp, model, vision_w, red)

    # pith run --image and --chat's /image
    red_path, bad_path = os.path.join(tmp, "red.png"), os.path.join(tmp, "bad.png")
    with open(red_path, "wb") as f:
        f.write(red)
    with open(bad_path, "wb") as f:
        f.write(red[:len(red) // 2])
    args = ["run", "-m", model, "--mmproj", mmproj, "-n", "5", "--temp", "0", "-t", "2"]
    one = pithtest.run_pith(args + ["--image", red_path, "-p", "Describe it."])
    two = pithtest.run_pith(args + ["--image", red_path, "-p", "Describe it."])
    none = pithtest.run_pith(["run", "-m", model, "-n", "5", "--temp", "0", "-t", "2", "-p", "Describe it."])
    check(one.returncode == 0 and one.stdout == two.stdout, f"pith run --image: exit {one.returncode}, the same twice")
    import re
    count = lambda r: int(re.search(rb"prompt (\d+) tokens", r.stderr).group(1)) if re.search(rb"prompt (\d+) tokens", r.stderr) else -1  # noqa: E731
    check(count(one) >= count(none) + TPI + 2 and count(none) > 0,
          f"pith run --image: the image adds its tokens ({count(one)} against {count(none)} without)")
    r = pithtest.run_pith(args + ["--image", bad_path, "-p", "Describe it."])
    check(r.returncode == 1 and b"bad.png" in r.stderr, f"pith run --image with a truncated PNG: exit {r.returncode}, "
          f"{r.stderr.decode()[-200:]}")
    chat_in = f"/image {red_path}\nDescribe it.\n/image {bad_path}\nAnd now?\n".encode()
    r = pithtest.run_pith(args + ["--chat"], input=chat_in)
    err_text = r.stderr.decode()
    check(r.returncode == 0 and "goes with your next message" in err_text and "bad.png" in err_text,
          f"pith run --chat with /image (a good one, then a bad one the chat survives): exit {r.returncode} {err_text[-300:]}")

    # pith bench's image mode: both tests, their numbers and their shares of the peak
    import json
    r = pithtest.run_pith(["bench", "-m", model, "--mmproj", mmproj, "-r", "2", "-t", "1", "--json"], timeout=300)
    rows = [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")]
    tests = {row["test"]: row for row in rows}
    check(r.returncode == 0 and set(tests) == {"image-encode", "image-prefill"},
          f"pith bench --mmproj: exit {r.returncode}, tests {sorted(tests)} {r.stderr.decode()[-300:]}")
    if set(tests) == {"image-encode", "image-prefill"}:
        enc, pre = tests["image-encode"], tests["image-prefill"]
        check(enc["tokens"] == TPI and enc["ms_mean"] > 0 and 0 < enc["of_peak"] < 1.5,
              f"bench: encode {enc['ms_mean']} ms, {enc['of_peak']:.3f} of peak")
        check(pre["image_tokens"] == TPI and pre["tok_s_mean"] > 0 and 0 < pre["of_peak"] < 1.5,
              f"bench: image prefill {pre['tok_s_mean']} tok/s, {pre['of_peak']:.3f} of peak")
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
