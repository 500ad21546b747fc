# CART, the Context-Anchored Recurrent Transformer (arXiv 2606.01495), and CART Lab's dense
# baseline, in PyTorch for Hugging Face transformers: the model directory `cart export --format hf`
# writes loads with AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)
# (docs/huggingface.md). It computes what CART Lab's LibTorch model computes (docs/model.md §1-4),
# operation for operation, with every switch; module names are the tensor names of docs/model.md
# §8, so model.safetensors loads as it is.
#
# Generation keeps a cache (CartCache): each self-attention layer's keys and values, and the
# anchor's K, V, computed once per token from the prelude's output and read by every loop.

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_cart import HEAD_DIM, MAX_LOOPS, CartConfig, mlp_hidden

# transformers renamed the cache argument and output field from past_key_values to cache (5.x);
# this file speaks whichever the installed version does.
_CACHE_FIELD = ("cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__
                else "past_key_values")


def _reduction_dtype(x):
    # Norms and RoPE tables in fp32, or fp64 for fp64 inputs (as model/layers.cc).
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class CartCache:
    """What generation keeps between forward passes: per attention slot ("prelude.0", "anchor",
    "core.3", "coda", ...) the keys and values of every token seen so far, (B, H, T, 64) each;
    the number of tokens seen; and the loop count the cache was filled with (a cache holds the
    states of one loop count, so another count cannot continue it)."""

    def __init__(self):
        self.slots = {}
        self.seen = 0
        self.loops = None

    def append(self, slot, k, v):
        """Adds this pass's keys and values to `slot`; returns all of them."""
        if slot in self.slots:
            old_k, old_v = self.slots[slot]
            k = torch.cat([old_k, k], dim=-2)
            v = torch.cat([old_v, v], dim=-2)
        self.slots[slot] = (k, v)
        return k, v

    def get_seq_length(self, layer_idx=0):
        return self.seen

    def reorder_cache(self, beam_idx):
        for slot, (k, v) in self.slots.items():
            self.slots[slot] = (k.index_select(0, beam_idx), v.index_select(0, beam_idx))


class _Context:
    """One forward pass's positions and cache."""

    def __init__(self, rope, cache, offset):
        self.rope = rope        # (cos, sin), each (T, 64), for positions offset .. offset+T-1
        self.cache = cache      # CartCache or None
        self.offset = offset    # tokens before this pass's first one

    def keys_values(self, slot, k, v):
        return (k, v) if self.cache is None else self.cache.append(slot, k, v)


def rope_tables(start, end, like):
    """Rotary tables for positions start..end-1, base 10,000, rotate-half layout: (T, 64) each."""
    dtype = _reduction_dtype(like)
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, HEAD_DIM, 2, dtype=dtype,
                                                     device=like.device) / float(HEAD_DIM))
    freqs = torch.outer(torch.arange(start, end, dtype=dtype, device=like.device), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, 64)
    return emb.cos().to(like.dtype), emb.sin().to(like.dtype)


def apply_rope(x, rope):
    """x (B, H, T, 64) -> x·cos + rotate_half(x)·sin."""
    cos, sin = rope
    x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)  # (B, H, T, 64)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def attention(q, k, v, causal, offset):
    """softmax(q kᵀ / 8 [+ causal mask]) v; q (B, H, Tq, 64) holds positions offset..offset+Tq-1,
    k and v (B, H, Tk, 64) positions 0..Tk-1. Causal: a query at position p reads keys 0..p."""
    tq, tk = q.size(-2), k.size(-2)
    if not causal or tq == 1 and offset + 1 == tk:
        return F.scaled_dot_product_attention(q, k, v)
    if offset == 0 and tq == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    positions = torch.arange(offset, offset + tq, device=q.device).unsqueeze(1)  # (Tq, 1)
    allowed = torch.arange(tk, device=q.device).unsqueeze(0) <= positions        # (Tq, Tk)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def split_heads(x):
    b, t, d = x.shape
    return x.view(b, t, d // HEAD_DIM, HEAD_DIM).transpose(1, 2)  # (B, H, T, 64)


def merge_heads(x):
    b, h, t, _ = x.shape
    return x.transpose(1, 2).reshape(b, t, h * HEAD_DIM)  # (B, T, d)


def _linear(n_in, n_out):
    return nn.Linear(n_in, n_out, bias=False)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.to(_reduction_dtype(x))
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


class Mlp(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d):
        super().__init__()
        hidden = mlp_hidden(d)
        self.gate = _linear(d, hidden)
        self.up = _linear(d, hidden)
        self.down = _linear(hidden, d)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MlaAttention(nn.Module):
    """Low-rank causal self-attention: q = Wq x; latent c = Wkv_down x (d -> d/4);
    k = Wk_up c, v = Wv_up c; RoPE on q and k."""

    def __init__(self, d):
        super().__init__()
        self.q_proj = _linear(d, d)
        self.kv_down = _linear(d, d // 4)
        self.k_up = _linear(d // 4, d)
        self.v_up = _linear(d // 4, d)
        self.o_proj = _linear(d, d)

    def forward(self, x, ctx, slot):
        c = self.kv_down(x)                                       # (B, T, d/4)
        q = apply_rope(split_heads(self.q_proj(x)), ctx.rope)     # (B, H, T, 64)
        k = apply_rope(split_heads(self.k_up(c)), ctx.rope)       # (B, H, T, 64)
        v = split_heads(self.v_up(c))                             # (B, H, T, 64)
        k, v = ctx.keys_values(slot, k, v)
        return self.o_proj(merge_heads(attention(q, k, v, True, ctx.offset)))


class DenseAttention(nn.Module):
    """The dense baseline's full-rank causal self-attention, RoPE on q and k."""

    def __init__(self, d):
        super().__init__()
        self.q_proj = _linear(d, d)
        self.k_proj = _linear(d, d)
        self.v_proj = _linear(d, d)
        self.o_proj = _linear(d, d)

    def forward(self, x, ctx, slot):
        q = apply_rope(split_heads(self.q_proj(x)), ctx.rope)  # (B, H, T, 64)
        k = apply_rope(split_heads(self.k_proj(x)), ctx.rope)  # (B, H, T, 64)
        v = split_heads(self.v_proj(x))                        # (B, H, T, 64)
        k, v = ctx.keys_values(slot, k, v)
        return self.o_proj(merge_heads(attention(q, k, v, True, ctx.offset)))


class Layer(nn.Module):
    """Prelude, coda or dense layer: x = x + Attn(norm(x)); x = x + MLP(norm(x))."""

    def __init__(self, d, eps, dense=False):
        super().__init__()
        self.attn_norm = RMSNorm(d, eps)
        self.attn = DenseAttention(d) if dense else MlaAttention(d)
        self.ffn_norm = RMSNorm(d, eps)
        self.ffn = Mlp(d)

    def forward(self, x, ctx, slot):
        x = x + self.attn(self.attn_norm(x), ctx, slot)
        return x + self.ffn(self.ffn_norm(x))


class Anchor(nn.Module):
    """K, V from the raw prelude output e (no norm, no RoPE), each (B, H, T, 64)."""

    def __init__(self, d):
        super().__init__()
        self.kv_down = _linear(d, d // 4)
        self.k_up = _linear(d // 4, d)
        self.v_up = _linear(d // 4, d)

    def forward(self, e, ctx, slot):
        c = self.kv_down(e)  # (B, T, d/4)
        return ctx.keys_values(slot, split_heads(self.k_up(c)), split_heads(self.v_up(c)))


class CoreBlock(nn.Module):
    """h = h_in + CrossAttn(norm(h_in), K, V) (q without RoPE), then h = h + MLP(norm(h)).
    With core_attn: self the attention is an MlaAttention of its own. The result still contains
    h_in (faithfulness note 1, docs/model.md §3)."""

    def __init__(self, d, eps, self_attention, causal):
        super().__init__()
        self.attn_norm = RMSNorm(d, eps)
        if self_attention:
            self.attn = MlaAttention(d)
        else:
            self.q_proj = _linear(d, d)
            self.o_proj = _linear(d, d)
        self.ffn_norm = RMSNorm(d, eps)
        self.ffn = Mlp(d)
        self.self_attention = self_attention
        self.causal = causal

    def forward(self, h_in, K, V, ctx, slot):
        x = self.attn_norm(h_in)
        if self.self_attention:
            a = self.attn(x, ctx, slot)
        else:
            q = split_heads(self.q_proj(x))  # (B, H, T, 64), no RoPE
            a = self.o_proj(merge_heads(attention(q, K, V, self.causal, ctx.offset)))
        h = h_in + a
        return h + self.ffn(self.ffn_norm(h))


class _Parameters(nn.Module):
    """Parameters named "<module>.<name>" as docs/model.md §8 names them (hyper.weights, lti.a)."""

    def __init__(self, **tensors):
        super().__init__()
        for name, value in tensors.items():
            setattr(self, name, nn.Parameter(value))


def loop_index_table(device):
    """The fixed sinusoid table pe[16, 32] of the loop-index embedding (docs/model.md §3)."""
    pe = torch.zeros(MAX_LOOPS, 32, dtype=torch.float32, device=device)
    r = torch.arange(MAX_LOOPS, dtype=torch.float32, device=device).unsqueeze(1)  # (16, 1)
    div = torch.exp(torch.arange(0, 32, 2, dtype=torch.float32, device=device)
                    * (-math.log(10000.0) / 32.0))                                 # (16)
    pe[:, 0::2] = torch.sin(r * div)
    pe[:, 1::2] = torch.cos(r * div)
    return pe


class CartPreTrainedModel(PreTrainedModel):
    config_class = CartConfig
    base_model_prefix = "cart"
    _no_split_modules = ["Layer", "CoreBlock"]
    supports_gradient_checkpointing = False

    def _init_weights(self, module):
        # CART Lab's initialisation (docs/model.md §1), for tensors a checkpoint does not hold.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, _Parameters):
            with torch.no_grad():
                if hasattr(module, "weights"):
                    module.weights.copy_(torch.tensor([1.0, 0.0, 0.0]))
                if hasattr(module, "a"):
                    module.a.fill_(math.log(9.0))


class CartForCausalLM(CartPreTrainedModel, GenerationMixin):
    """CART (config.model == "cart") or the dense baseline ("dense"). forward(input_ids, loops=N)
    runs N loops (1..16; default config.R_infer, else the trained R)."""

    def __init__(self, config):
        super().__init__(config)
        d, eps = config.d, config.rms_norm_eps
        self.embed = nn.Embedding(config.vocab_size, d)
        if config.model == "dense":
            self.layers = nn.ModuleList(Layer(d, eps, dense=True) for _ in range(config.layers))
        else:
            self_core = config.core_attn == "self"
            self.prelude = nn.ModuleList(Layer(d, eps) for _ in range(config.P))
            if not self_core:
                self.anchor = Anchor(d)
            if config.core == "shared":
                self.core = CoreBlock(d, eps, self_core, config.cross_causal)
            else:
                self.core = nn.ModuleList(CoreBlock(d, eps, self_core, config.cross_causal)
                                          for _ in range(config.R))
            if config.hyper:
                self.hyper = _Parameters(weights=torch.tensor([1.0, 0.0, 0.0]))
            if config.lie:
                self.lie = _linear(32, d)
            if config.lti:
                self.lti = _Parameters(a=torch.full((d,), math.log(9.0)))
            self.coda = Layer(d, eps)
        self.final_norm = RMSNorm(d, eps)
        self.post_init()

    # The output projection is the embedding (logits = h · Eᵀ): there is no separate head.
    def get_input_embeddings(self):
        return self.embed

    def set_input_embeddings(self, value):
        self.embed = value

    def get_output_embeddings(self):
        return None

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # CartCache, made in prepare_inputs_for_generation

    @property
    def caches_exactly(self):
        """Whether decoding with a cache computes what a full forward computes. Not with
        cross_causal: false (the leak), where an earlier position reads later anchor positions
        (a self-attention core has no anchor and is causal whatever cross_causal says)."""
        c = self.config
        return c.model == "dense" or c.cross_causal or c.core_attn == "self"

    def _loop_count(self, loops):
        c = self.config
        n = c.loops if loops is None or int(loops) == 0 else int(loops)  # 0: the default
        if not 1 <= n <= MAX_LOOPS:
            raise ValueError(f"loops = {n}; allowed values: 1..{MAX_LOOPS}")
        if c.core == "unshared" and n != c.R:
            raise ValueError(f"loops = {n}: an unshared core runs exactly R = {c.R} loops")
        return n

    def _trunk(self, ids, loops, ctx):
        c = self.config
        x = self.embed(ids)  # (B, T, d)
        if c.model == "dense":
            for i, layer in enumerate(self.layers):
                x = layer(x, ctx, f"layers.{i}")
            return x
        for i, layer in enumerate(self.prelude):
            x = layer(x, ctx, f"prelude.{i}")
        e = x  # the context anchor
        has_anchor = c.core_attn == "cross"
        K = V = None
        if has_anchor and c.kv == "frozen":
            K, V = self.anchor(e, ctx, "anchor")  # once
        h = e
        ring = [e, e, e]  # the hyper-connection ring, newest first
        mix = torch.softmax(self.hyper.weights, 0) if c.hyper else None
        carry = torch.sigmoid(self.lti.a) if c.lti else None
        pe = loop_index_table(x.device) if c.lie else None
        for r in range(loops):
            h_in = mix[0] * ring[0] + mix[1] * ring[1] + mix[2] * ring[2] if c.hyper else ring[0]
            if c.lie:
                h_in = h_in + self.lie(pe[r].to(h_in.dtype))  # broadcast over (B, T)
            if has_anchor and c.kv == "recompute":
                K, V = self.anchor(h_in, ctx, f"anchor.{r}")
            core = self.core if c.core == "shared" else self.core[r]
            t = core(h_in, K, V, ctx, f"core.{r}")
            # Faithfulness note 1: `paper` keeps the double residual; `delta` is the paper's
            # equation h = σ(a) ⊙ h_in + (t − h_in).
            update = t if c.gate == "paper" else t - h_in
            h = carry * h_in + update if c.lti else h_in + update
            ring = [h, ring[0], ring[1]]
        return self.coda(h, ctx, "coda")

    def forward(self, input_ids=None, attention_mask=None, labels=None, use_cache=None,
                loops=None, return_dict=None, **kwargs):
        cache = kwargs.pop("cache", None) or kwargs.pop("past_key_values", None)
        for unused in ("position_ids", "cache_position", "token_type_ids", "output_attentions",
                       "output_hidden_states", "logits_to_keep", "num_items_in_batch"):
            kwargs.pop(unused, None)
        if kwargs.get("inputs_embeds") is not None:
            raise ValueError("CART reads input_ids; inputs_embeds is not supported")
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError("input_ids must be given as (batch, tokens)")
        n_loops = self._loop_count(loops) if self.config.model == "cart" else 0
        if use_cache is None:
            use_cache = False
        _check_right_padded(attention_mask)
        if use_cache and attention_mask is not None and not attention_mask.to(torch.bool).all():
            raise ValueError("CART's model code keeps a cache for unpadded batches only: "
                             "generate from one prompt, or from prompts of one length")
        if use_cache and not self.caches_exactly:
            use_cache = False
            cache = None
        if use_cache and cache is None:
            cache = CartCache()
        offset = 0
        if use_cache:
            if cache.loops is not None and cache.loops != n_loops:
                raise ValueError(f"this cache holds the states of {cache.loops} loops; "
                                 f"forward was asked for {n_loops}")
            cache.loops = n_loops
            offset = cache.seen
        else:
            cache = None
        t = input_ids.size(1)
        ctx = _Context(rope_tables(offset, offset + t, self.embed.weight), cache, offset)
        h = self._trunk(input_ids, n_loops, ctx)
        logits = torch.matmul(self.final_norm(h), self.embed.weight.t().to(h.dtype))
        if cache is not None:
            cache.seen += t
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache})

    def prepare_inputs_for_generation(self, input_ids, cache=None, past_key_values=None,
                                      attention_mask=None, use_cache=True, loops=None,
                                      **kwargs):
        cache = cache if cache is not None else past_key_values
        if attention_mask is not None and not bool(attention_mask.to(torch.bool).all()):
            raise ValueError("CART's model code generates from unpadded batches only: "
                             "generate from one prompt, or from prompts of one length")
        if not self.caches_exactly:
            use_cache, cache = False, None
        if use_cache and cache is not None and cache.seen > 0:
            input_ids = input_ids[:, cache.seen:]  # only the tokens the cache has not seen
        return {"input_ids": input_ids, _CACHE_FIELD: cache, "use_cache": use_cache,
                "attention_mask": attention_mask, "loops": loops}

    def _reorder_cache(self, cache, beam_idx):
        cache.reorder_cache(beam_idx)
        return cache


def _check_right_padded(attention_mask):
    """A causal model's outputs at real tokens are unaffected by padding after them; padding
    before them would shift positions, which this model does not support."""
    if attention_mask is None:
        return
    mask = attention_mask.to(torch.bool)
    if mask.dim() != 2:
        raise ValueError("attention_mask must be (batch, tokens)")
    # Right padding: once a row has a 0, it has only 0s after it.
    if (mask[:, 1:] & ~mask[:, :-1]).any():
        raise ValueError("CART supports right padding only (tokenizer.padding_side = 'right'); "
                         "this attention_mask has padding before tokens")
