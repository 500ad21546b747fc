#!/usr/bin/python3
"""CART in plain eager PyTorch: the yardstick for `cart train`'s speed (bench/train_vs_eager.sh).

Written the way a researcher would write it in Python: nn.Module classes, F.cross_entropy,
torch.optim.AdamW, clip_grad_norm_. It trains the model described in docs/model.md with the
default switches (kv frozen or recompute, shared cross-attention core, hyper-connections, LTI gate,
loop-index embedding, the reference code's residual, causal cross-attention) on the same token
windows as `cart train` (window i = tokens[i*T : i*T + T + 1], consecutive windows per batch row),
with the same AdamW settings and learning-rate schedule. Given `--init` (a safetensors file from
`cart model init`) it starts from the same weights, so its losses can be compared with
`cart train`'s (tests/reference/eager_match_test.sh).

Prints one JSON line per step: {"step", "loss", "seconds"} (seconds: wall time of that step).
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HEAD = 64


def linear(i, o):
    layer = nn.Linear(i, o, bias=False)
    nn.init.normal_(layer.weight, 0.0, 0.02)
    return layer


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate, self.up, self.down = linear(d, hidden), linear(d, hidden), linear(hidden, d)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def rope_tables(T):
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, HEAD, 2, dtype=torch.float32) / HEAD)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


def rope(x, tables):
    cos, sin = tables
    x1, x2 = x[..., : HEAD // 2], x[..., HEAD // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def heads(x):
    B, T, d = x.shape
    return x.view(B, T, d // HEAD, HEAD).transpose(1, 2)


def merge(x):
    B, H, T, _ = x.shape
    return x.transpose(1, 2).reshape(B, T, H * HEAD)


def attention(q, k, v, causal):
    scores = (q @ k.transpose(-2, -1)) * 0.125
    if causal:
        T = q.shape[-2]
        mask = torch.ones(T, k.shape[-2], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


class MlaAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj, self.kv_down = linear(d, d), linear(d, d // 4)
        self.k_up, self.v_up, self.o_proj = linear(d // 4, d), linear(d // 4, d), linear(d, d)

    def forward(self, x, tables):
        c = self.kv_down(x)
        q = rope(heads(self.q_proj(x)), tables)
        k = rope(heads(self.k_up(c)), tables)
        return self.o_proj(merge(attention(q, k, heads(self.v_up(c)), True)))


class Layer(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(d), MlaAttention(d)
        self.ffn_norm, self.ffn = RMSNorm(d), Mlp(d, hidden)

    def forward(self, x, tables):
        x = x + self.attn(self.attn_norm(x), tables)
        return x + self.ffn(self.ffn_norm(x))


class Anchor(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.kv_down, self.k_up, self.v_up = linear(d, d // 4), linear(d // 4, d), linear(d // 4, d)

    def forward(self, e):
        c = self.kv_down(e)
        return heads(self.k_up(c)), heads(self.v_up(c))


class Core(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.attn_norm, self.q_proj, self.o_proj = RMSNorm(d), linear(d, d), linear(d, d)
        self.ffn_norm, self.ffn = RMSNorm(d), Mlp(d, hidden)

    def forward(self, h_in, K, V):
        q = heads(self.q_proj(self.attn_norm(h_in)))  # no RoPE on the core's queries
        h = h_in + self.o_proj(merge(attention(q, K, V, True)))
        return h + self.ffn(self.ffn_norm(h))


class Holder(nn.Module):
    def __init__(self, name, value):
        super().__init__()
        self.register_parameter(name, nn.Parameter(value))


class Cart(nn.Module):
    def __init__(self, vocab, d, P, R, kv):
        super().__init__()
        hidden = math.ceil((8 * d // 3) / 256) * 256
        self.R, self.kv = R, kv
        self.embed = nn.Embedding(vocab, d)
        nn.init.normal_(self.embed.weight, 0.0, 0.02)
        self.prelude = nn.ModuleList([Layer(d, hidden) for _ in range(P)])
        self.anchor = Anchor(d)
        self.core = Core(d, hidden)
        self.hyper = Holder("weights", torch.tensor([1.0, 0.0, 0.0]))
        self.lie = linear(32, d)
        self.lti = Holder("a", torch.full((d,), math.log(9.0)))
        self.coda = Layer(d, hidden)
        self.final_norm = RMSNorm(d)
        pe = torch.zeros(16, 32)
        r = torch.arange(16, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, 32, 2, dtype=torch.float32) * (-math.log(10000.0) / 32))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(r * div), torch.cos(r * div)
        self.register_buffer("lie_table", pe)

    def forward(self, ids):
        x = self.embed(ids)
        tables = rope_tables(ids.shape[1])
        for layer in self.prelude:
            x = layer(x, tables)
        e = h = x
        if self.kv == "frozen":
            K, V = self.anchor(e)
        ring = [e, e, e]
        mix = torch.softmax(self.hyper.weights, 0)
        carry = torch.sigmoid(self.lti.a)
        for r in range(self.R):
            h_in = mix[0] * ring[0] + mix[1] * ring[1] + mix[2] * ring[2]
            h_in = h_in + self.lie(self.lie_table[r])
            if self.kv == "recompute":
                K, V = self.anchor(h_in)
            h = carry * h_in + self.core(h_in, K, V)  # the reference code's residual
            ring = [h, ring[0], ring[1]]
        h = self.coda(h, tables)
        return self.final_norm(h) @ self.embed.weight.t()


def load_safetensors(path):
    dtypes = {"F32": torch.float32}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]])
        out[name] = flat.view(info["shape"])
    return out


def learning_rate(step, total, warmup, peak, floor):
    if step < warmup:
        return peak * (step + 1) / warmup
    decay = total - 1 - warmup
    if decay <= 0:
        return floor
    progress = min(max((step - warmup) / decay, 0.0), 1.0)
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tokens", required=True, help="NAME.bin token file (NAME.json beside it)")
    p.add_argument("--init", help="safetensors from `cart model init` (else: own random init)")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--P", type=int, default=2)
    p.add_argument("--R", type=int, default=4)
    p.add_argument("--kv", choices=["frozen", "recompute"], default="frozen")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--lr-min", type=float, default=3e-5)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    with open(os.path.splitext(a.tokens)[0] + ".json") as f:
        meta = json.load(f)
    dtype = {"uint16": "<u2", "uint32": "<u4"}[meta["dtype"]]
    import numpy

    tokens = torch.from_numpy(numpy.fromfile(a.tokens, dtype=dtype).astype(numpy.int64))
    T, windows = a.seq_len, (tokens.numel() - 1) // a.seq_len

    model = Cart(a.vocab, a.d, a.P, a.R, a.kv)
    if a.init:
        state = load_safetensors(a.init)
        missing = set(model.state_dict()) - set(state) - {"lie_table"}
        if missing:
            sys.exit(f"{a.init}: no tensor for {sorted(missing)}")
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(state[name])
    model.train()
    opt = torch.optim.AdamW(
        model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=a.weight_decay
    )
    cursor = 0
    for step in range(a.steps):
        start = time.perf_counter()
        rows = []
        for _ in range(a.batch):
            i = cursor % windows
            rows.append(tokens[i * T : i * T + T + 1])
            cursor += 1
        batch = torch.stack(rows)
        x, y = batch[:, :-1], batch[:, 1:]
        lr = learning_rate(step, a.steps, a.warmup, a.lr, a.lr_min)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        value = loss.item()
        seconds = time.perf_counter() - start
        print(json.dumps({"step": step + 1, "loss": value, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
