#!/usr/bin/env python3
"""Generate seeded tiny DeepSeek-V4 reference fixtures for the ds4j parity tests.

Usage:
    python3 tools/reference/make_fixtures.py --out DIR [--device cpu|cuda|auto]

Needs torch (>= 2.4, for float8 dtypes), transformers >= 5.17 (DeepseekV4ForCausalLM) and
safetensors.  Everything runs in fp32; by default on the CPU, which is deterministic.

Writes (see tools/reference/README.md for the full description):
    DIR/manifest.json
    DIR/tiny-hf-bf16/{config.json, model.safetensors, expected.safetensors}
    DIR/tiny-orig-fp8/{config.json, model.safetensors, expected.safetensors}

The script is self-checking: it measures how far HF's own cached runs (prefill + decode,
uneven chunks) are from the single no-cache forward, and it measures the smallest score gap at
the top-k boundary of the Lightning Indexer and of the MoE router.  If a fixture fails
either check (diff > 1e-4 or gap < 1e-6) the weights are redrawn with the next seed.
"""

import argparse
import hashlib
import json
import math
import os
import platform
import re
import sys
import tempfile
import time

# the fixture machine has no network: never let transformers / huggingface_hub try to reach it
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch
import torch.nn.functional as F

import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

try:
    import safetensors
    from safetensors import safe_open
    from safetensors.torch import save_file
except ImportError:  # pragma: no cover
    sys.exit("safetensors is required")


# --------------------------------------------------------------------------------------------
# Fixed experiment constants
# --------------------------------------------------------------------------------------------

BASE_MODEL_SEED = 20260501      # weights of attempt i use BASE_MODEL_SEED + i
MAX_ATTEMPTS = 40
INPUT_SEED = 4242               # prompt token ids
SEQ_LEN = 113                   # T: crosses 28 CSA (m=4) and 7 HCA (m=16) boundaries; > 4*(K_I+1)=20
PREFILL_LEN = 29                # P for the prefill+decode scenario (not a multiple of 4 or 16)
CHUNKS = [37, 5, 3, 1, 7, 1, 16, 2, 11, 4, 9, 17]   # sums to SEQ_LEN
MAX_SELF_DIFF = 1e-4            # allowed |cached - nocache| of HF against itself
F16_MAX_SELF_DIFF = 1e-3        # the same with the F16 cache emulation: fp32 noise (~1e-6) between the cached and
                                # uncached paths moves a few values across a float16 rounding boundary (one F16 ulp,
                                # ~5e-4 relative), so the two paths legitimately differ by a few 1e-4
MIN_TOPK_GAP = 1e-6             # smallest allowed score gap at a top-k boundary (hard requirement)
PREFERRED_TOPK_GAP = 1e-4       # seeds are redrawn (within the time budget) until gaps reach this,
                                # so that ~1e-6 numerical noise of another implementation cannot flip a pick

FP8_BLOCK = 128
FP8_MAX = 448.0
FP4_BLOCK = 32
FP4_MAX = 6.0
FP4_LUT = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

LAYER_TYPES = [
    "sliding_attention",
    "compressed_sparse_attention",
    "heavily_compressed_attention",
    "compressed_sparse_attention",
    "heavily_compressed_attention",
]
MLP_LAYER_TYPES = ["hash_moe", "hash_moe", "hash_moe", "moe", "moe"]
COMPRESS_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16}
YARN = {
    "rope_type": "yarn",
    "factor": 16.0,
    "original_max_position_embeddings": 32,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}


def tiny_config_kwargs():
    """HF (DeepseekV4Config) keyword arguments of the tiny fixture model (spec section 8)."""
    return dict(
        vocab_size=1024,
        hidden_size=128,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        partial_rotary_factor=8 / 64,       # qk_rope_head_dim = 8
        q_lora_rank=64,
        o_groups=2,
        o_lora_rank=32,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=64,
        scoring_func="sqrtsoftplus",
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        hc_mult=4,
        hc_sinkhorn_iters=20,
        hc_eps=1e-6,
        rms_norm_eps=1e-6,
        sliding_window=8,
        layer_types=list(LAYER_TYPES),
        mlp_layer_types=list(MLP_LAYER_TYPES),
        compress_rates=dict(COMPRESS_RATES),
        index_n_heads=16,
        index_head_dim=32,
        index_topk=4,
        swiglu_limit=1.0,
        rope_theta=10000.0,
        compress_rope_theta=160000.0,
        rope_parameters=dict(YARN),         # flat -> folded into the "compress" sub-dict
        max_position_embeddings=512,        # = factor * original_max_position_embeddings
        num_nextn_predict_layers=0,         # the fixtures hold no MTP block
        hidden_act="silu",
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=0.02,
    )


def build_config():
    cfg = DeepseekV4Config(**tiny_config_kwargs(), attn_implementation="eager",
                           experts_implementation="eager")
    cfg.architectures = ["DeepseekV4ForCausalLM"]
    # sanity: the derived fields the fixtures are meant to exercise
    assert cfg.qk_rope_head_dim == 8, cfg.qk_rope_head_dim
    assert list(cfg.layer_types) == LAYER_TYPES, cfg.layer_types
    assert list(cfg.mlp_layer_types) == MLP_LAYER_TYPES, cfg.mlp_layer_types
    comp = cfg.rope_parameters["compress"]
    assert comp["rope_type"] == "yarn" and float(comp["factor"]) == 16.0, comp
    assert float(comp.get("attention_factor", -1)) == 1.0, comp
    assert float(comp["rope_theta"]) == 160000.0, comp
    assert cfg.rope_parameters["main"]["rope_type"] == "default", cfg.rope_parameters
    return cfg


def orig_config_dict(hf_cfg_dict):
    """config.json for the original-format fixture: the same model, described with the legacy
    keys of the shipped DeepSeek-V4 config (compress_ratios, num_hash_layers, qk_rope_head_dim,
    flat rope_scaling, quantization_config, expert_dtype).  Explicit layer_types/compress_rates
    are kept as well, because HF's legacy compress_ratios mapping only knows the ratios 0/4/128."""
    keep = [
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "n_routed_experts", "num_experts_per_tok",
        "n_shared_experts", "moe_intermediate_size", "scoring_func", "norm_topk_prob",
        "routed_scaling_factor", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps",
        "sliding_window", "index_n_heads", "index_head_dim", "index_topk", "swiglu_limit",
        "rope_theta", "compress_rope_theta", "max_position_embeddings", "num_nextn_predict_layers",
        "hidden_act", "tie_word_embeddings", "bos_token_id", "eos_token_id",
    ]
    d = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
    for k in keep:
        d[k] = hf_cfg_dict[k]
    ratio = {"sliding_attention": 0}
    ratio.update(COMPRESS_RATES)
    d["compress_ratios"] = [ratio[t] for t in LAYER_TYPES]
    d["layer_types"] = list(LAYER_TYPES)
    d["compress_rates"] = dict(COMPRESS_RATES)
    d["num_hash_layers"] = sum(1 for t in MLP_LAYER_TYPES if t == "hash_moe")
    d["qk_rope_head_dim"] = 8
    d["rope_scaling"] = {
        "type": "yarn",
        "factor": YARN["factor"],
        "original_max_position_embeddings": YARN["original_max_position_embeddings"],
        "beta_fast": YARN["beta_fast"],
        "beta_slow": YARN["beta_slow"],
    }
    d["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "scale_fmt": "ue8m0",
        "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
        "activation_scheme": "dynamic",
    }
    d["expert_dtype"] = "fp4"
    d["topk_method"] = "noaux_tc"
    d["dtype"] = "bfloat16"
    return d


# --------------------------------------------------------------------------------------------
# Parameter initialisation (all values are bf16-representable fp32 numbers)
# --------------------------------------------------------------------------------------------

def bf16_round(t):
    return t.to(torch.bfloat16).to(torch.float32)


def make_params(model, seed, cfg):
    """Draw every persistent tensor of the HF state dict (in sorted-name order) from one seeded
    generator.  Returns {hf_name: fp32 tensor (bf16-rounded) or int64 tensor}."""
    torch.manual_seed(seed)
    g = torch.Generator(device="cpu").manual_seed(seed)
    D = cfg.hidden_size
    nD = cfg.hc_mult * D
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo

    sd = model.state_dict()
    out, rules = {}, {}
    for name in sorted(sd.keys()):
        ref = sd[name]
        shape = tuple(ref.shape)
        if name.endswith("tid2eid"):
            rows = [torch.randperm(E, generator=g)[:k] for _ in range(shape[0])]
            out[name] = torch.stack(rows).to(torch.int64)
            rules[name] = "permutation rows"
            continue
        if not ref.is_floating_point():
            raise RuntimeError(f"unexpected non-float tensor {name} {ref.dtype}")
        if name == "model.embed_tokens.weight":
            v, r = normal(shape, 1.0), "N(0,1)"
        elif name == "lm_head.weight":
            v, r = normal(shape, D ** -0.5), "N(0,1/D)"
        elif name.endswith("hc_head.hc_fn") or re.search(r"_hc\.fn$", name):
            v, r = normal(shape, nD ** -0.5), "N(0,1/(nD))"
        elif name.endswith("hc_head.hc_base") or re.search(r"_hc\.base$", name):
            v, r = normal(shape, 0.5), "N(0,0.25)"
        elif name.endswith("hc_head.hc_scale") or re.search(r"_hc\.scale$", name):
            v, r = uniform(shape, 0.5, 1.5), "U(0.5,1.5)"
        elif name.endswith("norm.weight"):
            v, r = normal(shape, 0.1, 1.0), "1+N(0,0.01)"
        elif name.endswith("self_attn.sinks"):
            v, r = normal(shape, 1.0), "N(0,1)"
        elif name.endswith("position_bias"):
            v, r = normal(shape, 0.5), "N(0,0.25)"
        elif name.endswith("scorer.weights_proj.weight"):
            v, r = normal(shape, shape[-1] ** -0.5).abs(), "|N(0,1/in)| (non-negative)"
        elif name.endswith("e_score_correction_bias"):
            v, r = normal(shape, 0.1), "N(0,0.01)"
        elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            v, r = normal(shape, shape[-1] ** -0.5), "N(0,1/in)"
        elif name.endswith(".weight") and len(shape) == 2:
            v, r = normal(shape, shape[-1] ** -0.5), "N(0,1/in)"
        else:
            print(f"WARNING: no init rule for {name} {shape}; using N(0,0.02)")
            v, r = normal(shape, 0.02), "fallback N(0,0.02^2)"
        out[name] = bf16_round(v)
        rules[name] = r
    return out, rules


def load_params(model, params, device):
    missing, unexpected = model.load_state_dict({k: v.to(device) for k, v in params.items()}, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing={missing} unexpected={unexpected}")
    sd = model.state_dict()
    for name, v in params.items():
        if not torch.equal(sd[name].detach().cpu(), v):
            raise RuntimeError(f"parameter {name} did not load (tied weights?)")


# --------------------------------------------------------------------------------------------
# Probes: top-k gaps (indexer and router) and SwiGLU clamp activity
# --------------------------------------------------------------------------------------------

class Probes:
    def __init__(self, model, cfg):
        self.cfg = cfg
        self.scenario = None
        self.stats = {}
        self._pos = None
        self._m = None
        found = {"DeepseekV4Indexer": 0, "DeepseekV4IndexerScorer": 0, "DeepseekV4TopKRouter": 0}
        for _, mod in model.named_modules():
            cls = type(mod).__name__
            if cls == "DeepseekV4Indexer":
                mod.register_forward_pre_hook(self._indexer_pre, with_kwargs=True)
            elif cls == "DeepseekV4IndexerScorer":
                mod.register_forward_hook(self._scorer_post)
            elif cls == "DeepseekV4TopKRouter":
                mod.register_forward_hook(self._router_post)
            elif cls == "DeepseekV4MLP":
                mod.register_forward_hook(self._shared_post)
            if cls in found:
                found[cls] += 1
        n_csa = sum(t == "compressed_sparse_attention" for t in cfg.layer_types)
        n_moe = sum(t == "moe" for t in cfg.mlp_layer_types)
        if found["DeepseekV4Indexer"] != n_csa or found["DeepseekV4IndexerScorer"] != n_csa \
                or found["DeepseekV4TopKRouter"] != n_moe:
            raise RuntimeError(f"probe modules not found as expected: {found}")

    def start(self, scenario):
        self.scenario = scenario
        self.stats[scenario] = {
            "indexer_min_gap": math.inf, "indexer_rows_pruned": 0, "indexer_rows": 0,
            "router_min_gap": math.inf, "router_rows": 0, "router_rows_disagreeing": 0,
            "shared_gate_clamped": 0, "shared_up_clamped": 0, "shared_elems": 0,
        }

    def _s(self):
        return self.stats[self.scenario]

    def _indexer_pre(self, module, args, kwargs):
        self._pos = args[2] if len(args) > 2 else kwargs["position_ids"]
        self._m = module.compress_rate

    def _scorer_post(self, module, args, output):
        scores = output.detach().float()             # [B, S, T]
        B, S, T = scores.shape
        K = self.cfg.index_topk
        s = self._s()
        s["indexer_rows"] += B * S
        if T <= K:
            return
        thr = (self._pos.to(scores.device) + 1) // self._m           # [B, S]
        avail = torch.clamp(thr, max=T)
        idx = torch.arange(T, device=scores.device).view(1, 1, T)
        masked = scores.masked_fill(idx >= thr.unsqueeze(-1), float("-inf"))
        top = masked.topk(K + 1, dim=-1).values                        # [B, S, K+1]
        rows = avail > K
        n = int(rows.sum())
        if n:
            gap = (top[..., K - 1] - top[..., K])[rows]
            s["indexer_min_gap"] = min(s["indexer_min_gap"], float(gap.min()))
            s["indexer_rows_pruned"] += n

    def _router_post(self, module, args, output):
        h = args[0].detach().reshape(-1, module.hidden_dim)
        logits = F.linear(h.float(), module.weight.float())
        scores = module.score_fn(logits) + module.e_score_correction_bias.float()
        top = scores.topk(module.top_k + 1, dim=-1).values
        gap = top[:, module.top_k - 1] - top[:, module.top_k]
        s = self._s()
        s["router_min_gap"] = min(s["router_min_gap"], float(gap.min()))
        s["router_rows"] += h.shape[0]
        # the router's own choice must be the top-k of what we recomputed
        chosen = output[2].sort(dim=-1).values
        mine = scores.topk(module.top_k, dim=-1).indices.sort(dim=-1).values
        s["router_rows_disagreeing"] += int((chosen != mine).any(dim=-1).sum())

    def _shared_post(self, module, args, output):
        x = args[0].detach()
        lim = module.limit
        gate = module.gate_proj(x)
        up = module.up_proj(x)
        s = self._s()
        s["shared_gate_clamped"] += int((gate > lim).sum())
        s["shared_up_clamped"] += int((up.abs() > lim).sum())
        s["shared_elems"] += gate.numel()


# --------------------------------------------------------------------------------------------
# F16 attention-cache emulation
# --------------------------------------------------------------------------------------------
#
# ds4j stores the attention cache (raw window kv rows, compressed entries, indexer keys) in IEEE
# float16 and computes everything else in fp32. That rounding (relative 2^-11) moves router and
# indexer scores by ~1e-4..1e-3, which is enough to flip a near-tied top-k pick in a few of the
# ~800 routing/indexing decisions of a fixture. To tell such discrete flips apart from real bugs,
# each fixture also carries the logits of the same HF model run with exactly that rounding: every
# kv row, compressed entry and indexer key is rounded through float16 right after its RoPE, where
# ds4j writes it to its cache. Nothing else in HF changes.

class F16CacheEmulation:
    """Context manager: round the rotated kv / compressed rows through float16 inside HF's modules."""
    ROUNDED_CALLS = ("kv = apply_rotary_pos_emb(kv", "compressed = apply_rotary_pos_emb(compressed")

    def __init__(self):
        import linecache
        self._linecache = linecache
        self.mod = sys.modules[DeepseekV4ForCausalLM.__module__]
        self.counts = {"kv": 0, "compressed": 0, "other": 0}

    def __enter__(self):
        self.orig = self.mod.apply_rotary_pos_emb
        orig = self.orig

        def patched(*args, **kwargs):
            out = orig(*args, **kwargs)
            f = sys._getframe(1)
            line = self._linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
            if line.startswith(self.ROUNDED_CALLS[0]):
                self.counts["kv"] += 1
                return out.to(torch.float16).to(out.dtype)
            if line.startswith(self.ROUNDED_CALLS[1]):
                self.counts["compressed"] += 1
                return out.to(torch.float16).to(out.dtype)
            self.counts["other"] += 1
            return out

        self.mod.apply_rotary_pos_emb = patched
        return self

    def __exit__(self, *exc):
        self.mod.apply_rotary_pos_emb = self.orig
        return False


def run_scenarios_f16(model, probes, ids, device):
    """run_scenarios with the F16 cache emulation on; checks that every rounding site was hit."""
    with F16CacheEmulation() as em:
        res = run_scenarios(model, probes, ids, device)
    if em.counts["kv"] == 0 or em.counts["compressed"] == 0:
        raise RuntimeError(f"F16 cache emulation did not find its call sites: {em.counts}")
    print(f"  F16 cache emulation rounded {em.counts['kv']} kv and {em.counts['compressed']} compressed-row calls")
    return res


# --------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------

@torch.no_grad()
def run_scenarios(model, probes, ids, device):
    x = ids.to(device).unsqueeze(0)
    T = x.shape[1]
    res = {}

    t0 = time.time()
    probes.start("nocache")
    res["nocache"] = model(input_ids=x, use_cache=False).logits[0].float().cpu()

    probes.start("decode")
    out = model(input_ids=x[:, :PREFILL_LEN], use_cache=True)
    parts, pkv = [out.logits[0]], out.past_key_values
    for t in range(PREFILL_LEN, T):
        out = model(input_ids=x[:, t:t + 1], past_key_values=pkv, use_cache=True)
        parts.append(out.logits[0])
        pkv = out.past_key_values
    res["decode"] = torch.cat(parts, 0).float().cpu()

    probes.start("chunks")
    parts, pkv, start = [], None, 0
    for n in CHUNKS:
        out = model(input_ids=x[:, start:start + n], past_key_values=pkv, use_cache=True)
        parts.append(out.logits[0])
        pkv = out.past_key_values
        start += n
    assert start == T
    res["chunks"] = torch.cat(parts, 0).float().cpu()

    print(f"  scenarios ran in {time.time() - t0:.1f}s")
    for k, v in res.items():
        assert tuple(v.shape) == (T, model.config.vocab_size), (k, v.shape)
        assert torch.isfinite(v).all(), k
    return res


def check_fixture(name, logits, probes, max_self_diff=MAX_SELF_DIFF):
    d_dec = float((logits["decode"] - logits["nocache"]).abs().max())
    d_chk = float((logits["chunks"] - logits["nocache"]).abs().max())
    idx_gap = min(s["indexer_min_gap"] for s in probes.stats.values())
    rt_gap = min(s["router_min_gap"] for s in probes.stats.values())
    print(f"  [{name}] HF self-consistency: max|decode-nocache| = {d_dec:.3e}, "
          f"max|chunks-nocache| = {d_chk:.3e}")
    for scen, s in probes.stats.items():
        print(f"  [{name}] {scen:8s}: indexer min top-k gap = {s['indexer_min_gap']:.3e} "
              f"over {s['indexer_rows_pruned']} pruning rows; router min top-k gap = "
              f"{s['router_min_gap']:.3e} over {s['router_rows']} rows; shared SwiGLU clamps: "
              f"gate {s['shared_gate_clamped']}/{s['shared_elems']}, up {s['shared_up_clamped']}/{s['shared_elems']}")
    ok = d_dec <= max_self_diff and d_chk <= max_self_diff and idx_gap >= MIN_TOPK_GAP and rt_gap >= MIN_TOPK_GAP
    ok = ok and all(s["indexer_rows_pruned"] > 0 and s["router_rows_disagreeing"] == 0
                    for s in probes.stats.values())
    summary = {
        "max_abs_diff_decode_vs_nocache": d_dec,
        "max_abs_diff_chunks_vs_nocache": d_chk,
        "min_indexer_topk_gap": idx_gap,
        "min_router_topk_gap": rt_gap,
        "per_scenario": {k: dict(v) for k, v in probes.stats.items()},
        "passed": bool(ok),
    }
    print(f"  [{name}] {'PASS' if ok else 'FAIL'}")
    return ok, summary


# --------------------------------------------------------------------------------------------
# Quantisation to DeepSeek's original storage (FP8 e4m3 / FP4 e2m1, E8M0 block scales)
# --------------------------------------------------------------------------------------------

def pow2_exponent(amax, qmax):
    """Smallest integer e with amax / 2^e <= qmax (e = 0 for an all-zero block)."""
    e = torch.zeros_like(amax, dtype=torch.int32)
    nz = amax > 0
    if nz.any():
        est = torch.ceil(torch.log2(amax[nz].double() / qmax)).to(torch.int32)
        # fix possible off-by-one of log2 rounding: exact checks with ldexp
        a = amax[nz].double()
        too_big = a / torch.ldexp(torch.ones_like(a), est) > qmax
        est = est + too_big.to(torch.int32)
        can_lower = a / torch.ldexp(torch.ones_like(a), est - 1) <= qmax
        est = est - can_lower.to(torch.int32)
        e[nz] = est
    if (e < -127).any() or (e > 127).any():
        raise RuntimeError("scale exponent out of E8M0 range")
    return e


class E8M0:
    """Stores E8M0 scales either as torch.float8_e8m0fnu (F8_E8M0) or, where torch/safetensors
    cannot, as uint8 exponent bytes (value = 2^(byte-127))."""

    def __init__(self):
        self.native = False
        dt = getattr(torch, "float8_e8m0fnu", None)
        if dt is not None:
            try:
                t = torch.tensor([0.5, 1.0, 2.0 ** -20, 2.0 ** 30]).to(dt)
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "probe.safetensors")
                    save_file({"s": t}, path)
                    with safe_open(path, framework="pt") as f:
                        back = f.get_tensor("s")
                ok = back.dtype == dt and torch.equal(back.view(torch.uint8), t.view(torch.uint8)) \
                    and torch.equal(t.view(torch.uint8), torch.tensor([126, 127, 107, 157], dtype=torch.uint8))
                self.native = bool(ok)
            except Exception as exc:  # noqa: BLE001
                print(f"note: float8_e8m0fnu not usable with safetensors ({exc}); storing uint8 exponents")
        self.dtype_name = "F8_E8M0" if self.native else "U8"

    def encode(self, exponents):
        b = (exponents + 127).to(torch.uint8)
        return b.view(torch.float8_e8m0fnu) if self.native else b

    @staticmethod
    def decode(t):
        b = t.view(torch.uint8) if t.dtype != torch.uint8 else t
        return torch.ldexp(torch.ones(b.shape, dtype=torch.float32), b.to(torch.int32) - 127)


def quant_fp8_block(w):
    """w: fp32 [out, in].  Returns (e4m3 tensor [out,in], exponents int32 [ceil(out/128), ceil(in/128)],
    dequantised fp32)."""
    out_f, in_f = w.shape
    bo, bi = -(-out_f // FP8_BLOCK), -(-in_f // FP8_BLOCK)
    pad = torch.zeros(bo * FP8_BLOCK, bi * FP8_BLOCK, dtype=torch.float32)
    pad[:out_f, :in_f] = w
    blocks = pad.view(bo, FP8_BLOCK, bi, FP8_BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    e = pow2_exponent(amax, FP8_MAX)
    scale = torch.ldexp(torch.ones_like(amax), e).view(bo, 1, bi, 1)
    q = (blocks / scale).to(torch.float8_e4m3fn)
    deq = (q.to(torch.float32) * scale).view(bo * FP8_BLOCK, bi * FP8_BLOCK)[:out_f, :in_f].contiguous()
    q = q.view(bo * FP8_BLOCK, bi * FP8_BLOCK)[:out_f, :in_f].contiguous()
    return q, e, deq


def quant_fp4_rows(w):
    """w: fp32 [out, in], in % 64 == 0.  Returns (packed int8 [out, in/2], exponents int32 [out, in/32],
    dequantised fp32).  Element 2j goes to the low nibble, 2j+1 to the high nibble."""
    out_f, in_f = w.shape
    assert in_f % FP4_BLOCK == 0 and in_f % 2 == 0
    blocks = w.view(out_f, in_f // FP4_BLOCK, FP4_BLOCK)
    amax = blocks.abs().amax(dim=-1)
    e = pow2_exponent(amax, FP4_MAX)
    scale = torch.ldexp(torch.ones_like(amax), e).unsqueeze(-1)
    x = blocks / scale
    mags = torch.tensor(FP4_LUT[:8], dtype=torch.float32)
    # round to nearest representable magnitude; an exact tie goes to the smaller magnitude
    code = (x.abs().unsqueeze(-1) - mags).abs().argmin(dim=-1)
    code = code | ((x < 0).to(torch.int64) << 3)
    lut = torch.tensor(FP4_LUT, dtype=torch.float32)
    deq = (lut[code] * scale).view(out_f, in_f)
    code = code.view(out_f, in_f).to(torch.uint8)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).view(torch.int8).contiguous()
    return packed, e, deq


def unpack_fp4(packed, scale_t):
    """Independent decoder used to verify the written file: LUT[b & 0xF], LUT[b >> 4]."""
    b = packed.view(torch.uint8).to(torch.int64)
    lut = torch.tensor(FP4_LUT, dtype=torch.float32)
    lo, hi = lut[b & 0xF], lut[b >> 4]
    vals = torch.stack([lo, hi], dim=-1).reshape(b.shape[0], b.shape[1] * 2)
    s = E8M0.decode(scale_t).repeat_interleave(FP4_BLOCK, dim=1)
    return vals * s


def dequant_fp8(q, scale_t):
    s = E8M0.decode(scale_t)
    s = s.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:q.shape[0], :q.shape[1]]
    return q.to(torch.float32) * s


# HF name -> original name (non-expert tensors).  The kind is "fp8" (block-quantised with a
# .scale companion) or "bf16".
_LAYER_MAP = [
    ("attn_hc.fn", "hc_attn_fn", "bf16"),
    ("attn_hc.base", "hc_attn_base", "bf16"),
    ("attn_hc.scale", "hc_attn_scale", "bf16"),
    ("ffn_hc.fn", "hc_ffn_fn", "bf16"),
    ("ffn_hc.base", "hc_ffn_base", "bf16"),
    ("ffn_hc.scale", "hc_ffn_scale", "bf16"),
    ("input_layernorm.weight", "attn_norm.weight", "bf16"),
    ("post_attention_layernorm.weight", "ffn_norm.weight", "bf16"),
    ("self_attn.q_a_proj.weight", "attn.wq_a.weight", "fp8"),
    ("self_attn.q_a_norm.weight", "attn.q_norm.weight", "bf16"),
    ("self_attn.q_b_proj.weight", "attn.wq_b.weight", "fp8"),
    ("self_attn.kv_proj.weight", "attn.wkv.weight", "fp8"),
    ("self_attn.kv_norm.weight", "attn.kv_norm.weight", "bf16"),
    ("self_attn.o_a_proj.weight", "attn.wo_a.weight", "fp8"),
    ("self_attn.o_b_proj.weight", "attn.wo_b.weight", "fp8"),
    ("self_attn.sinks", "attn.attn_sink", "bf16"),
    ("self_attn.compressor.indexer.kv_proj.weight", "attn.indexer.compressor.wkv.weight", "bf16"),
    ("self_attn.compressor.indexer.gate_proj.weight", "attn.indexer.compressor.wgate.weight", "bf16"),
    ("self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape", "bf16"),
    ("self_attn.compressor.indexer.kv_norm.weight", "attn.indexer.compressor.norm.weight", "bf16"),
    ("self_attn.compressor.indexer.q_b_proj.weight", "attn.indexer.wq_b.weight", "fp8"),
    ("self_attn.compressor.indexer.scorer.weights_proj.weight", "attn.indexer.weights_proj.weight", "bf16"),
    ("self_attn.compressor.kv_proj.weight", "attn.compressor.wkv.weight", "bf16"),
    ("self_attn.compressor.gate_proj.weight", "attn.compressor.wgate.weight", "bf16"),
    ("self_attn.compressor.position_bias", "attn.compressor.ape", "bf16"),
    ("self_attn.compressor.kv_norm.weight", "attn.compressor.norm.weight", "bf16"),
    ("mlp.gate.weight", "ffn.gate.weight", "bf16"),
    ("mlp.gate.e_score_correction_bias", "ffn.gate.bias", "bf16"),
    ("mlp.gate.tid2eid", "ffn.gate.tid2eid", "int"),
    ("mlp.shared_experts.gate_proj.weight", "ffn.shared_experts.w1.weight", "fp8"),
    ("mlp.shared_experts.up_proj.weight", "ffn.shared_experts.w3.weight", "fp8"),
    ("mlp.shared_experts.down_proj.weight", "ffn.shared_experts.w2.weight", "fp8"),
]
_GLOBAL_MAP = {
    "model.embed_tokens.weight": "embed.weight",
    "lm_head.weight": "head.weight",
    "model.norm.weight": "norm.weight",
    "model.hc_head.hc_fn": "hc_head_fn",
    "model.hc_head.hc_base": "hc_head_base",
    "model.hc_head.hc_scale": "hc_head_scale",
}


def scale_name(weight_name):
    assert weight_name.endswith(".weight")
    return weight_name[: -len(".weight")] + ".scale"


def to_original(params, cfg, e8m0):
    """Quantise/rename HF params into the original DeepSeek layout.  Returns (orig tensors,
    dequantised HF params as the reference will see them, hf->orig name map, stats)."""
    orig, deq_hf, name_map = {}, {}, {}
    stats = {"fp8_tensors": 0, "fp4_tensors": 0, "max_rel_err_fp8": 0.0, "max_rel_err_fp4": 0.0}
    I = cfg.moe_intermediate_size
    for hf_name, v in params.items():
        if hf_name in _GLOBAL_MAP:
            on = _GLOBAL_MAP[hf_name]
            orig[on] = v.to(torch.bfloat16)
            deq_hf[hf_name] = v
            name_map[hf_name] = on
            continue
        m = re.match(r"^model\.layers\.(\d+)\.(.+)$", hf_name)
        if not m:
            raise RuntimeError(f"no original name for {hf_name}")
        l, rest = int(m.group(1)), m.group(2)
        pre = f"layers.{l}."
        if rest in ("mlp.experts.gate_up_proj", "mlp.experts.down_proj"):
            E = v.shape[0]
            deq_stack = []
            for e in range(E):
                if rest.endswith("gate_up_proj"):
                    pieces = [("w1", v[e, :I]), ("w3", v[e, I:])]
                else:
                    pieces = [("w2", v[e])]
                deq_pieces = []
                for wn, w in pieces:
                    packed, ex, dq = quant_fp4_rows(w.contiguous())
                    on = f"{pre}ffn.experts.{e}.{wn}.weight"
                    orig[on] = packed
                    orig[scale_name(on)] = e8m0.encode(ex)
                    deq_pieces.append(dq)
                    stats["fp4_tensors"] += 1
                    rel = float((dq - w).abs().max() / w.abs().max())
                    stats["max_rel_err_fp4"] = max(stats["max_rel_err_fp4"], rel)
                deq_stack.append(torch.cat(deq_pieces, 0))
            deq_hf[hf_name] = torch.stack(deq_stack, 0)
            name_map[hf_name] = (f"{pre}ffn.experts.{{e}}.w1.weight + w3.weight" if rest.endswith("gate_up_proj")
                                 else f"{pre}ffn.experts.{{e}}.w2.weight")
            continue
        for hf_suffix, orig_suffix, kind in _LAYER_MAP:
            if rest == hf_suffix:
                break
        else:
            raise RuntimeError(f"no original name for {hf_name}")
        on = pre + orig_suffix
        name_map[hf_name] = on
        if kind == "int":
            orig[on] = v.to(torch.int64)
            deq_hf[hf_name] = v
        elif kind == "bf16":
            orig[on] = v.to(torch.bfloat16)
            deq_hf[hf_name] = v
        else:
            q, ex, dq = quant_fp8_block(v)
            orig[on] = q
            orig[scale_name(on)] = e8m0.encode(ex)
            deq_hf[hf_name] = dq
            stats["fp8_tensors"] += 1
            stats["max_rel_err_fp8"] = max(stats["max_rel_err_fp8"], float((dq - v).abs().max() / v.abs().max()))
    # every dequantised value must be exactly representable in bf16 (power-of-two scales)
    for k, v in deq_hf.items():
        if v.is_floating_point() and not torch.equal(bf16_round(v), v):
            raise RuntimeError(f"dequantised {k} is not bf16-representable")
    return orig, deq_hf, name_map, stats


def dequant_from_file(path, cfg, params_like):
    """Read the original-format file back and rebuild HF-named fp32 params with the documented
    decoding (independent of the encoder above)."""
    I = cfg.moe_intermediate_size
    E = cfg.n_routed_experts
    t = {}
    with safe_open(path, framework="pt") as f:
        for k in f.keys():
            t[k] = f.get_tensor(k)
    out = {}
    for hf_name in params_like:
        if hf_name in _GLOBAL_MAP:
            out[hf_name] = t[_GLOBAL_MAP[hf_name]].to(torch.float32)
            continue
        m = re.match(r"^model\.layers\.(\d+)\.(.+)$", hf_name)
        l, rest = int(m.group(1)), m.group(2)
        pre = f"layers.{l}."
        if rest == "mlp.experts.gate_up_proj":
            rows = []
            for e in range(E):
                w1 = unpack_fp4(t[f"{pre}ffn.experts.{e}.w1.weight"], t[f"{pre}ffn.experts.{e}.w1.scale"])
                w3 = unpack_fp4(t[f"{pre}ffn.experts.{e}.w3.weight"], t[f"{pre}ffn.experts.{e}.w3.scale"])
                rows.append(torch.cat([w1, w3], 0))
            out[hf_name] = torch.stack(rows, 0)
            continue
        if rest == "mlp.experts.down_proj":
            out[hf_name] = torch.stack([unpack_fp4(t[f"{pre}ffn.experts.{e}.w2.weight"],
                                                   t[f"{pre}ffn.experts.{e}.w2.scale"]) for e in range(E)], 0)
            continue
        for hf_suffix, orig_suffix, kind in _LAYER_MAP:
            if rest == hf_suffix:
                break
        on = pre + orig_suffix
        if kind == "int":
            out[hf_name] = t[on]
        elif kind == "bf16":
            out[hf_name] = t[on].to(torch.float32)
        else:
            out[hf_name] = dequant_fp8(t[on], t[scale_name(on)])
    return out, t


# --------------------------------------------------------------------------------------------
# Output helpers
# --------------------------------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tensor_table(tensors):
    return {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)}
            for k, v in sorted(tensors.items())}


def write_expected(path, ids, logits, meta, logits16):
    tensors = {
        "input_ids": ids.to(torch.int64).contiguous(),
        "logits.nocache": logits["nocache"].contiguous(),
        "logits.decode": logits["decode"].contiguous(),
        "logits.chunks": logits["chunks"].contiguous(),
        "logits.f16cache.nocache": logits16["nocache"].contiguous(),
        "logits.f16cache.decode": logits16["decode"].contiguous(),
        "logits.f16cache.chunks": logits16["chunks"].contiguous(),
    }
    save_file(tensors, path, metadata={k: str(v) for k, v in meta.items()})
    return tensors


def scenario_list():
    return [
        {"key": "logits.nocache", "name": "nocache",
         "description": "one forward over the whole prompt, use_cache=False"},
        {"key": "logits.decode", "name": "decode", "prefill": PREFILL_LEN,
         "description": f"prefill of the first {PREFILL_LEN} tokens with a fresh cache, then one token per call"},
        {"key": "logits.chunks", "name": "chunks", "chunks": list(CHUNKS),
         "description": "the prompt fed in uneven chunks with the cache; logits concatenated"},
        {"key": "logits.f16cache.{nocache,decode,chunks}", "name": "f16cache",
         "description": "the same three scenarios with every kv row, compressed entry and indexer key rounded "
                        "through float16 after its RoPE (ds4j's cache storage); separates near-tie top-k flips "
                        "caused by that rounding from real differences"},
    ]


def roundtrip_check(fixture_dir, ids, ref_logits, device):
    """Load the written HF checkpoint through from_pretrained (fp32) and re-run the no-cache pass."""
    try:
        m = DeepseekV4ForCausalLM.from_pretrained(fixture_dir, dtype=torch.float32,
                                                   attn_implementation="eager").to(device).eval()
        with torch.no_grad():
            lg = m(input_ids=ids.to(device).unsqueeze(0), use_cache=False).logits[0].float().cpu()
        d = float((lg - ref_logits).abs().max())
        print(f"  from_pretrained round trip: max|diff| = {d:.3e}")
        return {"ok": d <= 1e-5, "max_abs_diff": d}
    except Exception as exc:  # noqa: BLE001
        print(f"  from_pretrained round trip FAILED: {type(exc).__name__}: {exc}")
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _norm_rope(rp):
    """rope_parameters without the legacy duplicate 'type' key (a flat rope_scaling carries
    'type': 'yarn', which HF keeps next to the canonical 'rope_type')."""
    return {k: ({kk: float(vv) if isinstance(vv, int) and not isinstance(vv, bool) and kk != "original_max_position_embeddings"
                 else vv for kk, vv in v.items() if kk != "type"} if isinstance(v, dict) else v)
            for k, v in rp.items()}


def config_parse_check(path, ref_cfg):
    try:
        c = DeepseekV4Config.from_pretrained(os.path.dirname(path))
        same = {
            "layer_types": list(c.layer_types) == list(ref_cfg.layer_types),
            "mlp_layer_types": list(c.mlp_layer_types) == list(ref_cfg.mlp_layer_types),
            "compress_rates": dict(c.compress_rates) == dict(ref_cfg.compress_rates),
            "qk_rope_head_dim": c.qk_rope_head_dim == ref_cfg.qk_rope_head_dim,
            "rope_parameters": json.dumps(_norm_rope(c.rope_parameters), sort_keys=True)
            == json.dumps(_norm_rope(ref_cfg.rope_parameters), sort_keys=True),
        }
        for k in ("vocab_size", "hidden_size", "num_hidden_layers", "index_topk", "swiglu_limit",
                  "sliding_window", "hc_mult", "o_groups", "o_lora_rank", "q_lora_rank"):
            same[k] = getattr(c, k) == getattr(ref_cfg, k)
        ok = all(same.values())
        print(f"  config.json parses back in transformers: {'OK' if ok else 'MISMATCH ' + str(same)}")
        if not same["rope_parameters"]:
            print(f"    parsed rope_parameters: {c.rope_parameters}")
        return {"ok": ok, "fields": same, "parsed_rope_parameters": c.rope_parameters}
    except Exception as exc:  # noqa: BLE001
        print(f"  config.json parse FAILED: {type(exc).__name__}: {exc}")
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"],
                    help="where the fp32 reference runs (default cpu: deterministic, as the spec was verified)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: the ops are tiny, more threads only add overhead)")
    ap.add_argument("--time-budget", type=float, default=240.0,
                    help="seconds after which no new seed is tried once one passes the hard checks")
    args = ap.parse_args()

    t0 = time.time()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA not available, falling back to CPU")
        args.device = "cpu"
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    threads = max(1, args.threads)
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if device.type == "cuda":
        dev_name = torch.cuda.get_device_name(device)
    else:
        dev_name = f"cpu ({platform.processor() or platform.machine()}, {threads} threads)"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"safetensors {safetensors.__version__}, device {dev_name}")

    os.makedirs(args.out, exist_ok=True)
    cfg = build_config()
    e8m0 = E8M0()
    print(f"E8M0 scales stored as {e8m0.dtype_name}")

    gi = torch.Generator(device="cpu").manual_seed(INPUT_SEED)
    ids = torch.randint(0, cfg.vocab_size, (SEQ_LEN,), generator=gi, dtype=torch.int64)
    assert sum(CHUNKS) == SEQ_LEN and 0 < PREFILL_LEN < SEQ_LEN

    torch.manual_seed(BASE_MODEL_SEED)
    model = DeepseekV4ForCausalLM(cfg).to(device).eval()
    print(f"experts implementation: {getattr(model.config, '_experts_implementation', None)}, "
          f"attention implementation: {getattr(model.config, '_attn_implementation', None)}")
    probes = Probes(model, cfg)

    attempts = []
    chosen = None
    for attempt in range(MAX_ATTEMPTS):
        if chosen is not None and time.time() - t0 > args.time_budget:
            print(f"time budget reached; keeping seed {chosen[0]} (meets the hard gap threshold only)")
            break
        seed = BASE_MODEL_SEED + attempt
        print(f"--- attempt {attempt}: model seed {seed}")
        params, rules = make_params(model, seed, cfg)

        load_params(model, params, device)
        hf_logits = run_scenarios(model, probes, ids, device)
        ok_hf, hf_sum = check_fixture("tiny-hf-bf16", hf_logits, probes)
        hf16_logits = run_scenarios_f16(model, probes, ids, device)
        ok_hf16, hf16_sum = check_fixture("tiny-hf-bf16 (F16 cache)", hf16_logits, probes, F16_MAX_SELF_DIFF)

        orig, deq_expected, name_map, qstats = to_original(params, cfg, e8m0)
        load_params(model, deq_expected, device)
        or_logits = run_scenarios(model, probes, ids, device)
        ok_or, or_sum = check_fixture("tiny-orig-fp8", or_logits, probes)
        or16_logits = run_scenarios_f16(model, probes, ids, device)
        ok_or16, or16_sum = check_fixture("tiny-orig-fp8 (F16 cache)", or16_logits, probes, F16_MAX_SELF_DIFF)
        ok_hf, ok_or = ok_hf and ok_hf16, ok_or and ok_or16
        hf_sum["f16_cache"], or_sum["f16_cache"] = hf16_sum, or16_sum
        for nm, a, b in (("tiny-hf-bf16", hf_logits, hf16_logits), ("tiny-orig-fp8", or_logits, or16_logits)):
            print(f"  [{nm}] max|fp32 cache - F16 cache| per scenario: "
                  + ", ".join(f"{k} {float((a[k] - b[k]).abs().max()):.3e}" for k in a))

        preferred = all(sm["min_indexer_topk_gap"] >= PREFERRED_TOPK_GAP and
                        sm["min_router_topk_gap"] >= PREFERRED_TOPK_GAP for sm in (hf_sum, or_sum, hf16_sum, or16_sum))
        attempts.append({"seed": seed, "passed": bool(ok_hf and ok_or), "preferred_gaps": preferred,
                         "tiny-hf-bf16": hf_sum, "tiny-orig-fp8": or_sum})
        print(f"  attempt {attempt}: hard checks {'pass' if ok_hf and ok_or else 'FAIL'}, "
              f"gaps >= {PREFERRED_TOPK_GAP:g}: {preferred}")
        if ok_hf and ok_or and (chosen is None or preferred):
            chosen = (seed, params, rules, hf_logits, hf_sum, orig, deq_expected, name_map, qstats,
                      or_logits, or_sum, hf16_logits, or16_logits)
            if preferred:
                break
    if chosen is None:
        with open(os.path.join(args.out, "manifest.json"), "w") as f:
            json.dump({"error": "no seed passed", "attempts": attempts}, f, indent=2, default=str)
        sys.exit("no seed produced tie-free, self-consistent fixtures")

    (seed, params, rules, hf_logits, hf_sum, orig, deq_expected, name_map, qstats,
     or_logits, or_sum, hf16_logits, or16_logits) = chosen
    common_meta = {
        "T": SEQ_LEN, "P": PREFILL_LEN, "chunks": json.dumps(CHUNKS), "vocab_size": cfg.vocab_size,
        "input_seed": INPUT_SEED, "model_seed": seed, "dtype_reference": "float32",
        "torch": torch.__version__, "transformers": transformers.__version__, "device": dev_name,
    }
    fixtures = {}

    # ---- tiny-hf-bf16
    name = "tiny-hf-bf16"
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    cfg.dtype = "float32"   # the reference runs in fp32; tensors are stored BF16 (exactly representable)
    cfg.save_pretrained(d)
    hf_tensors = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in params.items()}
    save_file(hf_tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    meta = dict(common_meta, fixture=name,
                max_abs_diff_decode_vs_nocache=f"{hf_sum['max_abs_diff_decode_vs_nocache']:.3e}",
                max_abs_diff_chunks_vs_nocache=f"{hf_sum['max_abs_diff_chunks_vs_nocache']:.3e}")
    exp = write_expected(os.path.join(d, "expected.safetensors"), ids, hf_logits, meta, hf16_logits)
    print(f"[{name}] written")
    parse = config_parse_check(os.path.join(d, "config.json"), cfg)
    rt = roundtrip_check(d, ids, hf_logits["nocache"], device)
    fixtures[name] = {
        "format": "HF (transformers DeepseekV4ForCausalLM state-dict names), float tensors BF16",
        "reference": "HF DeepseekV4ForCausalLM in fp32 on exactly the stored BF16 values",
        "config": json.load(open(os.path.join(d, "config.json"))),
        "config_parses_in_transformers": parse,
        "from_pretrained_roundtrip": rt,
        "init_rules": rules,
        "tensors": tensor_table(hf_tensors),
        "expected_tensors": tensor_table(exp),
        "expected_metadata": meta,
        "scenarios": scenario_list(),
        "hf_self_consistency": hf_sum,
    }

    # ---- tiny-orig-fp8
    name = "tiny-orig-fp8"
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    ocfg = orig_config_dict(json.load(open(os.path.join(args.out, "tiny-hf-bf16", "config.json"))))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(ocfg, f, indent=2)
    mpath = os.path.join(d, "model.safetensors")
    save_file({k: v.contiguous() for k, v in orig.items()}, mpath, metadata={"format": "pt"})
    # read back and dequantise with the documented decoding; must equal what the reference used
    deq_file, orig_read = dequant_from_file(mpath, cfg, params.keys())
    for k, v in deq_expected.items():
        if not torch.equal(deq_file[k], v):
            raise RuntimeError(f"file round trip mismatch for {k}")
    print(f"[{name}] file dequantises back to the reference weights exactly")
    meta = dict(common_meta, fixture=name, e8m0_storage=e8m0.dtype_name,
                max_abs_diff_decode_vs_nocache=f"{or_sum['max_abs_diff_decode_vs_nocache']:.3e}",
                max_abs_diff_chunks_vs_nocache=f"{or_sum['max_abs_diff_chunks_vs_nocache']:.3e}")
    exp = write_expected(os.path.join(d, "expected.safetensors"), ids, or_logits, meta, or16_logits)
    parse = config_parse_check(os.path.join(d, "config.json"), cfg)
    vs_hf = float((or_logits["nocache"] - hf_logits["nocache"]).abs().max())
    print(f"[{name}] written; max|logits(orig-fp8) - logits(hf-bf16)| (quantisation effect) = {vs_hf:.3e}")
    fixtures[name] = {
        "format": "DeepSeek original names; dense projections F8_E4M3 + E8M0 128x128 block scales "
                  "(<module>.scale), routed experts FP4 e2m1 packed in I8 (element 2j low nibble) + E8M0 "
                  "1x32 scales, tid2eid I64, everything else BF16",
        "reference": "HF DeepseekV4ForCausalLM in fp32 on the dequantised weights (HF names)",
        "same_seed_as": "tiny-hf-bf16 (these are its weights, quantised)",
        "config": ocfg,
        "config_parses_in_transformers": parse,
        "e8m0_storage": e8m0.dtype_name,
        "fp4_lut": FP4_LUT,
        "quantisation": dict(qstats, fp8_rounding="torch cast to float8_e4m3fn (round to nearest even)",
                             fp4_rounding="nearest representable magnitude, exact ties to the smaller",
                             scale_rule="smallest power of two with block_amax/scale <= max (448 / 6)"),
        "hf_to_orig_names": name_map,
        "tensors": tensor_table(orig_read),
        "expected_tensors": tensor_table(exp),
        "expected_metadata": meta,
        "scenarios": scenario_list(),
        "hf_self_consistency": or_sum,
        "max_abs_diff_vs_tiny_hf_bf16_nocache": vs_hf,
    }

    total = 0
    for fx in fixtures:
        files = {}
        for fn in sorted(os.listdir(os.path.join(args.out, fx))):
            p = os.path.join(args.out, fx, fn)
            files[fn] = {"bytes": os.path.getsize(p), "sha256": sha256(p)}
            total += files[fn]["bytes"]
        fixtures[fx]["files"] = files

    manifest = {
        "generator": "tools/reference/make_fixtures.py",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "argv": sys.argv,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "python": platform.python_version(),
        "device": dev_name,
        "seeds": {"model_seed": seed, "base_model_seed": BASE_MODEL_SEED, "input_seed": INPUT_SEED,
                  "attempts": len(attempts)},
        "input": {"T": SEQ_LEN, "input_ids": ids.tolist(), "prefill_P": PREFILL_LEN, "chunks": CHUNKS},
        "thresholds": {"max_self_diff": MAX_SELF_DIFF, "f16_cache_max_self_diff": F16_MAX_SELF_DIFF, "min_topk_gap": MIN_TOPK_GAP,
                       "preferred_topk_gap": PREFERRED_TOPK_GAP},
        "fixtures": fixtures,
        "attempt_log": attempts,
        "total_fixture_bytes": total,
        "elapsed_s": round(time.time() - t0, 1),
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, default=str)
    print(f"total fixture bytes: {total} ({total / 2**20:.2f} MiB); elapsed {time.time() - t0:.1f}s")
    if total > 20 * 2**20:
        sys.exit("fixtures exceed 20 MB")
    for fx, v in fixtures.items():
        s = v["hf_self_consistency"]
        print(f"SUMMARY {fx}: decode {s['max_abs_diff_decode_vs_nocache']:.3e}, chunks "
              f"{s['max_abs_diff_chunks_vs_nocache']:.3e}, indexer gap {s['min_indexer_topk_gap']:.3e}, "
              f"router gap {s['min_router_topk_gap']:.3e}")


if __name__ == "__main__":
    main()
