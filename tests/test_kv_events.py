"""KV-cache events (docs/kv-events.md) from a real `pith serve --kv-events`, read as llm-d's KV indexer
reads them.

The default model (assets/default.gguf, no download) serves a workload with prefix hits, evictions
(a KV pool of 40 blocks of 4 tokens), preemption (concurrent long requests) and a cache flush (sleep and
wake). A ZeroMQ subscriber follows it and checks, message by message: three frames (topic, 8-byte big
endian sequence number, payload), sequence numbers 0, 1, 2... without a gap, the msgpack payload
field by field as llm-d's vLLM adapter decodes it (array-like KVEventBatch, tagged events), every
stored block's hash recomputed here with hashlib over a CBOR encoding written in this file (the chain
from its parent, as vLLM's sha256_cbor / sha256_cbor_64bit), token ids that are really the requests'
tokens, and removals that name stored blocks. The set it rebuilds must equal the hashes the engine
reports for its cached blocks (GET /v1/admin/kv_cache, read from the engine's pools). A subscriber that
joins late gets the buffered batches from the replay socket, then the end marker.

With several models in one server (-m alpha=PATH -m beta=PATH), one publisher carries both: each
model's events under its own topic kv@HOST@NAME, one sequence of numbers across both, each topic's set
equal to that model's GET /v1/admin/kv_cache?model=NAME, and unloading a model publishes an
AllBlocksCleared under its topic only.

Needs Debian's python3-zmq and python3-msgpack (run with /usr/bin/python3) and a pith built with
libzmq; skips with the reason otherwise."""
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pithtest import Server, pith_bin, run_pith, skip  # noqa: E402

try:
    import msgpack
    import zmq
except ImportError as e:
    skip("%s is not importable (Debian: python3-zmq python3-msgpack; run with /usr/bin/python3)" % e.name)

KEY = "kv-events-admin-key"
BS = 4
VOCAB = 2048

# ---- the reference hashes: canonical CBOR of the few shapes vLLM hashes, by hand ----


def cbor_head(major, v):
    if v < 24:
        return bytes([major << 5 | v])
    for n, ai in ((1, 24), (2, 25), (4, 26), (8, 27)):
        if v < 1 << (8 * n):
            return bytes([major << 5 | ai]) + v.to_bytes(n, "big")
    raise ValueError(v)


def cbor_uint(v):
    return cbor_head(0, v)


def cbor_text(s):
    b = s.encode()
    return cbor_head(3, len(b)) + b


def cbor_bytes(b):
    return cbor_head(2, len(b)) + b


def cbor_array(items):
    return cbor_head(4, len(items)) + b"".join(items)


CBOR_NULL = b"\xf6"


class Chain:
    """vLLM's block hash chain: sha256_cbor (32-byte digests chained, the last 8 bytes published) or
    sha256_cbor_64bit (the first 8 bytes, chained and published as an integer)."""

    def __init__(self, algo, seed):
        self.algo = algo
        self.none = self._h(cbor_text(seed))

    def _h(self, data):
        d = hashlib.sha256(data).digest()
        return d if self.algo == "sha256_cbor" else int.from_bytes(d[:8], "big")

    def published(self, d):
        return int.from_bytes(d[-8:], "big") if self.algo == "sha256_cbor" else d

    def block(self, parent, tokens):
        p = cbor_bytes(parent) if self.algo == "sha256_cbor" else cbor_uint(parent)
        return self._h(cbor_array([p, cbor_array([cbor_uint(t) for t in tokens]), CBOR_NULL]))


class Subscriber:
    """A SUB socket on llm-d's topic filter and a thread handing each message to take(frames) under
    the lock; an AssertionError there is recorded in failures. Subclasses set their state first."""

    def __init__(self, endpoint):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")  # llm-d's topic filter
        self.sub.connect(endpoint)
        self.failures = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            if not self.sub.poll(50):
                continue
            frames = self.sub.recv_multipart()
            with self.lock:
                try:
                    self.take(frames)
                except AssertionError as e:
                    self.failures.append(str(e))

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.sub.close(0)
        self.ctx.term()


class Follower(Subscriber):
    """A subscriber that checks every message and rebuilds the set of cached block hashes."""

    def __init__(self, tc, endpoint, chain, prompts, replay=None):
        self.tc, self.chain, self.prompts, self.replay = tc, chain, prompts, replay
        self.live = set()
        self.digest = {}        # published hash -> chain element, for every hash ever stored
        self.payloads = []      # (seq, raw payload), in order
        self.topic = None
        self.counts = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}
        self.blocks_stored = 0
        super().__init__(endpoint)

    def take(self, frames):
        assert len(frames) == 3, "a message has %d frames, not 3" % len(frames)
        topic, seq_b, payload = frames
        assert len(seq_b) == 8, "the sequence frame has %d bytes" % len(seq_b)
        seq = int.from_bytes(seq_b, "big")
        if seq > 0 and not self.payloads and self.replay:
            # joined after the first messages (a slow start): what was missed comes from the replay socket
            for s, p in replay(self.replay, 0):
                if s < seq:
                    self.take([topic, s.to_bytes(8, "big"), p])
        assert seq == len(self.payloads), "sequence %d after %d messages (a gap or a reorder)" % (seq, len(self.payloads))
        if self.topic is None:
            self.topic = topic
        assert topic == self.topic, "the topic changed"
        self.payloads.append((seq, payload))
        self.apply(msgpack.unpackb(payload, raw=False))

    def apply(self, batch):
        # llm-d: msgpackVLLMEventBatch, an array [ts float64, events, data_parallel_rank?]
        assert isinstance(batch, list) and len(batch) in (2, 3), "batch %r" % (batch,)
        assert isinstance(batch[0], float) and batch[0] > 1e9, "ts %r" % (batch[0],)
        assert isinstance(batch[1], list) and batch[1], "a batch without events"
        if len(batch) == 3:
            assert batch[2] == 0, "data_parallel_rank %r" % (batch[2],)
        for ev in batch[1]:
            assert isinstance(ev, list) and ev and isinstance(ev[0], str), "event %r" % (ev,)
            tag = ev[0]
            assert tag in self.counts, "unknown tag %r" % tag
            self.counts[tag] += 1
            if tag == "BlockStored":
                self.stored(ev)
            elif tag == "BlockRemoved":
                assert len(ev) == 3 and ev[2] == "GPU", "BlockRemoved %r" % (ev,)
                assert isinstance(ev[1], list) and ev[1]
                for h in ev[1]:
                    assert h in self.live, "removed %d, which is not stored" % h
                    self.live.discard(h)
            else:
                assert len(ev) == 1, "AllBlocksCleared %r" % (ev,)
                self.live.clear()

    def stored(self, ev):
        # [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]
        assert len(ev) == 8, "BlockStored has %d fields: %r" % (len(ev), ev)
        _, hashes, parent, tokens, block_size, lora_id, medium, lora_name = ev
        assert block_size == BS and lora_id is None and medium == "GPU" and lora_name is None, "%r" % (ev,)
        assert isinstance(hashes, list) and hashes and all(isinstance(h, int) and 0 < h < 1 << 64 for h in hashes)
        assert isinstance(tokens, list) and len(tokens) == BS * len(hashes), "%d tokens for %d blocks" % (len(tokens), len(hashes))
        assert all(isinstance(t, int) and 0 <= t < VOCAB for t in tokens)
        if parent is None:
            d = self.chain.none
            # a chain's first block is the first block of a request
            assert any(p[:BS] == tokens[:BS] for p in self.prompts), "a root block %r starts no prompt" % (tokens[:BS],)
        else:
            assert isinstance(parent, int) and parent in self.digest, "parent %r was never stored" % (parent,)
            d = self.digest[parent]
        for i, h in enumerate(hashes):
            d = self.chain.block(d, tokens[i * BS:(i + 1) * BS])
            assert self.chain.published(d) == h, "block hash %d, recomputed %d" % (h, self.chain.published(d))
            assert h not in self.live, "stored %d twice" % h
            self.live.add(h)
            self.digest[h] = d
            self.blocks_stored += 1

    def snapshot(self):
        with self.lock:
            return set(self.live), len(self.payloads), list(self.failures)


def topic_state(chain, prompts):
    """A Follower's per-topic state alone (apply/stored), for a subscriber of several topics."""
    g = Follower.__new__(Follower)
    g.chain, g.prompts, g.live, g.digest, g.payloads, g.topic, g.replay = chain, prompts, set(), {}, [], None, None
    g.counts = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}
    g.blocks_stored = 0
    return g


class Topics(Subscriber):
    """A subscriber of every kv@ topic: one sequence across them all, one rebuilt set per topic."""

    def __init__(self, endpoint, chain, prompts):
        self.chain, self.prompts = chain, prompts
        self.n = 0
        self.per = {}           # topic -> per-topic state
        super().__init__(endpoint)

    def take(self, frames):
        assert len(frames) == 3, "a message has %d frames, not 3" % len(frames)
        topic, seq_b, payload = frames
        seq = int.from_bytes(seq_b, "big")
        assert seq == self.n, "sequence %d after %d messages (one sequence across the topics)" % (seq, self.n)
        self.n += 1
        self.per.setdefault(topic, topic_state(self.chain, self.prompts)).apply(msgpack.unpackb(payload, raw=False))

    def snapshot(self, topic):
        with self.lock:
            g = self.per.get(topic)
            return (set(g.live) if g else set()), dict(g.counts) if g else {}, self.n, list(self.failures)


def replay(endpoint, start):
    """[(seq, payload)] from the replay socket, from start on, up to the end marker."""
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    try:
        d.connect(endpoint)
        d.send_multipart([b"", start.to_bytes(8, "big")])
        got = []
        while True:
            assert d.poll(5000), "no replay answer"
            frames = d.recv_multipart()
            assert len(frames) == 3 and frames[0] == b"", "replay frames %r" % (frames[:2],)
            if frames[1] == (-1).to_bytes(8, "big", signed=True):
                assert frames[2] == b"", "the end marker carries a payload"
                return got
            got.append((int.from_bytes(frames[1], "big"), frames[2]))
    finally:
        d.close(0)
        ctx.term()


def http(base, route, body=None, key=None, timeout=120):
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = "Bearer " + key
    req = urllib.request.Request(base + route, data=None if body is None else json.dumps(body).encode(),
                                 headers=headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def engine_hashes(base):
    st, o = http(base, "/v1/admin/kv_cache", key=KEY)
    assert st == 200, o
    return set(int(h) for h in o["hashes"]), o


class KVEvents(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvev-", dir=os.environ.get("PITH_TEST_TMP"))
        # a host that cannot resolve: the server stops right after checking the KV event options
        probe = run_pith(["serve", "--port", "0", "--host", "no-such-host.invalid", "--kv-events", "ipc://%s/probe" % cls.dir])
        if b"built without libzmq" in probe.stderr:
            skip("pith was built without libzmq (libzmq3-dev)")

    def serve(self, name, *extra):
        ev, rp = "ipc://%s/%s-ev" % (self.dir, name), "ipc://%s/%s-rp" % (self.dir, name)
        srv = Server(["--kv-events", ev, "--kv-events-replay", rp, "--block-size", str(BS), "--kv-blocks", "40",
                      "--max-num-seqs", "4", "--admin-key", KEY, "--quiet", "-t", "2", *extra])
        return srv, ev, rp

    def complete(self, base, prompt, n):
        st, o = http(base, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True})
        self.assertEqual(st, 200, o)
        return o

    def settle(self, base, f, what):
        """Waits for the subscriber to have every batch, then compares with the engine's own set."""
        deadline = time.time() + 10
        while True:
            eng, info = engine_hashes(base)
            live, n, failures = f.snapshot()
            self.assertEqual(failures, [], what)
            if live == eng and n == info["published_batches"]:
                break
            if time.time() > deadline:
                self.fail("%s: the events rebuild %d blocks (%d batches), the engine holds %d (%d published); "
                          "only in events: %d, only in the engine: %d" % (what, len(live), n, len(eng),
                          info["published_batches"], len(live - eng), len(eng - live)))
            time.sleep(0.05)
        self.assertEqual(info["unresolved"], 0)
        self.assertEqual(info["blocks"], len(eng))
        return eng

    def test_workload(self):
        prompts = []
        srv, ev, rp = self.serve("w")
        with srv:
            f = Follower(self, ev, Chain("sha256_cbor", ""), prompts, rp)
            try:
                time.sleep(0.3)  # a PUB socket drops what it sends before the subscription is in
                self.assertEqual(engine_hashes(srv.base)[0], set())
                # Prefix hits: a shared 16-token prefix, three tails.
                shared = [(7 * i + 3) % VOCAB for i in range(16)]
                for k in range(3):
                    p = shared + [100 + k * 10 + i for i in range(9)]
                    prompts.append(p)
                    o = self.complete(srv.base, p, 6)
                    if k > 0:
                        self.assertGreaterEqual(o["usage"]["prompt_tokens_details"]["cached_tokens"], 16)
                self.settle(srv.base, f, "after the prefix hits")
                stored_before = f.blocks_stored
                # Evictions and preemption: concurrent long requests on a 40-block pool.
                preempt0 = srv.metric("pith_preemptions_total")
                threads, errors = [], []
                for k in range(6):
                    p = [(31 * k + 5 * i + 1) % VOCAB for i in range(24)]
                    prompts.append(p)

                    def go(p=p):
                        try:
                            self.complete(srv.base, p, 60)
                        except Exception as e:  # noqa: BLE001 (reported below)
                            errors.append(e)
                    threads.append(threading.Thread(target=go))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(120)
                self.assertEqual(errors, [])
                self.assertGreater(srv.metric("pith_preemptions_total"), preempt0, "no preemption happened")
                self.settle(srv.base, f, "after evictions and preemption")
                self.assertGreater(f.counts["BlockRemoved"], 0, "nothing was evicted")
                self.assertGreater(f.blocks_stored, stored_before)
                # A flush: sleep drops every block (AllBlocksCleared), wake starts empty.
                st, o = http(srv.base, "/v1/admin/sleep", {}, key=KEY)
                self.assertEqual(st, 200, o)
                st, o = http(srv.base, "/v1/admin/wake", {}, key=KEY)
                self.assertEqual(st, 200, o)
                self.assertEqual(self.settle(srv.base, f, "after sleep and wake"), set())
                self.assertEqual(f.counts["AllBlocksCleared"], 1)
                prompts.append(shared + [5, 6, 7, 8])
                self.complete(srv.base, prompts[-1], 4)
                after = self.settle(srv.base, f, "after the flush")
                self.assertTrue(after)
                live, n, _ = f.snapshot()
                self.assertEqual(f.topic, b"kv@%s@pith-default" % os.uname().nodename.encode())

                # A late joiner asks the replay socket for everything, then from the middle.
                for start in (0, n // 2):
                    self.assertEqual(replay(rp, start), f.payloads[start:n], "replay from %d" % start)
                # Rebuilt from the replay alone, the set is the engine's.
                g = Follower.__new__(Follower)
                g.chain, g.prompts, g.live, g.digest, g.payloads, g.topic = f.chain, prompts, set(), {}, [], f.topic
                g.replay = None
                g.counts = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}
                g.blocks_stored = 0
                for seq, payload in replay(rp, 0):
                    g.take([f.topic, seq.to_bytes(8, "big"), payload])
                self.assertEqual(g.live, engine_hashes(srv.base)[0])
            finally:
                f.close()
            self.assertEqual(srv.close(), 0)

    def test_hash_64bit_and_seed(self):
        prompts = [[(3 * i + 11) % VOCAB for i in range(18)]]
        srv, ev, rp = self.serve("h", "--kv-events-hash", "sha256_cbor_64bit", "--kv-events-hash-seed", "42",
                                 "--kv-events-topic", "kv@pod-1@m")
        with srv:
            f = Follower(self, ev, Chain("sha256_cbor_64bit", "42"), prompts, rp)
            try:
                time.sleep(0.3)
                self.complete(srv.base, prompts[0], 3)
                self.assertEqual(len(self.settle(srv.base, f, "64-bit hashes")), 5)
                self.assertEqual(f.topic, b"kv@pod-1@m")
                _, info = engine_hashes(srv.base)
                self.assertEqual(info["hash"], "sha256_cbor_64bit")
            finally:
                f.close()

    def test_several_models(self):
        model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "assets", "default.gguf")
        host = os.uname().nodename.encode()
        topic = {name: b"kv@%s@%s" % (host, name.encode()) for name in ("alpha", "beta")}
        prompts = []
        srv, ev, rp = self.serve("m", "-m", "alpha=" + model, "-m", "beta=" + model)
        with srv:
            t = Topics(ev, Chain("sha256_cbor", ""), prompts)
            try:
                time.sleep(0.3)

                def complete(name, p, n):
                    st, o = http(srv.base, "/v1/completions", {"model": name, "prompt": p, "max_tokens": n,
                                                               "temperature": 0, "ignore_eos": True})
                    self.assertEqual(st, 200, o)
                    return o

                def kv_cache(name):
                    st, o = http(srv.base, "/v1/admin/kv_cache?model=" + name, key=KEY)
                    self.assertEqual(st, 200, o)
                    self.assertEqual(o["topic"], topic[name].decode())
                    return set(int(h) for h in o["hashes"]), o

                def settle(name, what):
                    deadline = time.time() + 10
                    while True:
                        eng, info = kv_cache(name)
                        live, counts, n, failures = t.snapshot(topic[name])
                        self.assertEqual(failures, [], what)
                        if live == eng and n == info["published_batches"]:
                            return eng, counts
                        if time.time() > deadline:
                            self.fail("%s: %s's topic rebuilds %d blocks (%d batches), its engine holds %d (%d published)"
                                      % (what, name, len(live), n, len(eng), info["published_batches"]))
                        time.sleep(0.05)

                # Shared prefixes within each model and across both (the same model file: the same hashes,
                # each under its own topic).
                shared = [(7 * i + 3) % VOCAB for i in range(16)]
                for k in range(3):
                    for name in ("alpha", "beta"):
                        p = shared + [100 + k * 10 + i + (0 if name == "alpha" else 1000) for i in range(9)]
                        prompts.append(p)
                        o = complete(name, p, 5)
                        if k > 0:
                            self.assertGreaterEqual(o["usage"]["prompt_tokens_details"]["cached_tokens"], 16)
                alpha, _ = settle("alpha", "alpha after the prefix hits")
                beta, _ = settle("beta", "beta after the prefix hits")
                self.assertTrue(alpha and beta)
                self.assertNotEqual(alpha, beta)  # their tails differ
                with t.lock:
                    self.assertEqual(set(t.per), set(topic.values()))
                # A GET names its model in the query: without one, with two served, it is refused.
                st, o = http(srv.base, "/v1/admin/kv_cache", key=KEY)
                self.assertEqual(st, 400, o)
                st, o = http(srv.base, "/v1/admin/kv_cache?model=gamma", key=KEY)
                self.assertEqual(st, 404, o)

                # Unloading alpha clears its topic only.
                st, o = http(srv.base, "/v1/admin/models/unload", {"model": "alpha"}, key=KEY)
                self.assertEqual(st, 200, o)
                deadline = time.time() + 10
                while True:
                    live, counts, n, failures = t.snapshot(topic["alpha"])
                    self.assertEqual(failures, [])
                    if counts["AllBlocksCleared"] == 1 and not live:
                        break
                    if time.time() > deadline:
                        self.fail("no AllBlocksCleared for alpha after its unload: %d blocks, %r" % (len(live), counts))
                    time.sleep(0.05)
                st, o = http(srv.base, "/v1/admin/kv_cache?model=alpha", key=KEY)
                self.assertEqual(st, 409, o)  # not loaded
                after, counts = settle("beta", "beta after alpha's unload")
                self.assertEqual(after, beta)
                self.assertEqual(counts["AllBlocksCleared"], 0)
                # alpha loads again on demand and publishes again under its topic
                complete("alpha", prompts[0], 3)
                again, _ = settle("alpha", "alpha loaded again")
                self.assertTrue(again)
            finally:
                t.close()
            self.assertEqual(srv.close(), 0)

    def test_options(self):
        r = run_pith(["serve", "--kv-events-hash", "sha256"])
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"sha256_cbor", r.stderr)
        r = run_pith(["serve", "--kv-events-replay", "ipc://%s/x" % self.dir])
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"need --kv-events", r.stderr)
        self.assertIn(b"--kv-events ENDPOINT", run_pith(["serve", "--help"]).stdout)
        # One topic cannot name several models.
        model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "assets", "default.gguf")
        r = run_pith(["serve", "--port", "0", "-m", "a=" + model, "-m", "b=" + model, "--kv-events",
                      "ipc://%s/t" % self.dir, "--kv-events-topic", "kv@h@m"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"--kv-events-topic", r.stderr)
        # Without --kv-events the endpoint says so.
        with Server(["--admin-key", KEY, "--quiet", "-t", "1"]) as srv:
            st, o = http(srv.base, "/v1/admin/kv_cache", key=KEY)
            self.assertEqual(st, 404, o)
            st, o = http(srv.base, "/v1/admin/kv_cache", key="wrong")
            self.assertEqual(st, 401, o)


if __name__ == "__main__":
    pith_bin()
    prog = unittest.main(exit=False, verbosity=2)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
