"""torch_model.py — an independent PyTorch implementation of tfm's Transformer.

Built from a tfm safetensors checkpoint (the header is parsed with json and
numpy; no safetensors package needed), for checking tfm against PyTorch:
tests/torch_parity.py (loss and every gradient), the eval check of
`tfm eval --no-translate` (nll_per_token) and scripts/bench-train.sh.

    import torch_model as tm
    model, dims, meta = tm.from_checkpoint("model.safetensors")
    loss, nll, tokens = tm.batch_loss(model, src, src_len, tgt_in, tgt_out, tgt_len,
                                      label_smoothing=0.0)   # plain NLL sum

The model is the one of "Attention Is All You Need" as tfm computes it:
  - embeddings: E[token] * sqrt(D) + PE[position], positions from 0,
    PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(same);
  - post-norm (LN(x + dropout(f(x)))) or pre-norm (x + dropout(f(LN(x))) and
    a final LayerNorm per stack), LayerNorm eps 1e-5;
  - multi-head attention with torch.nn.Linear projections named as fairseq's
    (q_proj, k_proj, v_proj, out_proj); padded source keys masked, causal
    mask in decoder self-attention;
  - one shared [V, D] matrix: source embedding, target embedding and the
    pre-softmax weight (logits = y E^T, no bias);
  - label smoothing: q_y = 1 - eps, q_j = eps / (V - 1) for j != y, loss
    -sum_j q_j log p_j summed over the target positions t < tgt_len.
Batches: src [B, S], tgt_in / tgt_out [B, T] (int64), src_len / tgt_len [B].
"""
import configparser
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    """Returns ({name: numpy array}, {metadata key: string})."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(blob, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=base + begin)
        tensors[name] = arr.reshape(info["shape"]).copy()
    return tensors, meta


def write_safetensors(path, tensors, metadata=None):
    """Minimal writer (F32 / I64), for benchmarks and tests."""
    names = sorted(tensors)
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name in names:
        a = np.ascontiguousarray(tensors[name])
        dt = {np.float32: "F32", np.int64: "I64"}[a.dtype.type]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Dims:
    """The model's hyperparameters, from the checkpoint's [model] config."""

    def __init__(self, vocab, d_model=512, d_ff=2048, heads=8, encoder_layers=6, decoder_layers=6,
                 pre_norm=False, dropout=0.1, attention_dropout=0.0, relu_dropout=0.0,
                 label_smoothing=0.1, max_positions=1024):
        self.vocab, self.d_model, self.d_ff, self.heads = vocab, d_model, d_ff, heads
        self.encoder_layers, self.decoder_layers, self.pre_norm = encoder_layers, decoder_layers, pre_norm
        self.dropout, self.attention_dropout, self.relu_dropout = dropout, attention_dropout, relu_dropout
        self.label_smoothing, self.max_positions = label_smoothing, max_positions

    def __repr__(self):
        return "Dims(%s)" % ", ".join("%s=%r" % kv for kv in vars(self).items())


def dims_from_config_text(text, vocab):
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    cp.read_string(text)
    m = cp["model"] if cp.has_section("model") else {}

    def get(key, conv, default):
        return conv(m[key]) if key in m else default

    return Dims(vocab=vocab,
                d_model=get("d_model", int, 512), d_ff=get("d_ff", int, 2048), heads=get("heads", int, 8),
                encoder_layers=get("encoder_layers", int, 6), decoder_layers=get("decoder_layers", int, 6),
                pre_norm=get("norm", str, "post").strip() == "pre",
                dropout=get("dropout", float, 0.1), attention_dropout=get("attention_dropout", float, 0.0),
                relu_dropout=get("relu_dropout", float, 0.0), label_smoothing=get("label_smoothing", float, 0.1),
                max_positions=get("max_positions", int, 1024))


def bf16(x):
    """x rounded to bf16 (to nearest even, as tfm) and back to its dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


class Bf16Linear(torch.autograd.Function):
    """y = x W^T + b as tfm computes it with [run] precision = bf16: every
    product takes its inputs rounded to bf16 and sums in float32 (a product
    of two bf16 values is exact in float32): forward round(x) round(W)^T,
    backward dx = round(dy) round(W), dW = round(dy)^T round(x), and
    db = the column sums of round(dy) (tfm's dy arrives rounded: its
    producers write it so, as autocast's bf16 gradients are)."""

    @staticmethod
    def forward(ctx, x, w, b):
        xr, wr = bf16(x), bf16(w)
        ctx.save_for_backward(xr, wr)
        ctx.has_bias = b is not None
        y = xr @ wr.t()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, dy):
        xr, wr = ctx.saved_tensors
        dyr = bf16(dy)
        dx = dyr @ wr
        dw = dyr.reshape(-1, dy.shape[-1]).t() @ xr.reshape(-1, xr.shape[-1])
        db = dyr.reshape(-1, dy.shape[-1]).sum(0) if ctx.has_bias else None
        return dx, dw, db


class Bf16Matmul(torch.autograd.Function):
    """a @ b (batched) as tfm's attention core computes it with [run]
    precision = bf16, the way autocast runs bmm in bf16 but with float32
    (or here float64) sums and outputs: forward round(a) round(b), backward
    da = round(dy) round(b)^T, db = round(a)^T round(dy). The softmax and its
    backward between the products stay unrounded, as in tfm."""

    @staticmethod
    def forward(ctx, a, b):
        ar, br = bf16(a), bf16(b)
        ctx.save_for_backward(ar, br)
        return ar @ br

    @staticmethod
    def backward(ctx, dy):
        ar, br = ctx.saved_tensors
        dyr = bf16(dy)
        return dyr @ br.transpose(-1, -2), ar.transpose(-1, -2) @ dyr


class Linear(nn.Linear):
    """torch.nn.Linear, or its bf16 products when self.bf16 (set_precision)."""
    bf16 = False

    def forward(self, x):
        return Bf16Linear.apply(x, self.weight, self.bias) if self.bf16 else super().forward(x)


def set_precision(model, bf16_products):
    """tfm's [run] precision: False fp32, True bf16 (every linear layer, the
    output layer and the attention core's products; LayerNorm, softmax, the
    loss stay fp32)."""
    for mod in model.modules():
        if isinstance(mod, (Linear, Transformer, MultiheadAttention)):
            mod.bf16 = bf16_products


def sinusoids(max_pos, D):
    pe = np.zeros((max_pos, D), dtype=np.float64)
    pos = np.arange(max_pos, dtype=np.float64)[:, None]
    for j in range(D):
        angle = pos[:, 0] / np.power(10000.0, (j - j % 2) / D)
        pe[:, j] = np.cos(angle) if j % 2 else np.sin(angle)
    return torch.tensor(pe, dtype=torch.float32)


class MultiheadAttention(nn.Module):
    bf16 = False   # set_precision: Q K^T and P V (and their backward) as bf16 products

    def __init__(self, D, H, dropout):
        super().__init__()
        self.H, self.Dk, self.dropout = H, D // H, dropout
        self.q_proj, self.k_proj = Linear(D, D), Linear(D, D)
        self.v_proj, self.out_proj = Linear(D, D), Linear(D, D)

    def forward(self, xq, xkv, key_pad=None, causal=False):
        B, Tq, D = xq.shape
        Tk = xkv.shape[1]
        q = self.q_proj(xq).view(B, Tq, self.H, self.Dk).transpose(1, 2)     # [B, H, Tq, Dk]
        k = self.k_proj(xkv).view(B, Tk, self.H, self.Dk).transpose(1, 2)
        v = self.v_proj(xkv).view(B, Tk, self.H, self.Dk).transpose(1, 2)
        mm = Bf16Matmul.apply if self.bf16 else torch.matmul
        s = mm(q, k.transpose(-1, -2)) / math.sqrt(self.Dk)                  # [B, H, Tq, Tk]
        mask = torch.zeros(B, 1, Tq, Tk, dtype=torch.bool, device=xq.device)
        if key_pad is not None:
            mask = mask | key_pad[:, None, None, :]
        if causal:
            mask = mask | torch.ones(Tq, Tk, dtype=torch.bool, device=xq.device).triu(1)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        p = F.dropout(p, self.dropout, self.training)
        o = mm(p, v).transpose(1, 2).reshape(B, Tq, D)
        return self.out_proj(o)


class Sublayers(nn.Module):
    """Residual + dropout + LayerNorm around a sublayer, post or pre norm."""

    def residual(self, x, f, ln):
        d = self.dims
        if d.pre_norm:
            return x + F.dropout(f(ln(x)), d.dropout, self.training)
        return ln(x + F.dropout(f(x), d.dropout, self.training))

    def ffn(self, x):
        h = F.dropout(F.relu(self.fc1(x)), self.dims.relu_dropout, self.training)
        return self.fc2(h)


class EncoderLayer(Sublayers):
    def __init__(self, d):
        super().__init__()
        self.dims = d
        self.self_attn = MultiheadAttention(d.d_model, d.heads, d.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d.d_model, eps=1e-5)
        self.fc1, self.fc2 = Linear(d.d_model, d.d_ff), Linear(d.d_ff, d.d_model)
        self.final_layer_norm = nn.LayerNorm(d.d_model, eps=1e-5)

    def forward(self, x, src_pad):
        x = self.residual(x, lambda y: self.self_attn(y, y, key_pad=src_pad), self.self_attn_layer_norm)
        return self.residual(x, self.ffn, self.final_layer_norm)


class DecoderLayer(Sublayers):
    def __init__(self, d):
        super().__init__()
        self.dims = d
        self.self_attn = MultiheadAttention(d.d_model, d.heads, d.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d.d_model, eps=1e-5)
        self.encoder_attn = MultiheadAttention(d.d_model, d.heads, d.attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(d.d_model, eps=1e-5)
        self.fc1, self.fc2 = Linear(d.d_model, d.d_ff), Linear(d.d_ff, d.d_model)
        self.final_layer_norm = nn.LayerNorm(d.d_model, eps=1e-5)

    def forward(self, x, enc, src_pad):
        x = self.residual(x, lambda y: self.self_attn(y, y, causal=True), self.self_attn_layer_norm)
        x = self.residual(x, lambda y: self.encoder_attn(y, enc, key_pad=src_pad), self.encoder_attn_layer_norm)
        return self.residual(x, self.ffn, self.final_layer_norm)


class Stack(nn.Module):
    def __init__(self, d, layer, n, with_embedding):
        super().__init__()
        if with_embedding:
            self.embed_tokens = nn.Embedding(d.vocab, d.d_model)
        self.layers = nn.ModuleList([layer(d) for _ in range(n)])
        if d.pre_norm:
            self.layer_norm = nn.LayerNorm(d.d_model, eps=1e-5)


class Transformer(nn.Module):
    """State-dict names are tfm's (= fairseq's): encoder.embed_tokens.weight is
    the one shared matrix; the decoder has no embedding of its own."""

    bf16 = False   # set_precision

    def __init__(self, d):
        super().__init__()
        self.dims = d
        self.encoder = Stack(d, EncoderLayer, d.encoder_layers, True)
        self.decoder = Stack(d, DecoderLayer, d.decoder_layers, False)
        self.register_buffer("pe", sinusoids(d.max_positions, d.d_model), persistent=False)

    def embed(self, tokens):
        E = self.encoder.embed_tokens.weight
        x = E[tokens] * math.sqrt(self.dims.d_model) + self.pe[:tokens.shape[1]].to(E.dtype)
        return F.dropout(x, self.dims.dropout, self.training)

    def encode(self, src, src_len):
        S = src.shape[1]
        src_pad = torch.arange(S, device=src.device)[None, :] >= src_len[:, None]   # [B, S] True = pad
        x = self.embed(src)
        for layer in self.encoder.layers:
            x = layer(x, src_pad)
        if self.dims.pre_norm:
            x = self.encoder.layer_norm(x)
        return x, src_pad

    def decode(self, tgt_in, enc, src_pad):
        x = self.embed(tgt_in)
        for layer in self.decoder.layers:
            x = layer(x, enc, src_pad)
        if self.dims.pre_norm:
            x = self.decoder.layer_norm(x)
        E = self.encoder.embed_tokens.weight
        if self.bf16:
            return Bf16Linear.apply(x, E, None)
        return x @ E.t()                                      # logits [B, T, V]

    def forward(self, src, src_len, tgt_in):
        enc, src_pad = self.encode(src, src_len)
        return self.decode(tgt_in, enc, src_pad)


def smoothed_loss(logits, tgt_out, tgt_len, eps):
    """(label-smoothed loss sum, NLL sum, tokens) over positions t < tgt_len."""
    B, T, V = logits.shape
    real = torch.arange(T, device=logits.device)[None, :] < tgt_len[:, None]
    logp = torch.log_softmax(logits, dim=-1)
    y = tgt_out.clamp(0, V - 1)
    nll = -logp.gather(-1, y[..., None])[..., 0]
    smooth = -logp.sum(-1)
    loss = (1.0 - eps) * nll + eps / (V - 1) * (smooth - nll)
    return (loss * real).sum(), (nll * real).sum(), int(real.sum())


def batch_loss(model, src, src_len, tgt_in, tgt_out, tgt_len, label_smoothing=None):
    eps = model.dims.label_smoothing if label_smoothing is None else label_smoothing
    return smoothed_loss(model(src, src_len, tgt_in), tgt_out, tgt_len, eps)


def model_tensor_names(tensors):
    """The model tensors of a checkpoint (training state lives under optimizer.*)."""
    return sorted(n for n in tensors if not n.startswith("optimizer."))


def from_checkpoint(path, dtype=torch.float32):
    """(model, dims, metadata) with the weights of a tfm checkpoint; eval mode."""
    tensors, meta = read_safetensors(path)
    vocab = tensors["encoder.embed_tokens.weight"].shape[0]
    d = dims_from_config_text(meta.get("config", ""), vocab)
    model = Transformer(d)
    sd = model.state_dict()
    names = model_tensor_names(tensors)
    if sorted(sd) != names:
        missing = sorted(set(sd) - set(names))
        extra = sorted(set(names) - set(sd))
        raise ValueError("%s: tensors do not match the config: missing %s, unexpected %s" % (path, missing[:5], extra[:5]))
    for name in names:
        if tuple(sd[name].shape) != tensors[name].shape:
            raise ValueError("%s: %s has shape %s, expected %s" % (path, name, tensors[name].shape, tuple(sd[name].shape)))
    model.load_state_dict({n: torch.from_numpy(tensors[n]) for n in names})
    model = model.to(dtype)
    model.pe = model.pe.to(dtype)
    model.eval()
    return model, d, meta
