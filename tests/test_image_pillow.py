"""src/image/ against Pillow, the library Hugging Face image processors use (transformers' load_image:
ImageOps.exif_transpose then convert("RGB"); its resize: PIL Image.resize on the uint8 image; then
rescale and normalize in numpy).

tests/image_dump (PITH_IMAGE_DUMP) decodes a file, optionally resizes and normalizes it, and writes the
pixels; each case writes its files with Pillow into a temporary directory and compares.

Tolerances, as measured with the system libjpeg-turbo 2.1 / libpng 1.6 / libwebp 1.2 that both sides
link:
- decoded pixels: exact for every format (PNG and lossless WebP are exact by definition; JPEG and lossy
  WebP are exact because Pillow and src/image/ call the same decoder with the same defaults: islow IDCT,
  fancy upsampling). A JPEG or lossy-WebP difference is allowed up to JPEG_TOL / WEBP_TOL levels so
  that a Pillow built against another libjpeg does not fail the suite; the measured maximum is printed.
- resize: at most 1 level (RESIZE_TOL). src/image/resize.c uses PIL's arithmetic (normalized weights in
  22-bit fixed point, rounding to uint8 after each pass), so the only possible difference is a weight
  computed in floating point that lands on the other side of a rounding boundary; measured: 0.
  NEAREST picks whole pixels and must be exact.
- the normalized tensor: 1e-6 absolute (the rescale factor is passed as a float32 while transformers
  multiplies by the float64 1/255; after the division by std that is a few 1e-8).
- 16-bit grayscale PNG is the one deliberate difference: Pillow 9 opens it in mode I and convert("RGB")
  clips every value above 255 to white; src/image/ takes the high byte, as Pillow itself does for 16-bit
  RGB and RGBA. That case is checked against the high byte, not against Pillow.

Bad input (corrupt, truncated at many points, a header claiming 30000x30000, empty, random bytes,
GIF/BMP/TIFF) must give exit status 1 and exactly one stderr line starting "image: " (a sanitizer or
leak report would add lines: the ASan build runs this same test).

Exit 77 (skip) without numpy or PIL (Debian: python3-numpy python3-pil) or outside ctest."""
import io
import math
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

from pithtest import main, skip

try:
    import numpy as np
    from PIL import Image, ImageOps
except ImportError:
    skip("numpy and PIL are needed (Debian: python3-numpy python3-pil)")

DUMP = os.environ.get("PITH_IMAGE_DUMP")
if not DUMP or not os.path.exists(DUMP):
    skip("PITH_IMAGE_DUMP is not set or missing (run through ctest)")

JPEG_TOL = 2
WEBP_TOL = 2
RESIZE_TOL = 1
TENSOR_TOL = 1e-6

RESAMPLE = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC,
            "lanczos": Image.LANCZOS}
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

TMP = tempfile.mkdtemp(prefix="pith-image-", dir=os.environ.get("PITH_TEST_TMP"))
measured = {}


def note(key, value):
    measured[key] = max(measured.get(key, 0), value)


def picture(w, h, seed=0):
    """Gradients with noise: smooth enough for JPEG, varied enough that every filter tap matters."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), ((x * 3 + y * 5) * 7) % 256], -1)
    return np.clip(a + rng.integers(-24, 25, (h, w, 3)), 0, 255).astype(np.uint8)


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def save(im, name, **kw):
    path = os.path.join(TMP, name)
    im.save(path, **kw)
    return path


def dump(path, *args):
    """(array or None, stderr text, returncode)"""
    out = path + ".out"
    r = subprocess.run([DUMP, path, out] + [str(a) for a in args], capture_output=True, timeout=120)
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        return None, err, r.returncode
    w, h = map(int, r.stdout.split())
    data = np.fromfile(out, np.float32 if "--tensor" in args else np.uint8)
    os.unlink(out)
    return (data.reshape(3, h, w) if "--tensor" in args else data.reshape(h, w, 3)), err, 0


def pillow_load(path):
    """What transformers.image_utils.load_image gives for a file."""
    with Image.open(path) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(w, h, depth, ctype, raw, interlace=0, extra=b""):
    """A PNG from already filtered scanlines (filter byte + row, pass after pass when interlaced)."""
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


def scanlines(a):
    return b"".join(b"\0" + a[y].tobytes() for y in range(a.shape[0]))


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def adam7(a):
    """Scanlines of a (h, w, c) big-endian sample array in Adam7 pass order; empty passes have none."""
    out = b""
    for x0, y0, dx, dy in ADAM7:
        sub = a[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            out += scanlines(sub)
    return out


def exif_blob(orientation):
    ex = Image.Exif()
    ex[0x0112] = orientation
    return ex.tobytes()


class Decode(unittest.TestCase):
    def check_exact(self, path, expect=None):
        got, err, rc = dump(path)
        self.assertEqual(rc, 0, (path, err))
        ref = pillow_load(path) if expect is None else expect
        self.assertEqual(got.shape, ref.shape, path)
        diff = int(np.abs(got.astype(int) - ref.astype(int)).max())
        self.assertEqual(diff, 0, path)

    def check_close(self, path, tol, key):
        got, err, rc = dump(path)
        self.assertEqual(rc, 0, (path, err))
        ref = pillow_load(path)
        self.assertEqual(got.shape, ref.shape, path)
        diff = int(np.abs(got.astype(int) - ref.astype(int)).max())
        note(key, diff)
        self.assertLessEqual(diff, tol, path)

    def test_png_modes(self):
        base = Image.fromarray(picture(97, 61))
        for mode in ["RGB", "RGBA", "L", "LA", "P", "1"]:  # mode I (16-bit gray): test_png_bit_depths
            with self.subTest(mode=mode):
                self.check_exact(save(base.convert(mode), "mode_%s.png" % mode))
        # a palette with transparency: convert("RGB") keeps the palette colours, ignores tRNS
        p = base.convert("P")
        self.check_exact(save(p, "p_trns.png", transparency=7))
        self.check_exact(save(base.convert("L"), "l_trns.png", transparency=100))

    def test_png_bit_depths(self):
        rng = np.random.default_rng(3)
        w, h = 13, 9
        for depth in (1, 2, 4):
            with self.subTest(depth=depth):
                v = rng.integers(0, 1 << depth, (h, w))
                per = 8 // depth
                rows = b""
                for y in range(h):
                    packed = bytearray()
                    for x0 in range(0, w, per):
                        byte = 0
                        for i in range(per):
                            byte |= (int(v[y, x0 + i]) if x0 + i < w else 0) << (8 - depth * (i + 1))
                        packed.append(byte)
                    rows += b"\0" + bytes(packed)
                self.check_exact(write("gray%d.png" % depth, png(w, h, depth, 0, rows)))
        rgb16 = rng.integers(0, 65536, (h, w, 3)).astype(">u2")
        self.check_exact(write("rgb16.png", png(w, h, 16, 2, scanlines(rgb16))))
        rgba16 = rng.integers(0, 65536, (h, w, 4)).astype(">u2")
        self.check_exact(write("rgba16.png", png(w, h, 16, 6, scanlines(rgba16))))
        # 16-bit gray: the high byte (see the module docstring), not Pillow's clipping
        g16 = rng.integers(0, 65536, (h, w)).astype(">u2")
        hi = (g16.astype(np.uint32) >> 8).astype(np.uint8)
        self.check_exact(write("gray16.png", png(w, h, 16, 0, scanlines(g16))), np.stack([hi] * 3, -1))

    def test_png_interlaced(self):
        for w, h in [(1, 1), (3, 2), (9, 17), (33, 20)]:
            with self.subTest(size=(w, h)):
                a = picture(w, h, seed=w)
                path = write("adam7_%dx%d.png" % (w, h), png(w, h, 8, 2, adam7(a), interlace=1))
                self.check_exact(path, a)
                self.check_exact(path)  # and Pillow agrees
        a16 = np.random.default_rng(4).integers(0, 65536, (11, 7, 3)).astype(">u2")
        self.check_exact(write("adam7_16.png", png(7, 11, 16, 2, adam7(a16), interlace=1)),
                         (a16.astype(np.uint32) >> 8).astype(np.uint8))

    def test_jpeg(self):
        base = Image.fromarray(picture(101, 67))
        cases = {
            "baseline": (base, dict(quality=90)),
            "progressive": (base, dict(quality=85, progressive=True)),
            "optimized": (base, dict(quality=75, optimize=True)),
            "444": (base, dict(quality=95, subsampling=0)),
            "422": (base, dict(quality=95, subsampling=1)),
            "gray": (base.convert("L"), dict(quality=90)),
            "cmyk": (base.convert("CMYK"), dict(quality=90)),
        }
        for name, (im, kw) in cases.items():
            with self.subTest(name=name):
                self.check_close(save(im, "j_%s.jpg" % name, **kw), JPEG_TOL, "jpeg")

    def test_webp(self):
        base = Image.fromarray(picture(83, 59))
        self.check_exact(save(base, "w_lossless.webp", lossless=True))
        self.check_exact(save(base.convert("RGBA"), "w_lossless_rgba.webp", lossless=True))
        self.check_close(save(base, "w_lossy.webp", quality=80), WEBP_TOL, "webp lossy")
        self.check_close(save(base.convert("RGBA"), "w_lossy_rgba.webp", quality=80), WEBP_TOL, "webp lossy")

    def test_webp_animated_first_frame(self):
        frames = [Image.fromarray(picture(40, 30, seed=s)) for s in range(3)]
        path = save(frames[0], "anim.webp", save_all=True, append_images=frames[1:], duration=100, lossless=True)
        with Image.open(path) as im:
            self.assertTrue(im.is_animated)
        self.check_exact(path, np.asarray(frames[0]))
        self.check_exact(path)

    def test_exif_orientation(self):
        base = Image.fromarray(picture(37, 23))
        raw = np.asarray(base)
        for o in range(1, 9):
            for fmt, kw in [("jpg", dict(quality=95)), ("png", {}), ("webp", dict(lossless=True))]:
                with self.subTest(orientation=o, fmt=fmt):
                    path = save(base, "o%d.%s" % (o, fmt), exif=exif_blob(o), **kw)
                    got, err, rc = dump(path)
                    self.assertEqual(rc, 0, err)
                    self.assertEqual(got.shape[:2], (37, 23) if o >= 5 else (23, 37))
                    ref = pillow_load(path)
                    self.assertEqual(got.shape, ref.shape)
                    self.assertLessEqual(int(np.abs(got.astype(int) - ref.astype(int)).max()),
                                         JPEG_TOL if fmt == "jpg" else 0)
                    if fmt != "jpg" and o > 1:
                        self.assertFalse(np.array_equal(got[:23, :23], raw[:23, :23]), "orientation applied")


class Resize(unittest.TestCase):
    def test_filters(self):
        src = picture(640, 480)
        path = save(Image.fromarray(src), "resize_src.png")
        pil = Image.fromarray(src)
        sizes = [(896, 896), (224, 224), (448, 336), (1280, 960), (213, 100), (37, 501), (640, 17),
                 (641, 480), (640, 479), (1, 1), (3, 7), (1919, 3)]
        for name, flt in RESAMPLE.items():
            for w, h in sizes:
                with self.subTest(filter=name, size=(w, h)):
                    got, err, rc = dump(path, "--resize", w, h, name)
                    self.assertEqual(rc, 0, err)
                    ref = np.asarray(pil.resize((w, h), flt))
                    diff = int(np.abs(got.astype(int) - ref.astype(int)).max())
                    note("resize " + name, diff)
                    self.assertLessEqual(diff, 0 if name == "nearest" else RESIZE_TOL)

    def test_random_sizes(self):
        rnd = random.Random(5)
        for i in range(24):
            sw, sh = rnd.randint(1, 300), rnd.randint(1, 300)
            w, h = rnd.randint(1, 400), rnd.randint(1, 400)
            name = rnd.choice(list(RESAMPLE))
            src = picture(sw, sh, seed=i)
            path = save(Image.fromarray(src), "rand%d.png" % i)
            with self.subTest(src=(sw, sh), dst=(w, h), filter=name):
                got, err, rc = dump(path, "--resize", w, h, name)
                self.assertEqual(rc, 0, err)
                ref = np.asarray(Image.fromarray(src).resize((w, h), RESAMPLE[name]))
                diff = int(np.abs(got.astype(int) - ref.astype(int)).max())
                note("resize " + name, diff)
                self.assertLessEqual(diff, 0 if name == "nearest" else RESIZE_TOL)


def hf_tensor(pixels, mean, std, scale=1 / 255):
    """transformers' rescale (float64 multiply, cast to float32) and normalize (float32), then CHW."""
    x = (pixels.astype(np.float64) * scale).astype(np.float32)
    x = (x - np.array(mean, dtype=np.float32)) / np.array(std, dtype=np.float32)
    return x.transpose(2, 0, 1)


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """transformers' Qwen2-VL smart_resize (models/qwen2_vl/image_processing_qwen2_vl.py), transcribed."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect ratio")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class Pipelines(unittest.TestCase):
    def tensor(self, path, w, h, flt, mean, std):
        args = ["--resize", w, h, flt, "--tensor"] + ["%.9g" % v for v in mean + std] + ["%.17g" % (1 / 255)]
        got, err, rc = dump(path, *args)
        self.assertEqual(rc, 0, err)
        return got

    def test_gemma3(self):
        """Gemma 3 (SigLIP): 896x896 BILINEAR, rescale 1/255, mean = std = 0.5."""
        for name, im in [("photo.jpg", picture(640, 480)), ("tall.png", picture(300, 1000, seed=2))]:
            path = save(Image.fromarray(im), name, **({"quality": 92} if name.endswith("jpg") else {}))
            got = self.tensor(path, 896, 896, "bilinear", [0.5] * 3, [0.5] * 3)
            pixels = np.asarray(Image.fromarray(pillow_load(path)).resize((896, 896), Image.BILINEAR))
            diff = float(np.abs(got - hf_tensor(pixels, [0.5] * 3, [0.5] * 3)).max())
            note("tensor", diff)
            self.assertLessEqual(diff, TENSOR_TOL)

    def test_qwen_vl(self):
        """Qwen2/3-VL: smart_resize (factor 28; 32 for Qwen3-VL), BICUBIC, CLIP mean/std."""
        src = picture(640, 480, seed=9)
        path = save(Image.fromarray(src), "qwen.png")
        for factor in (28, 32):
            h, w = smart_resize(480, 640, factor, 56 * 56, 28 * 28 * 1280)
            got = self.tensor(path, w, h, "bicubic", CLIP_MEAN, CLIP_STD)
            pixels = np.asarray(Image.fromarray(src).resize((w, h), Image.BICUBIC))
            diff = float(np.abs(got - hf_tensor(pixels, CLIP_MEAN, CLIP_STD)).max())
            note("tensor", diff)
            self.assertLessEqual(diff, TENSOR_TOL)

    def test_smart_size(self):
        rnd = random.Random(11)
        cases = [(480, 640, 28, 3136, 1003520), (1080, 1920, 28, 3136, 1003520), (4000, 3000, 32, 65536, 16777216),
                 (10, 10, 28, 3136, 1003520), (1, 200, 28, 3136, 1003520), (1, 201, 28, 3136, 1003520),
                 (14, 2800, 28, 3136, 1003520), (42, 70, 28, 0, 1 << 40), (70, 42, 28, 3136, 3136),
                 (100000, 600, 14, 3136, 12845056)]
        for _ in range(600):
            h, w = rnd.randint(1, 5000), rnd.randint(1, 5000)
            f = rnd.choice([14, 16, 28, 32])
            lo = rnd.choice([56 * 56, 4 * 28 * 28, 256 * 28 * 28, 0])
            hi = rnd.choice([28 * 28 * 1280, 16384 * 28 * 28, 12845056, lo + 1])
            cases.append((h, w, f, lo, hi))
        lines = "".join("%d %d %d %d %d\n" % c for c in cases)
        r = subprocess.run([DUMP, "--smart-sizes"], input=lines.encode(), capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0)
        outs = r.stdout.decode().splitlines()
        self.assertEqual(len(outs), len(cases))
        for c, out in zip(cases, outs):
            try:
                ref = smart_resize(*c)
            except ValueError:
                ref = None
            if ref is not None and (ref[0] < 1 or ref[1] < 1):
                ref = None  # a zero side (min_pixels 0 on a sliver): refused here, unusable there
            with self.subTest(case=c):
                if ref is None:
                    self.assertTrue(out.startswith("error"), (c, out))
                else:
                    self.assertEqual(tuple(map(int, out.split())), ref, c)


class BadInput(unittest.TestCase):
    def refused(self, data, needle=None, name="bad.bin", *args):
        path = write(name, data)
        got, err, rc = dump(path, *args)
        self.assertEqual(rc, 1, (name, err))
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)  # one line: no sanitizer or leak report
        self.assertTrue(lines[0].startswith("image: "), err)
        if needle:
            self.assertIn(needle, lines[0])
        return lines[0]

    def test_not_images(self):
        self.refused(b"", "empty")
        self.refused(bytes(random.Random(1).getrandbits(8) for _ in range(4096)), "not a JPEG, PNG or WebP")
        im = Image.fromarray(picture(16, 16))
        for fmt, label in [("GIF", "GIF"), ("BMP", "BMP"), ("TIFF", "TIFF")]:
            buf = io.BytesIO()
            im.save(buf, fmt)
            self.refused(buf.getvalue(), "%s images are not supported" % label)

    def test_truncated(self):
        im = Image.fromarray(picture(120, 90))
        files = {}
        for name, kw in [("t.jpg", dict(quality=90)), ("tp.jpg", dict(quality=90, progressive=True)),
                         ("t.png", {}), ("t.webp", dict(quality=80)), ("tl.webp", dict(lossless=True))]:
            buf = io.BytesIO()
            im.save(buf, name.split(".")[1].replace("jpg", "jpeg"), **kw)
            files[name] = buf.getvalue()
        for name, data in files.items():
            n = len(data)
            # the end of the image data: a PNG without its IEND chunk is complete and decodes, as in Pillow
            end = n - 12 if name.endswith("png") else n
            for cut in sorted({3, 8, 12, 20, 40, 100, 200, n // 4, n // 2, 3 * n // 4, end - 2, end - 1}):
                if 0 < cut < end:
                    with self.subTest(name=name, cut=cut):
                        self.refused(data[:cut], None, "cut_" + name)

    def test_corrupt(self):
        im = Image.fromarray(picture(64, 48))
        rnd = random.Random(7)
        for fmt, kw in [("JPEG", {}), ("PNG", {}), ("WEBP", dict(quality=70)), ("WEBP", dict(lossless=True))]:
            buf = io.BytesIO()
            im.save(buf, fmt, **kw)
            data = buf.getvalue()
            for i in range(12):
                b = bytearray(data)
                for _ in range(1 + i):
                    at = rnd.randrange(12, len(b))
                    b[at] = rnd.randrange(256)
                path = write("corrupt.bin", bytes(b))
                got, err, rc = dump(path)
                # a flipped byte may still decode (JPEG and lossy WebP data often do); what matters is one
                # line of error or a whole image, never a crash
                self.assertIn(rc, (0, 1), err)
                if rc == 1:
                    self.assertEqual(len(err.splitlines()), 1, err)
                    self.assertTrue(err.startswith("image: "), err)
                else:
                    self.assertEqual(err, "")
                    self.assertEqual(got.shape, (48, 64, 3))

    def test_pixel_limit_before_allocating(self):
        """A 30000x30000 PNG header (900 Mpixel, 2.7 GB of RGB) is refused from the header: quickly, and
        under an address-space limit that such an allocation would break (skipped under ASan, which
        reserves terabytes of address space)."""
        ihdr_only = png(30000, 30000, 8, 2, b"\0" * 10)
        sanitized = "asan" in os.path.realpath(DUMP) or "sanit" in os.environ.get("ASAN_OPTIONS", "")
        cmake_cache = os.path.join(os.environ.get("PITH_BUILD_DIR", ""), "CMakeCache.txt")
        if os.path.exists(cmake_cache):
            with open(cmake_cache) as f:
                sanitized = sanitized or "PITH_SANITIZE:BOOL=ON" in f.read()
        path = write("huge.png", ihdr_only)

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

        t = time.time()
        r = subprocess.run([DUMP, path, path + ".out"], capture_output=True, timeout=30,
                           preexec_fn=None if sanitized else limit)
        self.assertLess(time.time() - t, 5)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"30000x30000, more than the limit", r.stderr)
        # the same for JPEG and WebP headers, and a lower limit on a real file
        jpeg_hdr = io.BytesIO()
        Image.fromarray(picture(16, 16)).save(jpeg_hdr, "JPEG")
        j = bytearray(jpeg_hdr.getvalue())
        sof = j.index(b"\xff\xc0")
        j[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
        self.refused(bytes(j), "60000x60000, more than the limit", "huge.jpg")
        vp8x = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0" + (16383).to_bytes(3, "little") * 2
        self.refused(b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x, "more than the limit", "huge.webp")
        small = save(Image.fromarray(picture(100, 100)), "limit.png")
        with open(small, "rb") as f:
            data = f.read()
        self.assertIn("more than the limit of 9999 pixels", self.refused(data, None, "limit.png", "--max-pixels", 9999))
        got, err, rc = dump(small, "--max-pixels", 10000)
        self.assertEqual(rc, 0, err)

    def test_zero_size(self):
        self.refused(png(0, 5, 8, 2, b""), None, "zero.png")
        buf = io.BytesIO()
        Image.fromarray(picture(16, 16)).save(buf, "JPEG")
        j = bytearray(buf.getvalue())
        sof = j.index(b"\xff\xc0")
        j[sof + 5:sof + 7] = b"\0\0"
        self.refused(bytes(j), None, "zero.jpg")


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
        print("measured maximum differences vs Pillow: " +
              ", ".join("%s %g" % kv for kv in sorted(measured.items())), file=sys.stderr)
