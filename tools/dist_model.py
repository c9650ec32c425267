#!/usr/bin/env python3
"""The paper model of docs/distributed.md: decode tokens/s (batch 1) of a model split over N hosts by
tensor parallelism (dense layers) and expert parallelism (experts), in lockstep, as Pith runs it.

Per generated token every host reads its share of the weights from memory and the hosts meet in
2 x layers + 3 collectives (an allreduce after each attention output and each FFN or MoE block, the
step's broadcast, the status agreement and the logits gather):

    t(N) = bytes_read(N) / B_mem / eta  +  C x alpha(N)  +  A x 2 (N - 1) / N / B_net  +  G / B_net

  bytes_read(N)  dense weights / N, plus for a mixture of experts the experts of the busiest host: each
                 layer waits for the host holding most of the token's k chosen experts (E[max load] of k
                 experts drawn from n_experts split in N equal ranges, by simulation), times one expert's
                 bytes, summed over the layers; with --no-ep (experts split by column) k experts / N;
  eta            the share of B_mem a host's decode reaches, and the lockstep's waiting: measured here
                 (--eta, from pith bench --tp on this machine; docs/performance.md);
  C, alpha(N)    collectives per token, each costing ceil(log2 N) link latencies (a small allreduce is
                 latency-bound: recursive doubling);
  A              the allreduces' payload per token (2 x layers x dim x 4 bytes), of which a ring moves
                 2 (N - 1) / N over each host's link;
  G              the logits gathered on rank 0 (n_vocab x 4 bytes x (N - 1) / N).

Usage: tools/dist_model.py [--eta 0.8] [--json]. Prints a Markdown table for a Llama-3-70B-shaped dense
model and a Qwen3-235B-A22B-shaped MoE, Q4_K_M-sized (4.85 bits per weight), on hosts of 100 GB/s memory
bandwidth and two networks: 25 GbE over TCP and 100 Gb/s RDMA (UCX)."""
import argparse
import json
import math
import random

BITS = 4.85  # Q4_K_M's average bits per weight (llama.cpp's figure for Llama-3 files)


def expected_max_load(k, n_experts, hosts, trials=100000, seed=1):
    if hosts == 1:
        return float(k)
    rnd = random.Random(seed)
    per = n_experts // hosts
    total = 0
    for _ in range(trials):
        loads = [0] * hosts
        for e in rnd.sample(range(n_experts), k):
            loads[e // per] += 1
        total += max(loads)
    return total / trials


MODELS = {
    # name: layers, dim, heads, kv_heads, head_dim, ffn (dense), vocab, experts, used, expert_ffn
    "Llama-3-70B": dict(layers=80, dim=8192, heads=64, kv=8, hd=128, ffn=28672, vocab=128256, experts=0),
    "Qwen3-235B-A22B": dict(layers=94, dim=4096, heads=64, kv=4, hd=128, ffn=0, vocab=151936, experts=128,
                            used=8, expert_ffn=1536),
}

NETS = {
    "25 GbE, TCP": dict(alpha=25e-6, bw=3.1e9),
    "100 Gb/s RDMA (UCX)": dict(alpha=3e-6, bw=12.0e9),
}


def params(m):
    attn = m["dim"] * (m["heads"] * m["hd"]) * 2 + m["dim"] * (m["kv"] * m["hd"]) * 2
    dense = m["layers"] * (attn + (3 * m["dim"] * m["ffn"] if m["ffn"] else 0))
    dense += 2 * m["vocab"] * m["dim"]  # embeddings are read a row per token; the head whole
    expert = 3 * m["dim"] * m.get("expert_ffn", 0)
    return dense, expert


def token_time(m, hosts, net, b_mem, eta, by_column=False):
    dense, expert = params(m)
    bpw = BITS / 8
    read = dense * bpw / hosts
    if m["experts"] and by_column:  # --no-ep: every host 1/N of each chosen expert
        read += m["layers"] * m["used"] * expert * bpw / hosts
    elif m["experts"]:
        read += m["layers"] * expected_max_load(m["used"], m["experts"], hosts) * expert * bpw
    t = read / (b_mem * eta)
    if hosts > 1:
        collectives = 2 * m["layers"] + 3
        payload = 2 * m["layers"] * m["dim"] * 4
        t += collectives * math.ceil(math.log2(hosts)) * net["alpha"]
        t += payload * 2 * (hosts - 1) / hosts / net["bw"]
        t += m["vocab"] * 4 * (hosts - 1) / hosts / net["bw"]
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eta", type=float, default=0.8, help="share of the memory bandwidth decode reaches")
    ap.add_argument("--b-mem", type=float, default=100e9, help="memory bandwidth per host, bytes/s")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for name, m in MODELS.items():
        dense, expert = params(m)
        total = dense + (m["layers"] * m["experts"] * expert if m["experts"] else 0)
        for split in ([False, True] if m["experts"] else [False]):
            for net_name, net in NETS.items():
                for hosts in (1, 2, 4, 8):
                    t = token_time(m, hosts, net, a.b_mem, a.eta, split)
                    rows.append(dict(model=name + (" --no-ep" if split else ""), net=net_name, hosts=hosts,
                                     tok_s=1 / t, weights_gb_per_host=total * BITS / 8 / hosts / 1e9))
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print("| model | network | hosts | weights per host (GB) | decode tok/s | speed-up |")
    print("|---|---|---:|---:|---:|---:|")
    base = {}
    for r in rows:
        key = (r["model"], r["net"])
        base.setdefault(key, r["tok_s"])
        print("| %s | %s | %d | %.0f | %.2f | %.2fx |" % (r["model"], r["net"], r["hosts"], r["weights_gb_per_host"],
                                                        r["tok_s"], r["tok_s"] / base[key]))


if __name__ == "__main__":
    main()
