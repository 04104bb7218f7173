#!/usr/bin/env python3
"""Reference logits for ds4j's MTP draft (DeepSeek-V4 multi-token prediction), in plain PyTorch fp32.

Written from the model description in docs/ds4-architecture.md (sections 1-4) and the MTP description in
docs/drafts-mtp-prediction.md; it does not use transformers, so it also runs where only torch is installed.

What it computes, for a checkpoint written by `ds4j make-model` (BF16 or F32 storage; Hugging Face or original
naming for the main layers; the MTP layer as `mtp.0.*`):

1. the main model over prompt tokens 0..N-1 (no cache: every window, compressor entry and indexer selection is
   computed from the whole prefix), giving the residual streams H_t (before hc_head) and the target's logits at N-1;
2. the MTP block over every position t = 0..N-1 of the prompt: input streams
   x_t,i = h_proj(hnorm(H_t,i)) + e_proj(enorm(embed(tok_{t+1}))) (embedding term zero at t = 0), one decoder layer
   with sliding-window attention only (main rope), a top-k MoE and mHC, then the MTP's own hc_head, its norm and the
   shared lm_head. Entry N-1 (fed the pending token ids[N]) gives the first draft's logits;
3. chained drafts: entry N-1+i is fed the MTP's own output streams of entry N-2+i and the previous draft's argmax.

ds4j keeps its attention cache in IEEE float16; like tools/reference/make_fixtures.py's F16-cache runs, this
reference rounds every raw kv row, compressed entry and indexer key through float16 right after its RoPE (turn it
off with --no-f16-cache).

Output: one safetensors file with input_ids (I64 [N+1]), chain_tokens (I64 [q]: the argmax of each MTP row),
logits.target (F32 [V]), logits.mtp (F32 [q, V]) and metadata (strings) with the smallest top-k gaps seen.

Usage:
  ds4j make-model --preset tiny --seed 20260601 --out /tmp/tiny-mtp
  python3 tools/reference/mtp_reference.py --model /tmp/tiny-mtp --out mtp-expected.safetensors [--q 3] [--prompt-len 41]
      [--compare src/test/resources/fixtures/mtp/tiny-seed20260601-expected.safetensors]
  python3 tools/reference/mtp_reference.py --check-fixture src/test/resources/fixtures/tiny-hf-bf16
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch

torch.set_grad_enabled(False)
F32 = torch.float32


# ----------------------------------------------------------------------------------------------- safetensors

def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dt == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dt == "I64":
            arr = np.frombuffer(raw, dtype="<i8").astype(np.int64)
        elif dt == "I32":
            arr = np.frombuffer(raw, dtype="<i4").astype(np.int64)
        else:
            out[name] = ("unsupported", dt)
            continue
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    return out, header.get("__metadata__", {})


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, t in tensors.items():
        a = t.numpy()
        if a.dtype == np.float32:
            dt, raw = "F32", a.astype("<f4").tobytes()
        elif a.dtype == np.int64:
            dt, raw = "I64", a.astype("<i8").tobytes()
        else:
            raise ValueError(name + ": unsupported dtype " + str(a.dtype))
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ----------------------------------------------------------------------------------------------- config

class Cfg:
    def __init__(self, j):
        self.V = j["vocab_size"]
        self.D = j["hidden_size"]
        self.L = j["num_hidden_layers"]
        self.H = j["num_attention_heads"]
        self.d = j["head_dim"]
        self.qr = j["q_lora_rank"]
        self.G = j["o_groups"]
        self.R = j["o_lora_rank"]
        self.W = j["sliding_window"]
        self.E = j["n_routed_experts"]
        self.k = j["num_experts_per_tok"]
        self.I = j["moe_intermediate_size"]
        self.scale = j.get("routed_scaling_factor", 1.5)
        self.lim = j.get("swiglu_limit", 10.0)
        self.n = j.get("hc_mult", 4)
        self.sk = j.get("hc_sinkhorn_iters", 20)
        self.hc_eps = j.get("hc_eps", 1e-6)
        self.eps = j.get("rms_norm_eps", 1e-6)
        self.HI = j["index_n_heads"]
        self.dI = j["index_head_dim"]
        self.KI = j["index_topk"]
        if "qk_rope_head_dim" in j:
            self.r = j["qk_rope_head_dim"]
        else:
            self.r = int(self.d * j.get("partial_rotary_factor", 0.125))
        kinds = {"sliding_attention": 0, "compressed_sparse_attention": 1, "heavily_compressed_attention": 2}
        if "layer_types" in j:
            self.types = [kinds[t] for t in j["layer_types"]][: self.L]
        else:
            self.types = [{0: 0, 4: 1, 128: 2}[x] for x in j["compress_ratios"]][: self.L]
        cr = j.get("compress_rates", {})
        self.mC = cr.get("compressed_sparse_attention", 4)
        self.mH = cr.get("heavily_compressed_attention", 128)
        if "mlp_layer_types" in j:
            self.hash = [t == "hash_moe" for t in j["mlp_layer_types"]][: self.L]
        else:
            h = j.get("num_hash_layers", 3)
            self.hash = [l < h for l in range(self.L)]
        self.theta = j.get("rope_theta", 10000.0)
        self.ctheta = j.get("compress_rope_theta", 160000.0)
        self.yarn = None
        rp = j.get("rope_parameters") or j.get("rope_scaling")
        if isinstance(rp, dict):
            comp = rp.get("compress", rp) if isinstance(rp.get("compress"), dict) else rp
            if isinstance(rp.get("main"), dict) and "rope_theta" in rp["main"]:
                self.theta = rp["main"]["rope_theta"]
            if comp is not rp and "rope_theta" in comp:
                self.ctheta = comp["rope_theta"]
            typ = comp.get("rope_type", comp.get("type", "default"))
            if typ == "yarn":
                self.yarn = (comp["factor"], comp["original_max_position_embeddings"],
                             comp.get("beta_fast", 32), comp.get("beta_slow", 1))


# ----------------------------------------------------------------------------------------------- rope (spec 1.4)

def inv_freq(theta, r, yarn):
    f = np.float32
    half = r // 2
    out = np.zeros(half, dtype=np.float32)
    if yarn is not None:
        s, L0, bf, bs = yarn

        def corr(beta):
            return r * math.log(L0 / (2 * math.pi * beta)) / (2 * math.log(theta))

        low = max(math.floor(corr(bf)), 0)
        high = min(math.ceil(corr(bs)), r - 1)
        if low == high:
            high += 0.001
    for i in range(half):
        e = f(f(2 * i) / f(r))
        p = f(math.pow(theta, float(e)))
        ext = f(f(1.0) / p)
        if yarn is None:
            out[i] = ext
            continue
        inter = f(f(1.0) / f(f(s) * p))
        ramp = f(f(i - low) / f(high - low))
        ramp = min(max(ramp, f(0.0)), f(1.0))
        ef = f(f(1.0) - ramp)
        out[i] = f(f(inter * f(f(1.0) - ef)) + f(ext * ef))
    return out


class Rope:
    def __init__(self, theta, r, yarn):
        self.inv = inv_freq(theta, r, yarn)
        self.r = r

    def cs(self, pos):
        """cos, sin [len(pos), r/2] (fp32 angle product, accurate cos/sin rounded to fp32)."""
        ang = (np.asarray(pos, dtype=np.float32)[:, None] * self.inv[None, :]).astype(np.float32)
        c = np.cos(ang.astype(np.float64)).astype(np.float32)
        s = np.sin(ang.astype(np.float64)).astype(np.float32)
        return torch.from_numpy(c), torch.from_numpy(s)

    def apply(self, x, pos, inverse=False):
        """Rotates the last r channels of x [..., T, ?, w] or [T, w] in interleaved pairs at positions pos [T]."""
        c, s = self.cs(pos)
        if inverse:
            s = -s
        r = self.r
        y = x.clone()
        a = x[..., -r::2]
        b = x[..., -r + 1::2]
        shape = [1] * (x.dim() - 2)
        # broadcast [T, r/2] over any head dim between T and the channels
        if x.dim() == 3:
            c2, s2 = c[:, None, :], s[:, None, :]
        else:
            c2, s2 = c, s
        y[..., -r::2] = a * c2 - b * s2
        y[..., -r + 1::2] = b * c2 + a * s2
        return y


# ----------------------------------------------------------------------------------------------- primitives

class Gaps:
    """Smallest gap between the k-th and (k+1)-th value at every top-k decision (router and indexer)."""

    def __init__(self):
        self.router = math.inf
        self.indexer = math.inf

    def note(self, kind, vals, k):
        if vals.numel() <= k:
            return
        top = torch.topk(vals, k + 1).values
        g = float(top[k - 1] - top[k])
        setattr(self, kind, min(getattr(self, kind), g))


def rms(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def f16(x, on):
    return x.to(torch.float16).to(F32) if on else x


def lin(W, x):
    return x @ W.t()


def sqrtsoftplus(z):
    return torch.sqrt(torch.where(z > 20, z, torch.log1p(torch.exp(torch.clamp(z, max=20)))))


def swiglu(g, u, lim):
    g = torch.clamp(g, max=lim)
    u = torch.clamp(u, min=-lim, max=lim)
    return g * torch.sigmoid(g) * u


def hc_pre(cfg, X, fn, base, scale):
    """X [T, n, D] -> post [T, n], M [T, n, n], collapsed [T, D] (spec 3.2)."""
    T, n, D = X.shape
    v = rms(X.reshape(T, n * D), None, cfg.eps)
    mu = lin(fn, v)
    pre = torch.sigmoid(scale[0] * mu[:, :n] + base[:n]) + cfg.hc_eps
    post = 2 * torch.sigmoid(scale[1] * mu[:, n:2 * n] + base[n:2 * n])
    C = (scale[2] * mu[:, 2 * n:] + base[2 * n:]).reshape(T, n, n)
    M = torch.softmax(C, dim=-1) + cfg.hc_eps
    M = M / (M.sum(dim=1, keepdim=True) + cfg.hc_eps)
    for _ in range(cfg.sk - 1):
        M = M / (M.sum(dim=2, keepdim=True) + cfg.hc_eps)
        M = M / (M.sum(dim=1, keepdim=True) + cfg.hc_eps)
    col = (pre[:, :, None] * X).sum(dim=1)
    return post, M, col


def hc_post(X, f, post, M):
    # X'_k = post_k f + sum_j M_jk X_j
    return post[:, :, None] * f[:, None, :] + torch.einsum("tjk,tjd->tkd", M, X)


def hc_head(cfg, X, fn, base, scale):
    T, n, D = X.shape
    v = rms(X.reshape(T, n * D), None, cfg.eps)
    pre = torch.sigmoid(lin(fn, v) * scale[0] + base) + cfg.hc_eps
    return (pre[:, :, None] * X).sum(dim=1)


# ----------------------------------------------------------------------------------------------- layers

def compress_entries(cfg, a, z, B, m, overlap, norm, rope, f16on):
    """Entries C_w for every complete window of the T rows (spec 3.5); a, z [T, c*w]; B [m, c*w]."""
    T = a.shape[0]
    w = a.shape[1] // (2 if overlap else 1)
    nwin = T // m
    out = []
    for win in range(nwin):
        rows = list(range(win * m, win * m + m))
        zb = z[rows] + B
        if overlap:
            cur_v, cur_z = a[rows, w:], zb[:, w:]
            if win > 0:
                prev = list(range((win - 1) * m, win * m))
                zp = z[prev] + B
                vals = torch.cat([a[prev, :w], cur_v], 0)
                lg = torch.cat([zp[:, :w], cur_z], 0)
            else:
                vals, lg = cur_v, cur_z
        else:
            vals, lg = a[rows], zb
        p = torch.softmax(lg, dim=0)
        pooled = (p * vals).sum(0)
        e = rope.apply(rms(pooled, norm, cfg.eps)[None, :], [win * m])[0]
        out.append(f16(e, f16on))
    return torch.stack(out) if out else torch.zeros(0, w)


def attention(cfg, P, x, kind, rope, f16on, gaps, pos0=0):
    """x [T, D] normalised input; P: dict of this layer's weights (canonical suffix -> tensor)."""
    T = x.shape[0]
    H, d, r = cfg.H, cfg.d, cfg.r
    pos = list(range(pos0, pos0 + T))
    ql = rms(lin(P["attn.wq_a"], x), P["attn.q_norm"], cfg.eps)
    q = lin(P["attn.wq_b"], ql).reshape(T, H, d)
    q = rms(q, None, cfg.eps)
    q = rope.apply(q, pos)
    kv = rope.apply(rms(lin(P["attn.wkv"], x), P["attn.kv_norm"], cfg.eps), pos)
    kv = f16(kv, f16on)
    ent = None
    sel = None
    if kind != 0:
        m = cfg.mC if kind == 1 else cfg.mH
        ov = kind == 1
        a = lin(P["attn.compressor.wkv"], x)
        zz = lin(P["attn.compressor.wgate"], x)
        ent = compress_entries(cfg, a, zz, P["attn.compressor.ape"], m, ov, P["attn.compressor.norm"], rope, f16on)
        if kind == 1:
            ia = lin(P["attn.indexer.compressor.wkv"], x)
            iz = lin(P["attn.indexer.compressor.wgate"], x)
            keys = compress_entries(cfg, ia, iz, P["attn.indexer.compressor.ape"], m, True,
                                    P["attn.indexer.compressor.norm"], rope, f16on)
            qi = lin(P["attn.indexer.wq_b"], ql).reshape(T, cfg.HI, cfg.dI)
            qi = rope.apply(qi, pos)
            wt = lin(P["attn.indexer.weights_proj"], x) * (cfg.HI ** -0.5)
            sel = []
            for t in range(T):
                avail = (pos[t] + 1) // m
                if avail <= cfg.KI:
                    sel.append(list(range(avail)))
                    continue
                dots = torch.relu(qi[t] @ keys[:avail].t())  # [HI, avail]
                score = (wt[t][:, None] * dots).sum(0) * (cfg.dI ** -0.5)
                gaps.note("indexer", score, cfg.KI)
                top = torch.topk(score, cfg.KI).indices.tolist()
                sel.append(sorted(top))
    o = torch.zeros(T, H, d)
    scale = d ** -0.5
    for t in range(T):
        keys_t = [kv[s] for s in range(max(0, t - cfg.W + 1), t + 1)]
        if kind == 2:
            vis = (pos[t] + 1) // cfg.mH
            keys_t += [ent[w] for w in range(vis)]
        elif kind == 1:
            keys_t += [ent[w] for w in sel[t]]
        K = torch.stack(keys_t)  # [k, d]
        lg = (q[t] @ K.t()) * scale  # [H, k]
        sink = P["attn.attn_sink"]
        mx = torch.maximum(lg.max(dim=1).values, sink)
        e = torch.exp(lg - mx[:, None])
        den = e.sum(1) + torch.exp(sink - mx)
        o[t] = (e / den[:, None]) @ K
    o = rope.apply(o, pos, inverse=True)
    G, R = cfg.G, cfg.R
    gw = H * d // G
    u = o.reshape(T, G, gw)
    ys = [lin(P["attn.wo_a"][g * R:(g + 1) * R], u[:, g]) for g in range(G)]
    return lin(P["attn.wo_b"], torch.cat(ys, dim=1))


def moe(cfg, P, h, toks, hashed, gaps):
    T = h.shape[0]
    s = sqrtsoftplus(lin(P["ffn.gate"], h))
    out = torch.zeros_like(h)
    for t in range(T):
        if hashed:
            idx = P["ffn.gate.tid2eid"][toks[t]].tolist()
        else:
            biased = s[t] + P["ffn.gate.bias"]
            gaps.note("router", biased, cfg.k)
            idx = torch.topk(biased, cfg.k).indices.tolist()
        wts = s[t][idx]
        wts = wts / (wts.sum() + 1e-20) * cfg.scale
        acc = torch.zeros(cfg.D)
        for j, e in sorted(zip(range(len(idx)), idx), key=lambda p: p[1]):
            g = lin(P["expert.w1"][e], h[t:t + 1])
            u = lin(P["expert.w3"][e], h[t:t + 1])
            acc = acc + wts[j] * lin(P["expert.w2"][e], swiglu(g, u, cfg.lim))[0]
        out[t] = acc
    sg = lin(P["ffn.shared_experts.w1"], h)
    su = lin(P["ffn.shared_experts.w3"], h)
    return out + lin(P["ffn.shared_experts.w2"], swiglu(sg, su, cfg.lim))


def block(cfg, P, X, toks, kind, hashed, rope, f16on, gaps):
    post, M, c = hc_pre(cfg, X, P["hc_attn_fn"], P["hc_attn_base"], P["hc_attn_scale"])
    a = attention(cfg, P, rms(c, P["attn_norm"], cfg.eps), kind, rope, f16on, gaps)
    X = hc_post(X, a, post, M)
    post, M, c = hc_pre(cfg, X, P["hc_ffn_fn"], P["hc_ffn_base"], P["hc_ffn_scale"])
    f = moe(cfg, P, rms(c, P["ffn_norm"], cfg.eps), toks, hashed, gaps)
    return hc_post(X, f, post, M)


# ----------------------------------------------------------------------------------------------- weights

# original layer suffix (without .weight) -> Hugging Face layer suffix
HF_OF = {
    "hc_attn_fn": "attn_hc.fn", "hc_attn_base": "attn_hc.base", "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn", "hc_ffn_base": "ffn_hc.base", "hc_ffn_scale": "ffn_hc.scale",
    "attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
    "attn.wq_a": "self_attn.q_a_proj.weight", "attn.q_norm": "self_attn.q_a_norm.weight",
    "attn.wq_b": "self_attn.q_b_proj.weight", "attn.wkv": "self_attn.kv_proj.weight",
    "attn.kv_norm": "self_attn.kv_norm.weight", "attn.wo_a": "self_attn.o_a_proj.weight",
    "attn.wo_b": "self_attn.o_b_proj.weight", "attn.attn_sink": "self_attn.sinks",
    "attn.compressor.wkv": "self_attn.compressor.kv_proj.weight",
    "attn.compressor.wgate": "self_attn.compressor.gate_proj.weight",
    "attn.compressor.ape": "self_attn.compressor.position_bias",
    "attn.compressor.norm": "self_attn.compressor.kv_norm.weight",
    "attn.indexer.compressor.wkv": "self_attn.compressor.indexer.kv_proj.weight",
    "attn.indexer.compressor.wgate": "self_attn.compressor.indexer.gate_proj.weight",
    "attn.indexer.compressor.ape": "self_attn.compressor.indexer.position_bias",
    "attn.indexer.compressor.norm": "self_attn.compressor.indexer.kv_norm.weight",
    "attn.indexer.wq_b": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "ffn.gate": "mlp.gate.weight", "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w3": "mlp.shared_experts.up_proj.weight",
    "ffn.shared_experts.w2": "mlp.shared_experts.down_proj.weight",
}
NO_WEIGHT_SUFFIX = {"hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale",
                    "attn.attn_sink", "attn.compressor.ape", "attn.indexer.compressor.ape", "ffn.gate.bias",
                    "ffn.gate.tid2eid"}


class Weights:
    def __init__(self, tensors, cfg):
        self.t = tensors
        self.cfg = cfg
        self.hf = "model.embed_tokens.weight" in tensors

    def get(self, name):
        v = self.t.get(name)
        if v is None:
            raise KeyError("tensor '" + name + "' not found")
        if isinstance(v, tuple):
            raise ValueError("tensor '" + name + "' has dtype " + v[1] + "; write the checkpoint with --dtype bf16 or f32")
        return v.to(F32) if v.dtype != torch.int64 else v

    def top(self, orig):
        hf = {"embed": "model.embed_tokens.weight", "head": "lm_head.weight", "norm": "model.norm.weight",
              "hc_head_fn": "model.hc_head.hc_fn", "hc_head_base": "model.hc_head.hc_base",
              "hc_head_scale": "model.hc_head.hc_scale"}[orig]
        return self.get(hf) if self.hf else self.get(orig + ("" if orig.startswith("hc_") else ".weight"))

    def layer(self, prefix, kind, hashed, original_names):
        """Weights of one layer keyed by original suffix; prefix 'layers.l.' / 'model.layers.l.' / 'mtp.0.'."""
        P = {}
        for o, h in HF_OF.items():
            if kind == 0 and ".compressor." in h:
                continue
            if kind != 1 and ".indexer." in h:
                continue
            if hashed and o == "ffn.gate.bias":
                continue
            if not hashed and o == "ffn.gate.tid2eid":
                continue
            name = prefix + (o + ("" if o in NO_WEIGHT_SUFFIX else ".weight") if original_names else h)
            P[o] = self.get(name)
        E, I = self.cfg.E, self.cfg.I
        if original_names:
            P["expert.w1"] = [self.get(prefix + "ffn.experts.%d.w1.weight" % e) for e in range(E)]
            P["expert.w3"] = [self.get(prefix + "ffn.experts.%d.w3.weight" % e) for e in range(E)]
            P["expert.w2"] = [self.get(prefix + "ffn.experts.%d.w2.weight" % e) for e in range(E)]
        elif prefix + "mlp.experts.gate_up_proj" in self.t:
            gu = self.get(prefix + "mlp.experts.gate_up_proj")
            dn = self.get(prefix + "mlp.experts.down_proj")
            P["expert.w1"] = [gu[e, :I] for e in range(E)]
            P["expert.w3"] = [gu[e, I:] for e in range(E)]
            P["expert.w2"] = [dn[e] for e in range(E)]
        else:
            P["expert.w1"] = [self.get(prefix + "mlp.experts.%d.gate_proj.weight" % e) for e in range(E)]
            P["expert.w3"] = [self.get(prefix + "mlp.experts.%d.up_proj.weight" % e) for e in range(E)]
            P["expert.w2"] = [self.get(prefix + "mlp.experts.%d.down_proj.weight" % e) for e in range(E)]
        return P

    def main_layer(self, l):
        c = self.cfg
        if self.hf:
            return self.layer("model.layers.%d." % l, c.types[l], c.hash[l], False)
        return self.layer("layers.%d." % l, c.types[l], c.hash[l], True)


# ----------------------------------------------------------------------------------------------- model

def main_forward(cfg, Wt, ids, f16on, gaps):
    """Streams before hc_head [T, n, D] and logits [T, V] of the main model over ids (no cache)."""
    ropes = {0: Rope(cfg.theta, cfg.r, None), 1: Rope(cfg.ctheta, cfg.r, cfg.yarn), 2: Rope(cfg.ctheta, cfg.r, cfg.yarn)}
    emb = Wt.top("embed")[ids]
    X = emb[:, None, :].repeat(1, cfg.n, 1)
    for l in range(cfg.L):
        X = block(cfg, Wt.main_layer(l), X, ids, cfg.types[l], cfg.hash[l], ropes[cfg.types[l]], f16on, gaps)
    y = hc_head(cfg, X, Wt.top("hc_head_fn"), Wt.top("hc_head_base"), Wt.top("hc_head_scale"))
    logits = lin(Wt.top("head"), rms(y, Wt.top("norm"), cfg.eps))
    return X, logits


def mtp_forward(cfg, Wt, Hs, next_toks, f16on, gaps):
    """MTP entries for positions 0..T-1: previous streams Hs [T, n, D], next tokens [T]. Returns out streams, logits."""
    T = Hs.shape[0]
    P = Wt.layer("mtp.0.", 0, False, True)
    g = Wt.get
    e = Wt.top("embed")[next_toks].clone()
    e[0] = 0.0  # the embedding term of position 0 is zero
    ev = lin(g("mtp.0.e_proj.weight"), rms(e, g("mtp.0.enorm.weight"), cfg.eps))
    hv = lin(g("mtp.0.h_proj.weight"), rms(Hs, g("mtp.0.hnorm.weight"), cfg.eps))
    X = hv + ev[:, None, :]
    X = block(cfg, P, X, next_toks, 0, False, Rope(cfg.theta, cfg.r, None), f16on, gaps)
    y = hc_head(cfg, X, g("mtp.0.hc_head_fn"), g("mtp.0.hc_head_base"), g("mtp.0.hc_head_scale"))
    logits = lin(Wt.top("head"), rms(y, g("mtp.0.norm.weight"), cfg.eps))
    return X, logits


def check_fixture(path, f16on):
    """Compares this reference's main model with HF's committed logits of a fixture (the HF main-model check)."""
    cfg = Cfg(json.load(open(path + "/config.json")))
    tensors, _ = read_safetensors(path + "/model.safetensors")
    exp, meta = read_safetensors(path + "/expected.safetensors")
    ids = exp["input_ids"].long()
    gaps = Gaps()
    _, logits = main_forward(cfg, Weights(tensors, cfg), ids, f16on, gaps)
    key = "logits.f16cache.nocache" if f16on else "logits.nocache"
    diff = (logits - exp[key]).abs().max(dim=1).values
    print("main model vs HF %s: max |diff| %.3g (per position: worst %s)" % (key, float(diff.max()),
          [round(float(v), 5) for v in diff.topk(3).values]))
    print("smallest top-k gaps: router %.3g, indexer %.3g" % (gaps.router, gaps.indexer))
    return float(diff.max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="checkpoint folder written by ds4j make-model (bf16 or f32), with an MTP layer")
    ap.add_argument("--out", help="output safetensors file")
    ap.add_argument("--q", type=int, default=3, help="chained MTP drafts (default 3)")
    ap.add_argument("--prompt-len", type=int, default=41, help="prompt tokens incl. the pending one (default 41)")
    ap.add_argument("--prompt-seed", type=int, default=20260601)
    ap.add_argument("--no-f16-cache", action="store_true", help="do not round cache rows through float16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check-fixture", help="compare the main model with a make_fixtures.py fixture folder and exit")
    ap.add_argument("--compare", help="an earlier output of this script: print the largest difference to it")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    f16on = not a.no_f16_cache
    if a.check_fixture:
        d = check_fixture(a.check_fixture, f16on)
        sys.exit(0 if d <= 2e-3 else 1)
    if not a.model or not a.out:
        ap.error("--model and --out are required")
    cj = json.load(open(a.model + "/config.json"))
    cfg = Cfg(cj)
    tensors, _ = read_safetensors(a.model + "/model.safetensors")
    if not any(k.startswith("mtp.0.") for k in tensors):
        sys.exit("the checkpoint has no mtp.0.* tensors (make it without --no-mtp)")
    Wt = Weights(tensors, cfg)
    g = torch.Generator().manual_seed(a.prompt_seed)
    ids = torch.randint(0, cfg.V, (a.prompt_len,), generator=g)
    N = a.prompt_len - 1
    gaps = Gaps()
    Hs, tlog = main_forward(cfg, Wt, ids[:N], f16on, gaps)
    main_gaps = (gaps.router, gaps.indexer)
    prev = Hs
    toks = ids[1:N + 1].clone()
    rows, chain = [], []
    for i in range(a.q):
        out, lg = mtp_forward(cfg, Wt, prev, toks, f16on, gaps)
        rows.append(lg[-1])
        d = int(torch.argmax(lg[-1]))
        top2 = torch.topk(lg[-1], 2).values
        print("MTP row %d: argmax %d (margin %.3g)" % (i, d, float(top2[0] - top2[1])))
        chain.append(d)
        # the next entry: the MTP's own output streams of this one, fed the draft token
        prev = torch.cat([Hs, out[N - 1:]], 0) if i == 0 else torch.cat([prev, out[-1:]], 0)
        toks = torch.cat([toks, torch.tensor([d])])
    meta = {"model": a.model, "prompt_seed": str(a.prompt_seed), "N": str(N), "q": str(a.q),
            "f16_cache": str(f16on), "torch": torch.__version__,
            "min_gap_router_main": "%.4g" % main_gaps[0], "min_gap_indexer_main": "%.4g" % main_gaps[1],
            "min_gap_router_all": "%.4g" % gaps.router, "command": " ".join(sys.argv)}
    write_safetensors(a.out, {"input_ids": ids.long(), "chain_tokens": torch.tensor(chain, dtype=torch.int64),
                              "logits.target": tlog[-1].contiguous(), "logits.mtp": torch.stack(rows).contiguous()}, meta)
    print("wrote %s: N=%d, q=%d, chain %s; smallest top-k gaps (main) router %.3g, indexer %.3g; (all) router %.3g"
          % (a.out, N, a.q, chain, main_gaps[0], main_gaps[1], gaps.router))
    if a.compare:
        old, _ = read_safetensors(a.compare)
        same_ids = bool(torch.equal(old["input_ids"], ids.long())) and bool(torch.equal(old["chain_tokens"], torch.tensor(chain)))
        dt = float((old["logits.target"] - tlog[-1]).abs().max())
        dm = float((old["logits.mtp"] - torch.stack(rows)).abs().max())
        print("vs %s: same input ids and chain %s; max |diff| target %.3g, mtp %.3g" % (a.compare, same_ids, dt, dm))


if __name__ == "__main__":
    main()
