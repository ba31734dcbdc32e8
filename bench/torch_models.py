"""torch_models.py: the PyTorch twins of the clremat benchmark models, for
bench/bench.py: the MLP of bench/mlp1024.json, the transformer of
models/transformer.json, the Llama-style decoder of models/llama_tiny.json
(at T = 256), the causal decoder of models/long_context.json at sequence
length --T (long: softmax written out; long_sdpa: PyTorch's
scaled_dot_product_attention) and the ResNet-20 of models/resnet20.json,
same shapes, same optimizer settings, optional
torch.utils.checkpoint.checkpoint_sequential over 4 segments. Prints one
JSON line: {"step_ms_median": ..., "steps": ..., "threads": ...}."""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential


class Block(nn.Module):
    """One pre-norm encoder block as clremat's encoder_block: ln1, attention
    (qkv projection, 4 heads, softmax(q k^T / sqrt(dh)), output projection),
    residual, ln2, ff1 (gelu tanh), ff2, dropout 0.1, residual."""

    def __init__(self, d=64, heads=4, ff=128):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.wo = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        B, T, D = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, h, D // h).transpose(1, 2)
        k = k.view(B, T, h, D // h).transpose(1, 2)
        v = v.view(B, T, h, D // h).transpose(1, 2)
        p = torch.softmax(q @ k.transpose(-1, -2) / (D // h) ** 0.5, dim=-1)
        a = (p @ v).transpose(1, 2).reshape(B, T, D)
        r1 = self.wo(a) + x
        f = self.ff2(F.gelu(self.ff1(self.ln2(r1)), approximate="tanh"))
        return self.drop(f) + r1


class Embed(nn.Module):
    def __init__(self, vocab=16, d=64, T=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(T, d) * 0.02)

    def forward(self, ids):
        return self.tok(ids) + self.pos


class Head(nn.Module):
    def __init__(self, d=64, classes=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.logits = nn.Linear(d, classes)

    def forward(self, x):
        return self.logits(self.ln(x))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rope(x, theta=10000.0):
    """Half-split rotary embedding of x [B, H, T, dh] (Llama's rotate_half)."""
    T, dh = x.shape[-2], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    c, s = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
    return x * c + torch.cat([-x2, x1], -1) * s


class LlamaBlock(nn.Module):
    """llama_tiny's decoder_block: RMSNorm, causal grouped-query attention
    (4 heads, 2 kv heads, RoPE, no biases), residual, RMSNorm, SwiGLU MLP
    (silu(gate) * up, down), residual."""

    def __init__(self, d=128, heads=4, kv=2, ff=352):
        super().__init__()
        self.h, self.kv, self.dh = heads, kv, d // heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv * self.dh, bias=False)
        self.v = nn.Linear(d, kv * self.dh, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, ff, bias=False)
        self.up = nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        B, T, D = x.shape
        a = self.n1(x)
        q = rope(self.q(a).view(B, T, self.h, self.dh).transpose(1, 2))
        k = rope(self.k(a).view(B, T, self.kv, self.dh).transpose(1, 2))
        v = self.v(a).view(B, T, self.kv, self.dh).transpose(1, 2)
        k = k.repeat_interleave(self.h // self.kv, dim=1)
        v = v.repeat_interleave(self.h // self.kv, dim=1)
        s = q @ k.transpose(-1, -2) / self.dh ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        r1 = self.o((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, D)) + x
        m = self.n2(r1)
        return self.down(F.silu(self.gate(m)) * self.up(m)) + r1


class LlamaHead(nn.Module):
    """Final RMSNorm and the output projection tied to the embedding."""

    def __init__(self, emb, d=128):
        super().__init__()
        self.norm = RMSNorm(d)
        self.emb = emb

    def forward(self, x):
        return self.norm(x) @ self.emb.weight.t()


def llama_model():
    emb = nn.Embedding(64, 128)
    nn.init.normal_(emb.weight, std=0.02)
    return nn.Sequential(emb, LlamaBlock(), LlamaBlock(), LlamaBlock(), LlamaBlock(), LlamaHead(emb))


class CausalBlock(nn.Module):
    """One pre-norm decoder block as models/long_context.json's
    decoder_block: ln1, causal attention (qkv projection, 4 heads, output
    projection), residual, ln2, ff1 (gelu tanh), ff2, residual. sdpa=False:
    the softmax written out (the T x T probabilities kept, like clremat's
    "plain"); sdpa=True: F.scaled_dot_product_attention, whose CPU kernel is
    a flash-attention (memory-efficient) implementation."""

    def __init__(self, d=64, heads=4, ff=256, sdpa=False):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.wo = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)

    def forward(self, x):
        B, T, D = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, h, D // h).transpose(1, 2)
        k = k.view(B, T, h, D // h).transpose(1, 2)
        v = v.view(B, T, h, D // h).transpose(1, 2)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = q @ k.transpose(-1, -2) / (D // h) ** 0.5
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = torch.softmax(s, dim=-1) @ v
        r1 = self.wo(a.transpose(1, 2).reshape(B, T, D)) + x
        return self.ff2(F.gelu(self.ff1(self.ln2(r1)), approximate="tanh")) + r1


class TokEmbed(nn.Module):
    def __init__(self, vocab=64, d=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)

    def forward(self, ids):
        return self.tok(ids)
class ResBlock(nn.Module):
    """One block of models/resnet20.json: conv1 (3x3, stride s, no bias), bn,
    relu, conv2 (3x3, no bias), bn, + shortcut (identity, or a 1x1 stride-s
    conv + bn projection), relu. Batchnorm as Keras's: momentum 0.99
    (PyTorch's momentum is 1 - Keras's), epsilon 1e-3."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                      nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.proj(x) if self.proj is not None else x))


def resnet20_model():
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16, eps=1e-3, momentum=0.01), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(3):
            layers.append(ResBlock(cin, cout, stride if b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def mlp_model():
    layers = []
    for i in range(8):
        layers += [nn.Linear(1024, 1024), nn.GELU(approximate="tanh")]
    layers.append(nn.Linear(1024, 10))
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["mlp", "transformer", "llama", "long", "long_sdpa", "resnet20"])
    ap.add_argument("--batch", type=int, default=0, help="llama: batch (default 8)")
    ap.add_argument("--seq", type=int, default=256, help="llama: sequence length")
    ap.add_argument("--T", type=int, default=1024, help="long, long_sdpa: sequence length")
    ap.add_argument("--checkpoint", action="store_true", help="checkpoint_sequential over 4 segments")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.model == "long_sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        # PyTorch < 2.0 (Debian 12 ships 1.13) has no scaled_dot_product_attention
        print(json.dumps({"step_ms_median": None, "unavailable": "torch %s has no "
                          "F.scaled_dot_product_attention" % torch.__version__}))
        return
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    if a.model == "mlp":
        model, batch = mlp_model(), 256
        x = torch.randn(batch, 1024)
        y = torch.randint(0, 10, (batch,))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif a.model == "llama":
        model, batch = llama_model(), a.batch or 8
        x = torch.randint(0, 64, (batch, a.seq + 1))
        x, y = x[:, :-1], x[:, 1:]
    elif a.model in ("long", "long_sdpa"):
        sdpa = a.model == "long_sdpa"
        model, batch = nn.Sequential(TokEmbed(), CausalBlock(sdpa=sdpa), CausalBlock(sdpa=sdpa),
                                     Head(64, 64)), 1
        x = torch.randint(0, 64, (batch, a.T))
        y = torch.roll(x, 1, dims=1)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
    elif a.model == "resnet20":
        # channels_last: the NHWC layout clremat uses, and PyTorch's faster CPU convolution path
        model, batch = resnet20_model().to(memory_format=torch.channels_last), 64
        x = torch.randn(batch, 3, 32, 32).to(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (batch,))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        model, batch = nn.Sequential(Embed(), Block(), Block(), Head()), 32
        x = torch.randint(0, 16, (batch, 16))
        y = torch.flip(x, dims=[1])
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
    model.train()
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.checkpoint:
            inp = x
            if a.model == "resnet20":
                out = checkpoint_sequential(model, 4, inp.requires_grad_())
            elif a.model == "llama":
                # the embedding outside; each decoder block a segment, the head in the last
                out = checkpoint_sequential(model[1:], 4, model[0](x))
            elif a.model != "mlp":
                # token ids cannot carry gradients: the embedding runs outside, the
                # blocks and head are checkpointed (3 segments, one per module)
                out = checkpoint_sequential(model[1:], 3, model[0](x))
            else:
                # the input must require grad, or the reentrant checkpoint drops the segments' gradients
                out = checkpoint_sequential(model, 4, inp.requires_grad_())
        else:
            out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        if s >= a.warmup:
            times.append(dt)
    print(json.dumps({"step_ms_median": statistics.median(times), "steps": a.steps, "threads": a.threads,
                      "loss": float(loss)}))


if __name__ == "__main__":
    main()
