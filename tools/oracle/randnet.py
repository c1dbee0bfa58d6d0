"""Seeded random CNN architectures for out-of-sample validation (tools/oracle/zoo.py).

build(seed) -> (nn.Module, description): a stem conv, 3 to 6 blocks drawn from BLOCKS,
each with a drawn activation (in place or not where the module allows it), normalisation
and widths, pooling between some blocks, and a head (adaptive/global pooling, dropout,
linear to CLASSES).  Input (batch, 3, IMAGE, IMAGE).  Only torch.nn modules and plain
tensor ops that the TorchScript ONNX exporter turns into standard ops in training mode.
The same seed gives the same architecture and the same weights (torch.manual_seed(seed)).
"""

import random

import torch
import torch.nn as nn

IMAGE = 32
CLASSES = 10

# (name, constructor(inplace) or None when the module has no inplace flag)
ACTS = (
    ("relu", lambda ip: nn.ReLU(inplace=ip)),
    ("relu6", lambda ip: nn.ReLU6(inplace=ip)),
    ("leaky_relu", lambda ip: nn.LeakyReLU(0.1, inplace=ip)),
    ("elu", lambda ip: nn.ELU(inplace=ip)),
    ("hardswish", lambda ip: nn.Hardswish(inplace=ip)),
    ("hardsigmoid", lambda ip: nn.Hardsigmoid(inplace=ip)),
    ("silu", lambda ip: nn.SiLU(inplace=ip)),
    ("gelu", None),
    ("sigmoid", None),
    ("tanh", None),
)
NORMS = ("batch", "group", "layer", "instance", "none")


class LayerNorm2d(nn.Module):
    """LayerNorm over channels of an NCHW tensor, as ConvNeXt's (permute, LN, permute)."""

    def __init__(self, c):
        super().__init__()
        self.ln = nn.LayerNorm(c)

    def forward(self, x):
        return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Draw:
    """The random choices of one architecture, with a log of what was drawn."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.log = []

    def act(self):
        name, make = self.r.choice(ACTS)
        ip = make is not None and self.r.random() < 0.5
        self.log.append(name + ("_" if ip else ""))
        return make(ip) if make else {"gelu": nn.GELU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[name]()

    def norm(self, c):
        kind = self.r.choice(NORMS)
        self.log.append(kind[0] + "n" if kind != "none" else "-")
        if kind == "batch":
            return nn.BatchNorm2d(c)
        if kind == "group":
            return nn.GroupNorm(self.r.choice([g for g in (1, 2, 4, 8) if c % g == 0]), c)
        if kind == "layer":
            return LayerNorm2d(c)
        if kind == "instance":
            return nn.InstanceNorm2d(c, affine=self.r.random() < 0.5)
        return nn.Identity()

    def cna(self, cin, cout, k=3, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=self.r.random() < 0.3),
                  self.norm(cout)]
        if act:
            layers.append(self.act())
        return nn.Sequential(*layers)


class SE(nn.Module):
    def __init__(self, d, c):
        super().__init__()
        s = max(4, c // 4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.act, self.fc2 = nn.Conv2d(c, s, 1), d.act(), nn.Conv2d(s, c, 1)
        self.gate = nn.Sigmoid() if d.r.random() < 0.5 else nn.Hardsigmoid()
        d.log.append("se-" + type(self.gate).__name__.lower())

    def forward(self, x):
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


class Residual(nn.Module):
    """body(x) + shortcut(x), then an optional activation."""

    def __init__(self, body, shortcut, post):
        super().__init__()
        self.body, self.shortcut, self.post = body, shortcut, post

    def forward(self, x):
        y = self.body(x) + self.shortcut(x)
        return self.post(y)


class Concat(nn.Module):
    """torch.cat of the branches' outputs (multi-branch, inception-like)."""

    def __init__(self, branches):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], 1)


class Dense(nn.Module):
    """DenseNet-like: each layer's output concatenated to its input."""

    def __init__(self, d, c, growth, n):
        super().__init__()
        self.layers = nn.ModuleList(d.cna(c + i * growth, growth) for i in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        return x


class Attention(nn.Module):
    """A small self-attention over the H*W positions: LN, q/k/v linear, softmax(qk^T/sqrt d) v,
    projection, residual add."""

    def __init__(self, d, c):
        super().__init__()
        self.heads = d.r.choice([h for h in (1, 2, 4) if c % h == 0])
        self.ln = nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.drop = nn.Dropout(d.r.choice((0.0, 0.1)))
        d.log.append(f"attn-heads{self.heads}-dropout{self.drop.p}")

    def forward(self, x):
        b, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)  # (b, hw, c)
        q, k, v = self.qkv(self.ln(t)).chunk(3, dim=-1)
        dh = c // self.heads
        q, k, v = (z.reshape(b, h * w, self.heads, dh).transpose(1, 2) for z in (q, k, v))
        a = self.drop(torch.softmax(q @ k.transpose(-2, -1) * dh ** -0.5, dim=-1))
        o = (a @ v).transpose(1, 2).reshape(b, h * w, c)
        return x + self.proj(o).transpose(1, 2).reshape(b, c, h, w)


def block(d, kind, c, cout, stride):
    r = d.r
    if kind == "plain":
        return d.cna(c, cout, r.choice((1, 3, 5)), stride)
    if kind == "basic":
        body = nn.Sequential(d.cna(c, cout, 3, stride), d.cna(cout, cout, 3, act=False))
        sc = nn.Identity() if stride == 1 and c == cout else d.cna(c, cout, 1, stride, act=False)
        return Residual(body, sc, d.act())
    if kind == "bottleneck":
        mid = max(4, cout // 4)
        g = r.choice([g for g in (1, 2, 4) if mid % g == 0])
        body = [d.cna(c, mid, 1), d.cna(mid, mid, 3, stride, groups=g)]
        if r.random() < 0.5:
            body.append(SE(d, mid))
        body.append(d.cna(mid, cout, 1, act=False))
        sc = nn.Identity() if stride == 1 and c == cout else d.cna(c, cout, 1, stride, act=False)
        return Residual(nn.Sequential(*body), sc, d.act())
    if kind == "inverted":
        mid = c * r.choice((2, 4, 6))
        body = [d.cna(c, mid, 1), d.cna(mid, mid, r.choice((3, 5)), stride, groups=mid)]
        if r.random() < 0.5:
            body.append(SE(d, mid))
        body.append(d.cna(mid, cout, 1, act=False))
        if stride == 1 and c == cout:
            return Residual(nn.Sequential(*body), nn.Identity(), nn.Identity())
        return nn.Sequential(*body)
    if kind == "dense":
        n, growth = r.choice((2, 3, 4)), r.choice((8, 12, 16))
        layers = [Dense(d, c, growth, n), d.cna(c + n * growth, cout, 1, stride)]
        return nn.Sequential(*layers)
    if kind == "branches":
        nb = r.choice((2, 3, 4))
        each = [cout // nb] * nb
        each[0] += cout - sum(each)
        br = []
        for e in each:
            k = r.choice(("1x1", "3x3", "5x5", "pool"))
            if k == "pool":
                pool = nn.MaxPool2d(3, stride, 1) if r.random() < 0.5 else nn.AvgPool2d(3, stride, 1)
                br.append(nn.Sequential(pool, d.cna(c, e, 1)))
            else:
                br.append(d.cna(c, e, int(k[0]), stride))
        return Concat(br)
    if kind == "attention":
        layers = [Attention(d, c)]
        if stride != 1 or c != cout:
            layers.append(d.cna(c, cout, 1, stride))
        return nn.Sequential(*layers)
    raise ValueError(kind)


BLOCKS = ("plain", "basic", "bottleneck", "inverted", "dense", "branches", "attention")


class RandNet(nn.Module):
    def __init__(self, seed):
        super().__init__()
        d = Draw(seed)
        r = d.r
        c = r.choice((8, 16, 24))
        self.stem = d.cna(3, c, 3, r.choice((1, 2)))
        size = IMAGE // self.stem[0].stride[0]
        # the stem's norm and activation too (rows measured before 2026-12-02 lack them:
        # rand30's out-of-place stem ELU was invisible to whatif.py's in-place test)
        blocks, desc = [], [f"stem{c}[{','.join(d.log)}]"]
        for _ in range(r.randint(3, 6)):
            kind = r.choice(BLOCKS if size <= 16 else BLOCKS[:-1])  # attention on <= 16x16
            stride = 2 if size > 4 and r.random() < 0.4 else 1
            cout = min(96, max(8, int(c * r.choice((1, 1, 1.5, 2)))) // 4 * 4)
            d.log = []
            blocks.append(block(d, kind, c, cout, stride))
            desc.append(f"{kind}{'/2' if stride == 2 else ''}:{c}->{cout}[{','.join(d.log)}]")
            c, size = cout, (size + stride - 1) // stride
            if size > 4 and r.random() < 0.25:
                pool = r.choice(("max", "avg"))
                blocks.append(nn.MaxPool2d(2) if pool == "max" else nn.AvgPool2d(2))
                desc.append(pool + "pool")
                size //= 2
        self.blocks = nn.Sequential(*blocks)
        pool = r.choice(("adaptive_avg", "adaptive_max"))
        self.pool = nn.AdaptiveAvgPool2d(1) if pool == "adaptive_avg" else nn.AdaptiveMaxPool2d(1)
        p = r.choice((0.0, 0.2, 0.5))
        self.drop = nn.Dropout(p)
        self.fc = nn.Linear(c, CLASSES)
        desc.append(f"{pool},dropout{p},fc{c}->{CLASSES}")
        self.description = " ".join(desc)

    def forward(self, x):
        return self.fc(self.drop(torch.flatten(self.pool(self.blocks(self.stem(x))), 1)))


def build(seed):
    torch.manual_seed(seed)
    m = RandNet(seed)
    return m, m.description
