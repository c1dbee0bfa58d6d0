#!/usr/bin/python3
"""Minimal pure-PyTorch re-implementation of transformers' eager causal LMs.

Not the oracle: real transformers is (tools/hf_oracle/, tests/validation/hf-real-cpu.jsonl).
This file stays only to regenerate the tiny-* rows of pytorch-cpu-1.13.jsonl, the
HuggingFace evidence at PyTorch 1.13, which no modelled transformers release runs
(4.51.3 requires torch >= 2.0).  When it was written transformers was not installed
here (no network), so tools/measure_cpu.py builds HuggingFace models from their
config.json with this file instead.  It
follows transformers' own source op for op, for memory measurement:

  * LlamaForCausalLM as in modeling_llama.py (4.51), which also covers
    model_type "mistral" and "qwen2" (q/k/v biases) and "qwen3" (q_norm/k_norm,
    an RMSNorm over head_dim, applied before the transpose);
  * GPT2LMHeadModel as in modeling_gpt2.py (4.47, GPT2Attention._attn; 4.51's
    eager_attention_forward makes the same tensors), with 4.51's legacy tuple
    past_key_values, the eager attention_mask and position_ids that generate passes
    (gpt2_greedy_generate, BioGPT's too; generate_greedy picks it, hybrid_generate
    or greedy_generate by class);
  * the mixture-of-experts decoders on the Llama skeleton: MixtralSparseMoeBlock,
    Qwen2MoeSparseMoeBlock (shared expert and its sigmoid gate) and
    Qwen3MoeSparseMoeBlock as in 4.51 (expert_hitted loop, torch.where,
    index_add_), DeepseekV3Attention (MLA, rope_interleave) and
    DeepseekV3MoE / DeepseekV3TopkRouter of the native modeling_deepseek_v3.py
    (one module per expert, every expert in turn), with V2's softmax and
    greedy / group-limited top-k in the same router. For the measurement the
    router's top-k choice is overwritten with a balanced round-robin
    assignment (balance_), the uniform routing dnnmem assumes.
  * T5ForConditionalGeneration (and mT5's copy) as in modeling_t5.py
    (4.46-4.51): relative position bias made by each stack's first layer and
    shared, the EncoderDecoderCache kept as the returned past_key_values,
    called as model(input_ids, decoder_input_ids); returns (logits,
    past_key_values, encoder_last_hidden_state);
  * ViTModel / ViTForImageClassification as in modeling_vit.py (4.53-4.57,
    eager_attention_forward), called as model(pixel_values);
  * BioGptForCausalLM as 4.51 runs it (BART's attention copied, the
    past_key_value tuple, _prepare_4d_causal_attention_mask's mask);
  * OPTForCausalLM (the attention-interface version, 4.50-4.56),
    GPTNeoXForCausalLM, Phi3ForCausalLM, GemmaForCausalLM, PhiForCausalLM
    (4.51) and FalconForCausalLM (4.51-4.56, rotary, eager path).

Called as model(input_ids) with attn_implementation="eager": no attention_mask,
use_cache from the config (default True).  Returns (logits, presents):
presents is a tuple of (key, value) per layer when use_cache (what a
DynamicCache / the presents tuple keeps alive while the caller holds the
output), else None.

Same parameters and buffers as the state_dict (nn.Module names match), plus
the non-persistent buffers: the rotary embedding's inv_freq (model level,
4.45+) and GPT-2's per-layer `bias` (bool causal mask) and `masked_bias`.
Tensor ops are the ones transformers runs, in the same order: rotate_half via
cat, repeat_kv via expand + reshape, softmax(dtype=float32).to(dtype),
RMSNorm in float32 then .to(input_dtype), the causal mask built per forward
as a float tensor filled with finfo.min, Conv1D as addmm, NewGELU as the tanh
formula, nn.Dropout / F.dropout where the config has them.

Only the memory-relevant behaviour is reproduced: initialisation is plain
normal(0, 0.02) (values do not change the bytes), no padding, no rope
scaling types.  Generation: greedy_generate() is transformers 4.51's greedy
GenerationMixin._sample with a DynamicCache for the classes that support the
Cache classes: the Llama family, OPT, GPT-NeoX, Falcon, Phi, Phi-3, Gemma
(prefill with logits_to_keep=1 where the forward takes it, not OPT's, then
one token per forward, the cache passed in; each forward's generation path
builds _update_causal_mask's [B, 1, q, L] clone from the 2-D attention_mask
and takes generate's position_ids, dynamic_causal_mask);
hybrid_generate() the same loop for Gemma2ForCausalLM / Gemma3ForCausalLM
(4.51.3, text only) with the HybridCache their configs ask for
(cache_implementation "hybrid": static per-layer caches made before the
prefill, sliding layers' of min(sliding_window, max_cache_len) positions).
These loops (and gpt2_greedy_generate) take
sampling=sampling_processors(top_k, top_p, temperature): _sample with
do_sample=True (4.51's logits warpers, softmax, multinomial).
beam_generate() is 4.51.3's vectorized _beam_search for the DynamicCache and
legacy tuple classes (the cache reordered after every step); generate()
picks among them.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    """A config.json dict with transformers' defaults for the fields used."""

    def __init__(self, d):
        self.d = dict(d)
        self.model_type = d.get("model_type") or "gpt2"

    def get(self, key, default=None):
        v = self.d.get(key)
        return default if v is None else v


# --------------------------------------------------------------------------
# Llama family (modeling_llama.py 4.51 and its copies)
# --------------------------------------------------------------------------


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    """rope_type "default": inv_freq = 1 / theta ** (arange(0, dim, 2) / dim)."""

    def __init__(self, cfg, head_dim):
        super().__init__()
        base = cfg.get("rope_theta", 10000.0)
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class DynamicCache:
    """transformers 4.51 cache_utils.DynamicCache: per layer a key and a value
    tensor; update() keeps the first tensors given as they are and then
    concatenates each new token's along the sequence dim (a fresh tensor, the
    old one dropped)."""

    def __init__(self):
        self.key_cache = []
        self.value_cache = []
        self._seen_tokens = 0

    def update(self, key_states, value_states, layer_idx):
        if layer_idx == 0:
            self._seen_tokens += key_states.shape[-2]
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states],
                                                    dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def get_seq_length(self, layer_idx=0):
        return self.key_cache[layer_idx].shape[-2] if len(self.key_cache) > layer_idx else 0

    def reorder_cache(self, beam_idx):
        """Cache.reorder_cache (4.51, beam search): per layer the keys, then
        the values, index_select'ed along the batch into new tensors that
        replace the list entries (the old ones freed as they are replaced)."""
        for layer_idx in range(len(self.key_cache)):
            device = self.key_cache[layer_idx].device
            self.key_cache[layer_idx] = self.key_cache[layer_idx].index_select(0, beam_idx.to(device))
            device = self.value_cache[layer_idx].device
            self.value_cache[layer_idx] = self.value_cache[layer_idx].index_select(0, beam_idx.to(device))


def cache_kv(cache, key_states, value_states, layer_idx):
    """The attention's cache step: DynamicCache.update in generation (the
    keys and values over every cached position returned), else the presents
    list of model(input_ids) (what DynamicCache.update keeps of an empty
    cache: the tensors as given)."""
    if isinstance(cache, DynamicCache):
        return cache.update(key_states, value_states, layer_idx)
    if cache is not None:
        cache.append((key_states, value_states))
    return key_states, value_states


def number_layers(layers, attr):
    """Give each layer's attention module its layer_idx (the cache's index)."""
    for i, layer in enumerate(layers):
        getattr(layer, attr).layer_idx = i


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class LlamaAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        t = cfg.model_type
        hidden = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.num_kv_heads = cfg.get("num_key_value_heads", self.num_heads)
        self.head_dim = cfg.get("head_dim", hidden // self.num_heads)
        self.num_key_value_groups = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.layer_idx = layer_idx
        attn_bias = t in ("llama", "qwen3", "qwen3_moe") and cfg.get("attention_bias", False)
        qkv_bias = attn_bias or t == "qwen2" or (t == "qwen2_moe" and cfg.get("qkv_bias", True))
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=attn_bias)
        self.qk_norm = t in ("qwen3", "qwen3_moe")
        if self.qk_norm:
            eps = cfg.get("rms_norm_eps", 1e-6)
            self.q_norm = LlamaRMSNorm(self.head_dim, eps=eps)
            self.k_norm = LlamaRMSNorm(self.head_dim, eps=eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.qk_norm:  # Qwen3Attention
            query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
            key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        else:
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if isinstance(cache, DynamicCache):  # generation: past keys/values concatenated
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx)
        elif cache is not None:  # DynamicCache.update on an empty cache: keeps and returns them
            cache.append((key_states, value_states))

        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden, inter = cfg.get("hidden_size"), cfg.get("intermediate_size")
        bias = cfg.model_type == "llama" and cfg.get("mlp_bias", False)
        self.gate_proj = nn.Linear(hidden, inter, bias=bias)
        self.up_proj = nn.Linear(hidden, inter, bias=bias)
        self.down_proj = nn.Linear(inter, hidden, bias=bias)
        act = cfg.get("hidden_act", "silu")
        assert act in ("silu", "swish"), act
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(cfg, layer_idx)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.get("hidden_size"), eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.get("hidden_size"), eps=eps)

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        # self_attn_weights stays referenced until the layer returns (output_attentions
        # only decides whether it is returned)
        hidden_states, self_attn_weights = self.self_attn(
            hidden_states, position_embeddings, attention_mask, cache)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        outputs = (hidden_states,)
        return outputs


def dynamic_causal_mask(input_tensor, cache_position, attention_mask=None, past_seen_tokens=0,
                        mistral=False, sliding_window=None):
    """_update_causal_mask with a DynamicCache, eager (4.51): target_length =
    attention_mask.shape[-1] when a 2-D attention_mask is passed (generate
    always passes one), else past_seen_tokens + sequence_length + 1;
    _prepare_4d_causal_attention_mask_with_cache_position in Llama's form
    (triu when sequence_length != 1, then *= arange > cache_position; also
    GPT-J's, OPT's, GPT-NeoX's, Falcon's, Phi's and Gemma's copies) or
    Mistral's (diagonal_attend_mask, the sliding window or-ed in; Qwen2/3,
    Mixtral, Phi-3); expanded to [B, 1, q, L] and, with a 2-D mask, cloned and
    its padding positions (none here) masked in the copy."""
    dtype, device = input_tensor.dtype, input_tensor.device
    sequence_length = input_tensor.shape[1]
    target_length = (attention_mask.shape[-1] if attention_mask is not None
                     else past_seen_tokens + sequence_length + 1)
    batch_size = input_tensor.shape[0]
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype,
                             dtype=dtype, device=device)
    if not mistral:
        # LlamaModel._prepare_4d_causal_attention_mask_with_cache_position
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)
    else:
        # the Mistral/Qwen2/Qwen3/Phi-3 copy: diagonal_attend_mask
        diagonal_attend_mask = torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)
        if sliding_window is not None:
            sliding_attend_mask = torch.arange(target_length, device=device) <= (
                cache_position.reshape(-1, 1) - sliding_window)
            diagonal_attend_mask.bitwise_or_(sliding_attend_mask)
        causal_mask *= diagonal_attend_mask
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    if attention_mask is not None:  # the padding positions (none here) masked in a copy
        causal_mask = causal_mask.clone()
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(
            padding_mask, min_dtype)
    return causal_mask


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hidden = cfg.get("hidden_size")
        self.embed_tokens = nn.Embedding(cfg.get("vocab_size"), hidden, cfg.get("pad_token_id"))
        layer = MoeDecoderLayer if cfg.model_type in MOE_TYPES else LlamaDecoderLayer
        self.layers = nn.ModuleList(layer(cfg, i) for i in range(cfg.get("num_hidden_layers")))
        self.norm = LlamaRMSNorm(hidden, eps=cfg.get("rms_norm_eps", 1e-6))
        head_dim = cfg.get("head_dim", hidden // cfg.get("num_attention_heads"))
        if cfg.model_type.startswith("deepseek"):  # DeepseekV3Config.head_dim = qk_rope_head_dim
            head_dim = cfg.get("qk_rope_head_dim", 64)
        self.rotary_emb = LlamaRotaryEmbedding(cfg, head_dim)

    def _causal_mask(self, input_tensor, cache_position, attention_mask=None, past_seen_tokens=0):
        """_update_causal_mask (eager, DynamicCache): dynamic_causal_mask in
        Llama's form (llama, deepseek) or Mistral's (the others; the window
        where use_sliding_window says so)."""
        t = self.cfg.model_type
        sw = self.cfg.get("sliding_window") if self.cfg.get(
            "use_sliding_window", t == "mistral") else None
        return dynamic_causal_mask(input_tensor, cache_position, attention_mask, past_seen_tokens,
                                   mistral=t not in ("llama", "deepseek_v2", "deepseek_v3"),
                                   sliding_window=sw)

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None,
                position_ids=None, cache_position=None):
        inputs_embeds = self.embed_tokens(input_ids)
        cache = past_key_values if past_key_values is not None else [] if use_cache else None
        past_seen = past_key_values.get_seq_length() if past_key_values is not None else 0
        if cache_position is None:
            cache_position = torch.arange(past_seen, past_seen + inputs_embeds.shape[1],
                                          device=inputs_embeds.device)
        if position_ids is None:
            position_ids = cache_position.unsqueeze(0)
        causal_mask = self._causal_mask(inputs_embeds, cache_position, attention_mask, past_seen)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        # MixtralModel / Qwen2MoeModel / Qwen3MoeModel: all_router_logits
        all_router_logits = () if self.cfg.get("output_router_logits", False) else None
        for decoder_layer in self.layers:
            layer_outputs = decoder_layer(hidden_states, causal_mask, position_embeddings, cache)
            hidden_states = layer_outputs[0]
            if all_router_logits is not None and len(layer_outputs) > 1:
                all_router_logits += (layer_outputs[-1],)
        hidden_states = self.norm(hidden_states)
        self.router_logits = all_router_logits
        return hidden_states, cache


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.get("hidden_size"), cfg.get("vocab_size"), bias=False)
        self.use_cache = cfg.get("use_cache", True)
        if cfg.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                cache_position=None, logits_to_keep=0):
        hidden_states, cache = self.model(input_ids, self.use_cache, past_key_values,
                                          attention_mask, position_ids, cache_position)
        # logits_to_keep=0: all positions; generate passes 1 (the last position's)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :])
        router_logits, self.model.router_logits = self.model.router_logits, None
        if router_logits is not None:  # returned third (MoeCausalLMOutputWithPast.router_logits)
            return logits, (tuple(cache) if cache is not None else None), router_logits
        if isinstance(cache, DynamicCache):
            return logits, cache
        return logits, (tuple(cache) if cache is not None else None)


def load_balancing_loss_func(gate_logits, num_experts, top_k):
    """transformers 4.51's load_balancing_loss_func (Mixtral, Qwen2-MoE,
    Qwen3-MoE) without an attention_mask: every local lives until return."""
    compute_device = gate_logits[0].device
    concatenated_gate_logits = torch.cat([layer_gate.to(compute_device) for layer_gate in gate_logits], dim=0)
    routing_weights = torch.nn.functional.softmax(concatenated_gate_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = torch.nn.functional.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts



# --------------------------------------------------------------------------
# Mixture of experts: Mixtral, Qwen2-MoE, Qwen3-MoE (4.51), DeepSeek-V2/V3
# (DeepseekV3Attention / DeepseekV3MoE as transformers' native
# modeling_deepseek_v3.py runs them, one module per expert)
# --------------------------------------------------------------------------

MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")


def balance_(selected, num_experts):
    """Deterministic, balanced routing for the measurement: token t's k slots go
    to experts (t*k + j) % E, so every expert gets tokens*k/E of them (the
    uniform routing dnnmem assumes). Written through .data into topk's indices
    (no autograd version bump; TopkBackward keeps the tensor); the routing
    weights keep topk's values, which does not change a byte. The arange and
    remainder temporaries (2 x N*k int64) are the only extra allocations."""
    n, k = selected.shape
    bal = torch.arange(n * k, device=selected.device).view(n, k) % num_experts
    selected.data.copy_(bal)
    del bal


class MoeMLP(nn.Module):
    """MixtralBlockSparseTop2MLP (w1, w3, w2) or the Qwen/DeepSeek expert MLP."""

    def __init__(self, hidden, inter, names=("gate_proj", "up_proj", "down_proj")):
        super().__init__()
        self.names = names
        for n, (i, o) in zip(names, ((hidden, inter), (hidden, inter), (inter, hidden))):
            setattr(self, n, nn.Linear(i, o, bias=False))
        self.act_fn = nn.SiLU()

    def forward(self, x):
        g, u, d = (getattr(self, n) for n in self.names)
        return d(self.act_fn(g(x)) * u(x))


class SparseMoeBlock(nn.Module):
    """MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock (4.51)."""

    def __init__(self, cfg):
        super().__init__()
        t = cfg.model_type
        hidden = cfg.get("hidden_size")
        if t == "mixtral":
            self.num_experts = cfg.get("num_local_experts", 8)
            self.top_k = cfg.get("num_experts_per_tok", 2)
            self.norm_topk_prob = True
            inter, names = cfg.get("intermediate_size"), ("w1", "w3", "w2")
        else:
            self.num_experts = cfg.get("num_experts", 60 if t == "qwen2_moe" else 128)
            self.top_k = cfg.get("num_experts_per_tok", 4 if t == "qwen2_moe" else 8)
            self.norm_topk_prob = cfg.get("norm_topk_prob", False)
            inter, names = cfg.get("moe_intermediate_size"), ("gate_proj", "up_proj", "down_proj")
        self.gate = nn.Linear(hidden, self.num_experts, bias=False)
        self.experts = nn.ModuleList(MoeMLP(hidden, inter, names) for _ in range(self.num_experts))
        self.shared = t == "qwen2_moe"
        if self.shared:
            self.shared_expert = MoeMLP(hidden, cfg.get("shared_expert_intermediate_size"))
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        balance_(selected_experts, self.num_experts)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype,
            device=hidden_states.device)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        expert_hitted = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hitted:
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        if self.shared:
            shared_expert_output = self.shared_expert(hidden_states)
            shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
            final_hidden_states = final_hidden_states + shared_expert_output
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class DeepseekTopkRouter(nn.Module):
    """DeepseekV3TopkRouter (sigmoid, noaux_tc), or V2's softmax with greedy /
    group_limited_greedy top-k, as one module ("gate")."""

    def __init__(self, cfg):
        super().__init__()
        v3 = cfg.model_type == "deepseek_v3"
        self.hidden = cfg.get("hidden_size")
        self.top_k = cfg.get("num_experts_per_tok", 8 if v3 else 6)
        self.n_routed_experts = cfg.get("n_routed_experts", 256 if v3 else 160)
        self.routed_scaling_factor = cfg.get("routed_scaling_factor", 2.5 if v3 else 1.0)
        self.n_group = cfg.get("n_group", 8 if v3 else 1)
        self.topk_group = cfg.get("topk_group", 4 if v3 else 1)
        self.norm_topk_prob = cfg.get("norm_topk_prob", v3)
        self.method = cfg.get("topk_method", "noaux_tc" if v3 else "greedy")
        self.sigmoid = cfg.get("scoring_func", "sigmoid" if v3 else "softmax") == "sigmoid"
        self.weight = nn.Parameter(torch.empty((self.n_routed_experts, self.hidden)))
        if self.method == "noaux_tc":
            self.register_buffer("e_score_correction_bias", torch.zeros(self.n_routed_experts))

    @torch.no_grad()
    def get_topk_indices(self, scores):
        scores_for_choice = scores.view(-1, self.n_routed_experts) + self.e_score_correction_bias.unsqueeze(0)
        group_scores = (
            scores_for_choice.view(-1, self.n_group, self.n_routed_experts // self.n_group)
            .topk(2, dim=-1)[0]
            .sum(dim=-1)
        )
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (
            group_mask.unsqueeze(-1)
            .expand(-1, self.n_group, self.n_routed_experts // self.n_group)
            .reshape(-1, self.n_routed_experts)
        )
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        balance_(topk_indices, self.n_routed_experts)
        return topk_indices

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden)
        router_logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        scores = router_logits.sigmoid() if self.sigmoid else router_logits.softmax(dim=-1, dtype=torch.float32)
        if self.method == "noaux_tc":
            topk_indices = self.get_topk_indices(scores)
            topk_weights = scores.gather(1, topk_indices)
        elif self.method == "greedy":
            topk_weights, topk_indices = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
            balance_(topk_indices, self.n_routed_experts)
        else:  # group_limited_greedy
            n = hidden_states.shape[0]
            group_scores = scores.view(n, self.n_group, -1).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores)
            group_mask.scatter_(1, group_idx, 1)
            score_mask = (group_mask.unsqueeze(-1)
                          .expand(n, self.n_group, self.n_routed_experts // self.n_group).reshape(n, -1))
            tmp_scores = scores.masked_fill(~score_mask.bool(), 0.0)
            topk_weights, topk_indices = torch.topk(tmp_scores, k=self.top_k, dim=-1, sorted=False)
            balance_(topk_indices, self.n_routed_experts)
        if self.norm_topk_prob and (self.method == "noaux_tc" or self.top_k > 1):
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_indices, topk_weights


class DeepseekMoE(nn.Module):
    """DeepseekV3MoE: routed experts (moe(), every expert in turn), shared experts."""

    def __init__(self, cfg):
        super().__init__()
        v3 = cfg.model_type == "deepseek_v3"
        hidden = cfg.get("hidden_size")
        inter = cfg.get("moe_intermediate_size", 2048 if v3 else 1407)
        n = cfg.get("n_routed_experts", 256 if v3 else 160)
        self.experts = nn.ModuleList(MoeMLP(hidden, inter) for _ in range(n))
        self.gate = DeepseekTopkRouter(cfg)
        shared = cfg.get("n_shared_experts", 1 if v3 else 2)
        self.shared_experts = MoeMLP(hidden, inter * shared) if shared else None

    def moe(self, hidden_states, topk_indices, topk_weights):
        final_hidden_states = torch.zeros_like(hidden_states, dtype=topk_weights.dtype)
        expert_mask = torch.nn.functional.one_hot(topk_indices, num_classes=len(self.experts))
        expert_mask = expert_mask.permute(2, 0, 1)
        for expert_idx in range(len(self.experts)):
            expert = self.experts[expert_idx]
            mask = expert_mask[expert_idx]
            token_indices, weight_indices = torch.where(mask)
            if token_indices.numel() > 0:
                expert_weights = topk_weights[token_indices, weight_indices]
                expert_input = hidden_states[token_indices]
                expert_output = expert(expert_input)
                weighted_output = expert_output * expert_weights.unsqueeze(-1)
                final_hidden_states.index_add_(0, token_indices, weighted_output)
        return final_hidden_states.type(hidden_states.dtype)

    def forward(self, hidden_states):
        residuals = hidden_states
        orig_shape = hidden_states.shape
        topk_indices, topk_weights = self.gate(hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.moe(hidden_states, topk_indices, topk_weights).view(*orig_shape)
        if self.shared_experts is not None:
            hidden_states = hidden_states + self.shared_experts(residuals)
        return hidden_states


def apply_rotary_pos_emb_interleave(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class DeepseekAttention(nn.Module):
    """DeepseekV3Attention (multi-head latent attention), rope_interleave=True
    (DeepseekV3Config's default); eager attention."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        hidden = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.num_key_value_groups = self.num_heads // cfg.get("num_key_value_heads", self.num_heads)
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.q_lora_rank = cfg.d.get("q_lora_rank", 1536)
        self.qk_rope_head_dim = cfg.get("qk_rope_head_dim", 64)
        self.kv_lora_rank = cfg.get("kv_lora_rank", 512)
        self.v_head_dim = cfg.get("v_head_dim", 128)
        self.qk_nope_head_dim = cfg.get("qk_nope_head_dim", 128)
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        bias = cfg.get("attention_bias", False)
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(hidden, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(hidden, self.q_lora_rank, bias=bias)
            self.q_a_layernorm = LlamaRMSNorm(self.q_lora_rank)
            self.q_b_proj = nn.Linear(self.q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.kv_lora_rank + self.qk_rope_head_dim, bias=bias)
        self.kv_a_layernorm = LlamaRMSNorm(self.kv_lora_rank)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank,
                                   self.num_heads * (self.qk_nope_head_dim + self.v_head_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_head_dim, hidden, bias=bias)
        self.scaling = self.qk_head_dim ** (-0.5)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache):
        batch_size, seq_length = hidden_states.shape[:-1]
        query_shape = (batch_size, seq_length, -1, self.qk_head_dim)
        key_shape = (batch_size, seq_length, -1, self.qk_nope_head_dim + self.v_head_dim)
        if self.q_lora_rank is None:
            q_states = self.q_proj(hidden_states)
        else:
            q_states = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
        q_states = q_states.view(query_shape).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
        k_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        k_pass = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(key_shape).transpose(1, 2)
        k_pass, value_states = torch.split(k_pass, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k_rot = k_rot.view(batch_size, 1, seq_length, self.qk_rope_head_dim)
        cos, sin = position_embeddings
        q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        query_states = torch.cat((q_pass, q_rot), dim=-1)
        key_states = torch.cat((k_pass, k_rot), dim=-1)
        if cache is not None:
            cache.append((key_states, value_states))
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class MoeDecoderLayer(nn.Module):
    """MixtralDecoderLayer (block_sparse_moe), Qwen2MoeDecoderLayer /
    Qwen3MoeDecoderLayer (mlp: sparse where decoder_sparse_step and
    mlp_only_layers say), DeepseekV3DecoderLayer (MLA; mlp dense below
    first_k_dense_replace)."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        t = cfg.model_type
        hidden = cfg.get("hidden_size")
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.mixtral = t == "mixtral"
        if t.startswith("deepseek"):
            self.self_attn = DeepseekAttention(cfg, layer_idx)
            sparse = (layer_idx >= cfg.get("first_k_dense_replace", 3 if t == "deepseek_v3" else 0)
                      and layer_idx % cfg.get("moe_layer_freq", 1) == 0)
            self.mlp = DeepseekMoE(cfg) if sparse else LlamaMLP(cfg)
        else:
            self.self_attn = LlamaAttention(cfg, layer_idx)
            if self.mixtral:
                self.block_sparse_moe = SparseMoeBlock(cfg)
            elif (layer_idx not in cfg.get("mlp_only_layers", [])
                  and (layer_idx + 1) % cfg.get("decoder_sparse_step", 1) == 0):
                self.mlp = SparseMoeBlock(cfg)
            else:
                self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.output_router_logits = cfg.get("output_router_logits", False)

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, self_attn_weights = self.self_attn(
            hidden_states, position_embeddings, attention_mask, cache)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.block_sparse_moe(hidden_states) if self.mixtral else self.mlp(hidden_states)
        router_logits = None
        if isinstance(hidden_states, tuple):
            hidden_states, router_logits = hidden_states
        hidden_states = residual + hidden_states
        # output_router_logits: the layer returns its router logits too
        if self.output_router_logits and router_logits is not None:
            return (hidden_states, router_logits)
        return (hidden_states,)

# --------------------------------------------------------------------------
# GPT-2 (modeling_gpt2.py 4.47)
# --------------------------------------------------------------------------


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        x = x.view(size_out)
        return x


class NewGELUActivation(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        max_positions = cfg.get("n_positions")
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions),
            persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.embed_dim = cfg.get("n_embd")
        self.num_heads = cfg.get("n_head")
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.scale_attn_weights = cfg.get("scale_attn_weights", True)
        self.scale_attn_by_inverse_layer_idx = cfg.get("scale_attn_by_inverse_layer_idx", False)
        self.layer_idx = layer_idx
        assert not cfg.get("reorder_and_upcast_attn", False)
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(cfg.get("attn_pdrop", 0.1))
        self.resid_dropout = nn.Dropout(cfg.get("resid_pdrop", 0.1))

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            attn_weights = attn_weights / torch.full(
                [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device)
        if self.scale_attn_by_inverse_layer_idx:
            attn_weights = attn_weights / float(self.layer_idx + 1)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        if attention_mask is not None:  # generate's mask, made 4-D by GPT2Model (out of place)
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output, attn_weights

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states, use_cache, layer_past=None, attention_mask=None):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        if layer_past is not None:  # the legacy tuple cache (4.51): a new tensor per token
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache is True else None
        attn_output, attn_weights = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)
        outputs = (attn_output, present)
        return outputs


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, cfg):
        super().__init__()
        embed_dim = cfg.get("n_embd")
        self.c_fc = Conv1D(intermediate_size, embed_dim)
        self.c_proj = Conv1D(embed_dim, intermediate_size)
        act = cfg.get("activation_function", "gelu_new")
        assert act == "gelu_new", act
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(cfg.get("resid_pdrop", 0.1))

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class GPT2Block(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        hidden_size = cfg.get("n_embd")
        inner_dim = cfg.get("n_inner", 4 * hidden_size)
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.ln_1 = nn.LayerNorm(hidden_size, eps=eps)
        self.attn = GPT2Attention(cfg, layer_idx)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = GPT2MLP(inner_dim, cfg)

    def forward(self, hidden_states, use_cache, layer_past=None, attention_mask=None):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_outputs = self.attn(hidden_states, use_cache, layer_past, attention_mask)
        attn_output = attn_outputs[0]
        outputs = attn_outputs[1:]
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        hidden_states = residual + feed_forward_hidden_states
        if use_cache:
            outputs = (hidden_states,) + outputs
        else:
            outputs = (hidden_states,) + outputs[1:]
        return outputs


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_dim = cfg.get("n_embd")
        self.wte = nn.Embedding(cfg.get("vocab_size"), self.embed_dim)
        self.wpe = nn.Embedding(cfg.get("n_positions"), self.embed_dim)
        self.drop = nn.Dropout(cfg.get("embd_pdrop", 0.1))
        self.h = nn.ModuleList(GPT2Block(cfg, i) for i in range(cfg.get("n_layer")))
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=cfg.get("layer_norm_epsilon", 1e-5))

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None,
                position_ids=None):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        batch_size = input_ids.shape[0]
        device = input_ids.device
        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.h))
        else:
            past_length = past_key_values[0][0].size(-2)
        if position_ids is None:
            position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long, device=device)
            position_ids = position_ids.unsqueeze(0)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds.to(inputs_embeds.device)
        # the eager path's mask (4.51): [B, 1, 1, L] in the model's dtype, 0 or finfo.min
        attention_mask = attention_mask.view(batch_size, -1) if attention_mask is not None else None
        if attention_mask is not None:
            dtype = self.wte.weight.dtype
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=dtype)
            attention_mask = (1.0 - attention_mask) * torch.finfo(dtype).min
        hidden_states = self.drop(hidden_states)
        output_shape = (-1,) + input_shape[1:] + (hidden_states.size(-1),)
        presents = () if use_cache else None
        for block, layer_past in zip(self.h, past_key_values):
            outputs = block(hidden_states, use_cache, layer_past, attention_mask)
            hidden_states = outputs[0]
            if use_cache is True:
                presents = presents + (outputs[1],)
        hidden_states = self.ln_f(hidden_states)
        hidden_states = hidden_states.view(output_shape)
        return hidden_states, presents


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg.get("n_embd"), cfg.get("vocab_size"), bias=False)
        self.use_cache = cfg.get("use_cache", True)
        if cfg.get("tie_word_embeddings", True):
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                use_cache=None):
        # no logits_to_keep in 4.51's GPT2LMHeadModel: every position's logits
        use_cache = self.use_cache if use_cache is None else use_cache
        hidden_states, presents = self.transformer(input_ids, use_cache, past_key_values,
                                                   attention_mask, position_ids)
        lm_logits = self.lm_head(hidden_states)
        return lm_logits, presents


# --------------------------------------------------------------------------
# BioGPT (modeling_biogpt.py 4.51: BART's attention, "Copied from", on the
# legacy past_key_value tuple; no Cache class, no logits_to_keep)
# --------------------------------------------------------------------------


class BioGptLearnedPositionalEmbedding(nn.Embedding):
    """Positions from the 2-D attention_mask's cumsum, offset 2."""

    def __init__(self, num_embeddings, embedding_dim):
        self.offset = 2
        super().__init__(num_embeddings + self.offset, embedding_dim)

    def forward(self, attention_mask, past_key_values_length=0):
        attention_mask = attention_mask.long()
        positions = (torch.cumsum(attention_mask, dim=1).type_as(attention_mask) * attention_mask).long() - 1
        positions = positions[:, past_key_values_length:]
        return super().forward(positions + self.offset)


class BioGptScaledWordEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, padding_idx, embed_scale=1.0):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale


class BioGptAttention(nn.Module):
    """BioGptAttention (4.51, BartAttention's copy), self-attention of a
    decoder: q_proj(x) * scaling; keys and values made contiguous by _shape
    and, with a past tuple, torch.cat onto it; (key, value) returned as the
    layer's present; bmm scores, + mask, softmax in the input's dtype."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_dim = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.dropout = cfg.get("attention_probs_dropout_prob", 0.1)
        self.head_dim = self.embed_dim // self.num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, past_key_value=None, attention_mask=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
        value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        past_key_value = (key_states, value_states)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)
        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        if attention_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + attention_mask
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights_reshaped = None  # output_attentions off
        attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.bmm(attn_probs, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)
        attn_output = self.out_proj(attn_output)
        return attn_output, attn_weights_reshaped, past_key_value


class BioGptDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, eps = cfg.get("hidden_size"), cfg.get("layer_norm_eps", 1e-12)
        self.self_attn = BioGptAttention(cfg)
        self.dropout = cfg.get("hidden_dropout_prob", 0.1)
        assert cfg.get("hidden_act", "gelu") == "gelu"
        self.activation_dropout = cfg.get("activation_dropout", 0.0)
        self.self_attn_layer_norm = nn.LayerNorm(E, eps=eps)
        self.fc1 = nn.Linear(E, cfg.get("intermediate_size"))
        self.fc2 = nn.Linear(cfg.get("intermediate_size"), E)
        self.final_layer_norm = nn.LayerNorm(E, eps=eps)

    def forward(self, hidden_states, attention_mask=None, past_key_value=None, use_cache=True):
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)
        self_attn_past_key_value = past_key_value[:2] if past_key_value is not None else None
        hidden_states, self_attn_weights, present_key_value = self.self_attn(
            hidden_states, self_attn_past_key_value, attention_mask)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.fc1(hidden_states)
        hidden_states = F.gelu(hidden_states)  # ACT2FN["gelu"]
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        hidden_states = self.fc2(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        outputs = (hidden_states,)
        if use_cache:
            outputs += (present_key_value,)
        return outputs


def _expand_mask(mask, dtype, tgt_len=None):
    """AttentionMaskConverter._expand_mask (4.51): [B, L] to [B, 1, q, L],
    1 where masked -> finfo.min."""
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def prepare_4d_causal_attention_mask(attention_mask, input_shape, inputs_embeds, past_key_values_length):
    """_prepare_4d_causal_attention_mask (4.51) with a 2-D mask:
    AttentionMaskConverter(is_causal=True).to_4d: a causal [B, 1, q, L] mask
    (_make_causal_mask: full((q, q), min), masked_fill_ of the lower triangle,
    zeros for the past, expanded) when q > 1, the expanded inverted 2-D mask,
    and their masked_fill."""
    dtype, device = inputs_embeds.dtype, inputs_embeds.device
    bsz, query_length = input_shape[0], input_shape[-1]
    key_value_length = query_length + past_key_values_length
    causal_4d_mask = None
    if query_length > 1:
        mask = torch.full((query_length, query_length), torch.finfo(dtype).min, device=device)
        mask_cond = torch.arange(mask.size(-1), device=device)
        mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
        mask = mask.to(dtype)
        if past_key_values_length > 0:
            mask = torch.cat([torch.zeros(query_length, past_key_values_length, dtype=dtype, device=device),
                              mask], dim=-1)
        causal_4d_mask = mask[None, None, :, :].expand(bsz, 1, query_length, key_value_length)
    expanded_attn_mask = _expand_mask(attention_mask, dtype, tgt_len=query_length)
    if causal_4d_mask is not None:
        expanded_attn_mask = causal_4d_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)
    return expanded_attn_mask


class BioGptModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        scale = math.sqrt(E) if cfg.get("scale_embedding", True) else 1.0
        self.dropout = cfg.get("hidden_dropout_prob", 0.1)
        self.embed_tokens = BioGptScaledWordEmbedding(cfg.get("vocab_size"), E, cfg.get("pad_token_id", 1),
                                                      embed_scale=scale)
        self.embed_positions = BioGptLearnedPositionalEmbedding(cfg.get("max_position_embeddings"), E)
        self.layers = nn.ModuleList(BioGptDecoderLayer(cfg) for _ in range(cfg.get("num_hidden_layers")))
        self.layer_norm = nn.LayerNorm(E, eps=cfg.get("layer_norm_eps", 1e-12))

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None):
        input_shape = input_ids.size()
        past_key_values_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        inputs_embeds = self.embed_tokens(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones((inputs_embeds.shape[0], inputs_embeds.shape[1] + past_key_values_length),
                                        dtype=torch.bool, device=inputs_embeds.device)
        positions = self.embed_positions(attention_mask, past_key_values_length)
        attention_mask = prepare_4d_causal_attention_mask(attention_mask, input_shape, inputs_embeds,
                                                          past_key_values_length)
        hidden_states = inputs_embeds + positions
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        next_decoder_cache = () if use_cache else None
        for idx, decoder_layer in enumerate(self.layers):
            past_key_value = past_key_values[idx] if past_key_values is not None else None
            layer_outputs = decoder_layer(hidden_states, attention_mask, past_key_value, use_cache)
            hidden_states = layer_outputs[0]
            if use_cache:
                next_decoder_cache += (layer_outputs[1],)
        hidden_states = self.layer_norm(hidden_states)
        return hidden_states, next_decoder_cache


class BioGptForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.biogpt = BioGptModel(cfg)
        self.output_projection = nn.Linear(cfg.get("hidden_size"), cfg.get("vocab_size"), bias=False)
        if cfg.get("tie_word_embeddings", True):
            self.output_projection.weight = self.biogpt.embed_tokens.weight
        self.use_cache = cfg.get("use_cache", True)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, use_cache=None):
        # no position_ids and no logits_to_keep in 4.51's BioGptForCausalLM
        use_cache = self.use_cache if use_cache is None else use_cache
        hidden_states, presents = self.biogpt(input_ids, use_cache, past_key_values, attention_mask)
        prediction_scores = self.output_projection(hidden_states)
        return prediction_scores, presents


def _gpt2_prepare_inputs(input_ids, past_key_values=None, attention_mask=None,
                         cache_position=None, takes_position_ids=True, **kwargs):
    """GenerationMixin.prepare_inputs_for_generation (4.46-4.51, the generic
    one GPT-2 and BioGPT use) for a model without Cache support: no
    cache_position among the inputs, the legacy tuple passed on as it is;
    position_ids made only for a forward that takes them (not BioGPT's)."""
    model_inputs = {}
    if past_key_values is not None:
        model_inputs["past_key_values"] = past_key_values
        # _cache_dependant_input_preparation
        if cache_position[-1] >= input_ids.shape[1]:  # exception 3 (not taken here)
            input_ids = input_ids[:, -cache_position.shape[0]:]
        elif input_ids.shape[1] != cache_position.shape[0]:
            input_ids = input_ids[:, cache_position]
    model_inputs["input_ids"] = input_ids.clone(memory_format=torch.contiguous_format)
    if attention_mask is not None and kwargs.get("position_ids") is None and takes_position_ids:
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        kwargs["position_ids"] = position_ids
    for name in ("position_ids", "token_type_ids"):
        model_input = kwargs.get(name)
        if model_input is not None:
            if past_key_values is not None:  # the prefill's are passed whole, uncloned
                model_input = model_input[:, -model_inputs["input_ids"].shape[1]:]
                model_input = model_input.clone(memory_format=torch.contiguous_format)
            model_inputs[name] = model_input
    if attention_mask is not None:
        model_inputs["attention_mask"] = attention_mask
    for key, value in kwargs.items():
        if key not in model_inputs:
            model_inputs[key] = value
    return model_inputs


# --------------------------------------------------------------------------
# Sampling (do_sample=True): transformers 4.51's logits warpers
# (generation/logits_process.py) in the order GenerationMixin._get_logits_processor
# appends them when generation_config.do_sample: TemperatureLogitsWarper (when
# temperature != 1.0), TopKLogitsWarper (top_k not None and != 0; the
# GenerationConfig default is 50), TopPLogitsWarper (top_p < 1.0); then _sample's
# softmax and torch.multinomial(probs, num_samples=1). min_tokens_to_keep is 1
# (num_beams 1). No other processor: no eos, no repetition penalty.
# --------------------------------------------------------------------------


def _temperature_warp(scores, temperature):
    """TemperatureLogitsWarper.__call__: scores / temperature (a new tensor)."""
    scores_processed = scores / temperature
    return scores_processed


def _top_k_warp(scores, top_k, filter_value=-float("inf")):
    """TopKLogitsWarper.__call__ (4.51): the k-th largest per row from
    torch.topk (values and indices [B, k]), a bool [B, V] of what is below it,
    and masked_fill's new [B, V]."""
    top_k = min(top_k, scores.size(-1))  # Safety check
    indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
    scores_processed = scores.masked_fill(indices_to_remove, filter_value)
    return scores_processed


def _top_p_warp(scores, top_p, min_tokens_to_keep=1, filter_value=-float("inf")):
    """TopPLogitsWarper.__call__ (4.51): an ascending sort (values [B, V] and
    int64 indices [B, V]), softmax then cumsum of the sorted values, the bool
    mask of the tail, scattered back to the vocabulary order (a new bool
    [B, V]), masked_fill's new [B, V]."""
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    # Remove tokens with cumulative top_p above the threshold (token with 0 are kept)
    sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
    # Keep at least min_tokens_to_keep
    sorted_indices_to_remove[..., -min_tokens_to_keep:] = 0
    # scatter sorted tensors to original indexing
    indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
    scores_processed = scores.masked_fill(indices_to_remove, filter_value)
    return scores_processed


def sampling_processors(top_k=50, top_p=1.0, temperature=1.0):
    """The warpers _get_logits_processor (4.51) builds for do_sample=True,
    num_beams 1, in its order (GenerationConfig defaults: top_k 50, top_p 1.0,
    temperature 1.0)."""
    procs = []
    if temperature is not None and temperature != 1.0:
        procs.append(lambda scores: _temperature_warp(scores, temperature))
    if top_k is not None and top_k != 0:
        procs.append(lambda scores: _top_k_warp(scores, top_k))
    if top_p is not None and top_p < 1.0:
        procs.append(lambda scores: _top_p_warp(scores, top_p))
    return procs


def _process_logits(input_ids, scores, processors):
    """LogitsProcessorList.__call__: each processor's result replaces the
    scores (the previous one freed, but not the caller's first tensor)."""
    for processor in processors:
        scores = processor(scores)
    return scores


@torch.no_grad()
def gpt2_greedy_generate(model, input_ids, max_new_tokens, phase=None, sampling=None):
    """model.generate(input_ids, max_new_tokens=N, do_sample=False) of
    transformers 4.51 for GPT2LMHeadModel (no pad/eos token): GPT-2 has no
    Cache class there (_supports_default_dynamic_cache() is False), so
    _prepare_cache_for_generation prepares nothing and the cache is the legacy
    tuple of (key, value) per layer that each forward returns. Each decode
    forward's layers torch.cat the new token onto the cached keys and values
    into new tensors, while model_kwargs and model_inputs still reference the
    previous tuple: it is released only when the next step's
    prepare_inputs_for_generation rebinds model_inputs (model_kwargs let it go
    in _update_model_kwargs_for_generation), so both caches are alive at the
    end of every decode forward. The prefill computes every position's logits
    (no logits_to_keep in 4.51's GPT-2); the eager forward turns generate's
    attention_mask into a [B, 1, 1, L] (1 - mask) * finfo.min tensor and adds
    it to every layer's scores. Phases as in greedy_generate.
    BioGptForCausalLM runs the same loop in 4.51 (no Cache class either): its
    forward takes no position_ids (its positions come from the mask's cumsum)
    and turns the mask into _expand_mask's [B, 1, 1, L]."""
    assert isinstance(model, (GPT2LMHeadModel, BioGptForCausalLM)), "the legacy tuple cache's models only"
    import inspect
    takes_position_ids = "position_ids" in inspect.signature(model.forward).parameters
    phase = phase or _NoPhase
    batch, prompt = input_ids.shape
    # generate(): _prepare_attention_mask_for_generation (no pad token): ones [B, P] int64
    model_kwargs = {"use_cache": True,
                    "attention_mask": torch.ones(input_ids.shape[:2], dtype=torch.long,
                                                 device=input_ids.device)}
    # _sample
    unfinished_sequences = torch.ones(batch, dtype=torch.long, device=input_ids.device)
    # _get_initial_cache_position
    model_kwargs["cache_position"] = torch.ones_like(input_ids[0, :], dtype=torch.int64).cumsum(0) - 1
    max_length = prompt + max_new_tokens
    step = 0
    model_inputs = None
    while True:
        with phase("prefill" if step == 0 else f"s{step}/decode"):
            # the previous step's dict (the cache before the previous forward) goes here
            model_inputs = _gpt2_prepare_inputs(input_ids, takes_position_ids=takes_position_ids,
                                                **model_kwargs)
            outputs = model(**model_inputs)
            # _update_model_kwargs_for_generation
            model_kwargs["past_key_values"] = outputs[1]
            attention_mask = model_kwargs["attention_mask"]
            model_kwargs["attention_mask"] = torch.cat(
                [attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
            del attention_mask
            model_kwargs["cache_position"] = model_kwargs["cache_position"][-1:] + 1
            next_token_logits = outputs[0][:, -1, :].to(copy=True, dtype=torch.float32)
            if sampling is None:
                next_token_scores = next_token_logits  # an empty LogitsProcessorList
                next_tokens = torch.argmax(next_token_scores, dim=-1)
            else:  # do_sample: the warpers, then softmax and multinomial
                next_token_scores = _process_logits(input_ids, next_token_logits, sampling)
                probs = F.softmax(next_token_scores, dim=-1)
                next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            # StoppingCriteriaList([MaxLengthCriteria]): full(False) | full(is_done)
            is_done = torch.full((batch,), False, dtype=torch.bool, device=input_ids.device)
            is_done = is_done | torch.full((batch,), input_ids.shape[-1] >= max_length,
                                           dtype=torch.bool, device=input_ids.device)
            unfinished_sequences = unfinished_sequences & ~is_done
            del is_done
            this_peer_finished = unfinished_sequences.max() == 0
            del outputs
        step += 1
        if this_peer_finished:
            break
    return input_ids


def generate_greedy(model, input_ids, max_new_tokens, phase=None):
    """model.generate(..., do_sample=False) as 4.51 runs it for the model's
    class: GPT-2's legacy tuple cache (no Cache class), Gemma 2/3's
    HybridCache (config cache_implementation "hybrid"), or greedy_generate's
    DynamicCache (every other class here; see the table in
    src/schedule/generate.c)."""
    if isinstance(model, (GPT2LMHeadModel, BioGptForCausalLM)):  # no Cache class in 4.51
        return gpt2_greedy_generate(model, input_ids, max_new_tokens, phase)
    if isinstance(model, T5ForConditionalGeneration):  # the encoder once, then the decoder
        return t5_greedy_generate(model, input_ids, max_new_tokens, phase,
                                  getattr(model, "decoder_start_token_id", 0))
    if isinstance(model, Gemma2ForCausalLM):  # config cache_implementation "hybrid"
        return hybrid_generate(model, input_ids, max_new_tokens, phase=phase or _NoPhase)
    return greedy_generate(model, input_ids, max_new_tokens, phase=phase or _NoPhase)


def generate(model, input_ids, max_new_tokens, phase=None, num_beams=1, sampling=None):
    """model.generate(input_ids, max_new_tokens=N, ...) as 4.51 runs it:
    beam search (num_beams > 1, do_sample=False: beam_generate), sampling
    (sampling = sampling_processors(...)'s warpers: _sample with
    do_sample=True in the class's loop) or greedy (generate_greedy)."""
    if num_beams > 1:
        assert sampling is None, "beam sampling (do_sample with num_beams > 1) is not modelled"
        return beam_generate(model, input_ids, max_new_tokens, num_beams, phase=phase or _NoPhase)
    if sampling is None:
        return generate_greedy(model, input_ids, max_new_tokens, phase)
    if isinstance(model, (GPT2LMHeadModel, BioGptForCausalLM)):
        return gpt2_greedy_generate(model, input_ids, max_new_tokens, phase, sampling=sampling)
    if isinstance(model, Gemma2ForCausalLM):
        return hybrid_generate(model, input_ids, max_new_tokens, phase=phase or _NoPhase,
                               sampling=sampling)
    assert not isinstance(model, T5ForConditionalGeneration), "T5 sampling: not re-implemented"
    return greedy_generate(model, input_ids, max_new_tokens, phase=phase or _NoPhase,
                           sampling=sampling)


# --------------------------------------------------------------------------
# Beam search: GenerationMixin._beam_search of transformers 4.51.3 (the
# vectorized beam search of PR #35802, 4.50; generation/utils.py), do_sample
# False, as generate() runs it for a config without eos or pad token
# (early_stopping False, length_penalty 1.0, num_return_sequences 1). Read in a
# copy of v4.51.3's _beam_search (an Intel latency hook "Copied from
# .../v4.51.3/src/transformers/generation/utils.py#L3751") and, for the static
# helpers (_flatten_beam_dim, _unflatten_beam_dim, _gather_beams,
# _get_top_k_continuations, _get_running_beams_for_next_iteration,
# _update_finished_beams), a later copy of the same methods whose tensor ops are
# the same. The cache is reordered after every step by
# _temporary_reorder_cache: DynamicCache.reorder_cache (per layer keys, then
# values, index_select'ed into new tensors that replace the old), or for the
# legacy tuple (GPT-2, BioGPT) the model's _reorder_cache, a whole new tuple
# built while the old one is still referenced.
# --------------------------------------------------------------------------


def _flatten_beam_dim(tensor):
    """[batch_size, num_beams, ...] -> [batch_size * num_beams, ...]"""
    shape = list(tensor.shape)
    return torch.reshape(tensor, [shape[0] * shape[1]] + shape[2:])


def _unflatten_beam_dim(tensor, batch_size, num_beams):
    """[batch_size * num_beams, ...] -> [batch_size, num_beams, ...]"""
    shape = list(tensor.shape)
    return torch.reshape(tensor, [batch_size, num_beams] + shape[1:])


def _gather_beams(tensor, beam_indices):
    """torch.take_along_dim of the beams' rows (dim 1): a new tensor."""
    while len(beam_indices.shape) < len(tensor.shape):
        beam_indices = beam_indices.unsqueeze(-1)
    gathered_tensor = torch.take_along_dim(input=tensor, indices=beam_indices, dim=1)
    return gathered_tensor


def _beam_search_has_unfinished_sequences(running_beam_scores, beam_scores, is_sent_finished,
                                          next_token_hits_stopping_criteria, cur_len, max_length,
                                          decoder_prompt_len, early_stopping, length_penalty):
    if early_stopping == "never" and length_penalty > 0.0:
        best_hypothetical_length = max_length - decoder_prompt_len
    else:
        best_hypothetical_length = cur_len - decoder_prompt_len
    best_possible_running_score = running_beam_scores[:, :1] / (best_hypothetical_length ** length_penalty)
    worst_finished_score = torch.where(is_sent_finished, torch.min(beam_scores, dim=1, keepdim=True)[0],
                                       -1.0e9)
    improvement_possible = torch.any(best_possible_running_score > worst_finished_score)
    exists_open_beam = ~(torch.all(is_sent_finished) & (early_stopping is True))
    valid_continuations = ~torch.all(next_token_hits_stopping_criteria)
    return improvement_possible & exists_open_beam & valid_continuations


def _get_top_k_continuations(accumulated_log_probs, running_sequences, running_beam_indices, cur_len,
                             decoder_prompt_len, beams_to_keep, num_beams, vocab_size, batch_size):
    topk_log_probs, topk_indices = torch.topk(accumulated_log_probs, k=beams_to_keep)
    # Gather K top beams, recover the beam index by floor division and token id by modulo division
    topk_current_beam_indices = topk_indices // vocab_size
    topk_running_beam_indices = _gather_beams(running_beam_indices, topk_current_beam_indices)
    topk_running_sequences = _gather_beams(running_sequences, topk_current_beam_indices)
    topk_ids = topk_indices % vocab_size
    # Update sequences for the top-K beams
    topk_running_sequences[:, :, cur_len] = topk_ids
    # we want to store the beam indices with batch information -> real beam index = beam index % num beams
    batch_offset = torch.arange(batch_size, device=topk_ids.device).view(-1, 1) * num_beams
    batch_modified_indices = topk_current_beam_indices + batch_offset
    topk_running_beam_indices[:, :, cur_len - decoder_prompt_len] = batch_modified_indices
    return topk_log_probs, topk_running_sequences, topk_running_beam_indices


def _get_running_beams_for_next_iteration(topk_log_probs, topk_running_sequences,
                                          topk_running_beam_indices,
                                          next_token_hits_stopping_criteria, num_beams):
    topk_running_log_probs = topk_log_probs + next_token_hits_stopping_criteria.to(torch.float32) * -1.0e9
    next_topk_indices = torch.topk(topk_running_log_probs, k=num_beams)[1]
    running_sequences = _gather_beams(topk_running_sequences, next_topk_indices)
    running_beam_scores = _gather_beams(topk_running_log_probs, next_topk_indices)
    running_beam_indices = _gather_beams(topk_running_beam_indices, next_topk_indices)
    return running_sequences, running_beam_scores, running_beam_indices


def _update_finished_beams(sequences, topk_running_sequences, beam_scores, topk_log_probs, beam_indices,
                           topk_running_beam_indices, is_sent_finished, next_token_hits_stopping_criteria,
                           top_num_beam_mask, num_beams, cur_len, decoder_prompt_len, length_penalty,
                           early_stopping):
    did_top_num_beams_just_finished = next_token_hits_stopping_criteria & top_num_beam_mask[None, :]
    topk_log_probs = topk_log_probs / ((cur_len + 1 - decoder_prompt_len) ** length_penalty)
    beams_in_batch_are_full = torch.all(is_sent_finished, axis=-1, keepdims=True) & (early_stopping is True)
    topk_log_probs += beams_in_batch_are_full.to(torch.float32) * -1.0e9
    topk_log_probs += (~did_top_num_beams_just_finished) * -1.0e9
    merged_sequences = torch.cat((sequences, topk_running_sequences), dim=1)
    merged_scores = torch.cat((beam_scores, topk_log_probs), dim=1)
    merged_beam_indices = torch.cat((beam_indices, topk_running_beam_indices), dim=1)
    merged_is_sent_finished = torch.cat((is_sent_finished, did_top_num_beams_just_finished), dim=1)
    topk_merged_indices = torch.topk(merged_scores, k=num_beams)[1]
    sequences = _gather_beams(merged_sequences, topk_merged_indices)
    beam_scores = _gather_beams(merged_scores, topk_merged_indices)
    beam_indices = _gather_beams(merged_beam_indices, topk_merged_indices)
    is_sent_finished = _gather_beams(merged_is_sent_finished, topk_merged_indices)
    return sequences, beam_scores, beam_indices, is_sent_finished


def _reorder_legacy(past_key_values, beam_idx):
    """GPT2LMHeadModel._reorder_cache / BioGptForCausalLM._reorder_cache
    (4.51): a new tuple of every layer's index_select'ed keys and values."""
    return tuple(
        tuple(past_state.index_select(0, beam_idx.to(past_state.device)) for past_state in layer_past)
        for layer_past in past_key_values
    )


@torch.no_grad()
def beam_generate(model, input_ids, max_new_tokens, num_beams, phase=None):
    """model.generate(input_ids, max_new_tokens=N, num_beams=K, do_sample=False)
    of transformers 4.51.3 for the DynamicCache classes (greedy_generate's) and
    the legacy tuple ones (GPT-2, BioGPT): generate() makes attention_mask
    ones [B, P], _expand_inputs_for_generation repeat_interleaves input_ids
    and then the mask to [B*K, P] (the caller's prompt stays held), then
    _beam_search: its static-shaped running_sequences / sequences [B, K,
    P + N] int64 and running_beam_indices / beam_indices [B, K, N] int32, and
    per step the forward of the B*K running sequences, logits[:, -1, :] copied
    to float32 [B*K, V], log_softmax, + the running beam scores ([B, K*V]),
    top-2K, the gathers of the candidates' sequences, the running and finished
    beams chosen, and the cache reordered by the chosen beams' indices (after
    the last forward too). No eos: every beam runs N forwards."""
    assert not isinstance(model, (Gemma2ForCausalLM, T5ForConditionalGeneration)), \
        "beam search: DynamicCache and legacy tuple classes only"
    import inspect
    phase = phase or _NoPhase
    legacy = isinstance(model, (GPT2LMHeadModel, BioGptForCausalLM))
    params = inspect.signature(model.forward).parameters
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    batch, prompt = input_ids.shape
    vocab = None  # config.get_text_config().vocab_size: the logits' last dim here
    # generate(): _prepare_attention_mask_for_generation (no pad token): ones [B, P] int64
    attention_mask = torch.ones(input_ids.shape[:2], dtype=torch.long, device=input_ids.device)
    cache = None if legacy else DynamicCache()  # _prepare_cache_for_generation
    # _expand_inputs_for_generation(expand_size=num_beams): input_ids, then model_kwargs' tensors
    input_ids = input_ids.repeat_interleave(num_beams, dim=0)
    attention_mask = attention_mask.repeat_interleave(num_beams, dim=0)
    # _beam_search: 1. init values (no eos token: beams_to_keep = max(2, 1 + 0) * num_beams)
    early_stopping, length_penalty = False, 1.0
    max_length = prompt + max_new_tokens
    cur_len = prompt
    decoder_prompt_len = cur_len
    beams_to_keep = max(2, 1 + 0) * num_beams
    top_num_beam_mask = torch.cat(
        (torch.ones((num_beams), dtype=torch.bool), torch.zeros((beams_to_keep - num_beams), dtype=torch.bool)),
        dim=0,
    ).to(input_ids.device)
    # _get_initial_cache_position
    cache_position = torch.ones_like(input_ids[0, :], dtype=torch.int64).cumsum(0) - 1
    if cache is not None:
        cache_position = cache_position[cache.get_seq_length():]
    # 3. running tensors and static-shaped placeholders (output_fill_value -1: no pad, no eos)
    running_sequences = torch.full((batch, num_beams, max_length), fill_value=-1, dtype=torch.int64,
                                   device=input_ids.device)
    running_sequences[:, :, :cur_len] = _unflatten_beam_dim(input_ids, batch, num_beams)
    sequences = running_sequences.detach().clone()
    running_beam_scores = torch.zeros((batch, num_beams), dtype=torch.float, device=input_ids.device)
    running_beam_scores[:, 1:] = -1e9
    beam_scores = torch.full((batch, num_beams), fill_value=-1e9, dtype=torch.float, device=input_ids.device)
    is_sent_finished = torch.zeros((batch, num_beams), dtype=torch.bool, device=input_ids.device)
    next_token_hits_stopping_criteria = torch.zeros((batch, num_beams), dtype=torch.bool,
                                                    device=input_ids.device)
    running_beam_indices = torch.full((batch, num_beams, max_length - cur_len), fill_value=-1,
                                      dtype=torch.int32, device=input_ids.device)
    beam_indices = running_beam_indices.detach().clone()
    model_kwargs = {"use_cache": True, "attention_mask": attention_mask, "cache_position": cache_position}
    del attention_mask, cache_position
    if cache is not None:
        model_kwargs["past_key_values"] = cache
    takes_position_ids = "position_ids" in params
    step = 0
    model_inputs = None
    this_peer_finished = False
    while not this_peer_finished:
        with phase("prefill" if step == 0 else f"s{step}/decode"):
            # a. Forward current tokens, obtain the logits
            flat_running_sequences = _flatten_beam_dim(running_sequences[:, :, :cur_len])
            if legacy:
                model_inputs = _gpt2_prepare_inputs(flat_running_sequences,
                                                    takes_position_ids=takes_position_ids, **model_kwargs)
                model_outputs = model(**model_inputs)
            else:  # greedy_generate's prepare_inputs_for_generation
                cp = model_kwargs["cache_position"]
                am = model_kwargs["attention_mask"]
                ids = flat_running_sequences if flat_running_sequences.shape[1] == cp.shape[0] else \
                    flat_running_sequences[:, cp]
                ids = ids.clone(memory_format=torch.contiguous_format)
                position_ids = am.long().cumsum(-1) - 1
                position_ids.masked_fill_(am == 0, 1)
                position_ids = position_ids[:, -ids.shape[1]:].clone(memory_format=torch.contiguous_format)
                model_inputs = dict(input_ids=ids, past_key_values=cache, attention_mask=am,
                                    position_ids=position_ids, cache_position=cp, **keep)
                del ids, position_ids, cp, am
                model_outputs = model(**model_inputs)
            # _update_model_kwargs_for_generation (a Cache class: the same DynamicCache)
            if legacy:
                model_kwargs["past_key_values"] = model_outputs[1]
            am = model_kwargs["attention_mask"]
            model_kwargs["attention_mask"] = torch.cat([am, am.new_ones((am.shape[0], 1))], dim=-1)
            del am
            model_kwargs["cache_position"] = model_kwargs["cache_position"][-1:] + 1
            # Copy is needed to avoid keeping a hanging ref
            logits = model_outputs[0][:, -1, :].to(copy=True, dtype=torch.float32)
            if vocab is None:
                vocab = logits.shape[-1]
            # b. log probs (an empty LogitsProcessorList returns them as they are)
            log_probs = F.log_softmax(logits, dim=-1)
            del model_outputs
            log_probs = _unflatten_beam_dim(log_probs, batch, num_beams)
            log_probs = log_probs + running_beam_scores[:, :, None]
            log_probs = torch.reshape(log_probs, (batch, num_beams * vocab))
            # c. top-K continuations
            topk_log_probs, topk_running_sequences, topk_running_beam_indices = _get_top_k_continuations(
                log_probs, running_sequences, running_beam_indices, cur_len, decoder_prompt_len,
                beams_to_keep, num_beams, vocab, batch)
            # d. StoppingCriteriaList([MaxLengthCriteria]) of the candidates
            flat = _flatten_beam_dim(topk_running_sequences[:, :, :cur_len + 1])
            is_done = torch.full((flat.shape[0],), False, device=flat.device, dtype=torch.bool)
            is_done = is_done | torch.full((flat.shape[0],), flat.shape[-1] >= max_length,
                                           device=flat.device, dtype=torch.bool)
            del flat
            next_token_hits_stopping_criteria = _unflatten_beam_dim(is_done, batch, beams_to_keep)
            del is_done
            # e. the running beams of the next step
            running_sequences, running_beam_scores, running_beam_indices = _get_running_beams_for_next_iteration(
                topk_log_probs, topk_running_sequences, topk_running_beam_indices,
                next_token_hits_stopping_criteria, num_beams)
            # f. the finished beams
            sequences, beam_scores, beam_indices, is_sent_finished = _update_finished_beams(
                sequences, topk_running_sequences, beam_scores, topk_log_probs, beam_indices,
                topk_running_beam_indices, is_sent_finished, next_token_hits_stopping_criteria,
                top_num_beam_mask, num_beams, cur_len, decoder_prompt_len, length_penalty, early_stopping)
            # g. pluck the cache from the beam indices used in the next iteration
            if model_kwargs.get("past_key_values", None) is not None:
                beam_idx = _flatten_beam_dim(running_beam_indices[..., cur_len - decoder_prompt_len])
                if legacy:
                    model_kwargs["past_key_values"] = _reorder_legacy(model_kwargs["past_key_values"],
                                                                      beam_idx)
                else:
                    model_kwargs["past_key_values"].reorder_cache(beam_idx)
                del beam_idx
            cur_len = cur_len + 1
            this_peer_finished = not _beam_search_has_unfinished_sequences(
                running_beam_scores, beam_scores, is_sent_finished, next_token_hits_stopping_criteria,
                cur_len, max_length, decoder_prompt_len, early_stopping, length_penalty)
        step += 1
    # 5. prepare outputs (num_return_sequences 1): views of the finished beams
    sequences = _flatten_beam_dim(sequences[:, :1, :])
    beam_scores = _flatten_beam_dim(beam_scores[:, :1])
    beam_indices = _flatten_beam_dim(beam_indices[:, :1, :])
    max_generated_length = ((beam_indices + 1).bool()).sum(dim=1).max()
    output_length = decoder_prompt_len + max_generated_length
    sequences = sequences[:, :output_length]
    return sequences


# --------------------------------------------------------------------------
# T5 / mT5 (modeling_t5.py, transformers 4.46-4.51: EncoderDecoderCache era)
# --------------------------------------------------------------------------


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


def _t5_act(name):
    if name == "relu":
        return nn.ReLU()
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_new":
        return NewGELUActivation()
    if name in ("silu", "swish"):
        return nn.SiLU()
    raise ValueError(name)


class T5Cfg:
    """T5Config / MT5Config with their defaults; feed_forward_proj parsed as
    T5Config.__init__ does ("gated-gelu" -> gelu_new)."""

    def __init__(self, cfg, is_decoder):
        mt5 = cfg.model_type == "mt5"
        self.vocab_size = cfg.get("vocab_size")
        self.d_model = cfg.get("d_model", 512)
        self.d_kv = cfg.get("d_kv", 64)
        self.d_ff = cfg.get("d_ff", 1024 if mt5 else 2048)
        self.num_layers = cfg.get("num_layers", 8 if mt5 else 6)
        self.num_decoder_layers = cfg.get("num_decoder_layers", self.num_layers)
        self.num_heads = cfg.get("num_heads", 6 if mt5 else 8)
        self.relative_attention_num_buckets = cfg.get("relative_attention_num_buckets", 32)
        self.relative_attention_max_distance = cfg.get("relative_attention_max_distance", 128)
        self.dropout_rate = cfg.get("dropout_rate", 0.1)
        self.layer_norm_epsilon = cfg.get("layer_norm_epsilon", 1e-6)
        ffp = cfg.get("feed_forward_proj", "gated-gelu" if mt5 else "relu")
        parts = ffp.split("-")
        self.dense_act_fn = parts[-1]
        self.is_gated_act = parts[0] == "gated"
        if ffp == "gated-gelu":
            self.dense_act_fn = "gelu_new"
        self.tie_word_embeddings = cfg.get("tie_word_embeddings", not mt5)
        self.use_cache = cfg.get("use_cache", True)
        self.is_decoder = is_decoder


class T5DenseActDense(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.wo = nn.Linear(c.d_ff, c.d_model, bias=False)
        self.dropout = nn.Dropout(c.dropout_rate)
        self.act = _t5_act(c.dense_act_fn)

    def forward(self, hidden_states):
        hidden_states = self.wi(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.dropout(hidden_states)
        if hidden_states.dtype != self.wo.weight.dtype and self.wo.weight.dtype != torch.int8:
            hidden_states = hidden_states.to(self.wo.weight.dtype)
        return self.wo(hidden_states)


class T5DenseGatedActDense(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi_0 = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.wi_1 = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.wo = nn.Linear(c.d_ff, c.d_model, bias=False)
        self.dropout = nn.Dropout(c.dropout_rate)
        self.act = _t5_act(c.dense_act_fn)

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        hidden_states = hidden_gelu * hidden_linear
        hidden_states = self.dropout(hidden_states)
        if hidden_states.dtype != self.wo.weight.dtype and self.wo.weight.dtype != torch.int8:
            hidden_states = hidden_states.to(self.wo.weight.dtype)
        return self.wo(hidden_states)


class T5LayerFF(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.DenseReluDense = T5DenseGatedActDense(c) if c.is_gated_act else T5DenseActDense(c)
        self.layer_norm = T5LayerNorm(c.d_model, eps=c.layer_norm_epsilon)
        self.dropout = nn.Dropout(c.dropout_rate)

    def forward(self, hidden_states):
        forwarded_states = self.layer_norm(hidden_states)
        forwarded_states = self.DenseReluDense(forwarded_states)
        return hidden_states + self.dropout(forwarded_states)


class T5GenCache:
    """cache_utils.EncoderDecoderCache(DynamicCache(), DynamicCache()) as
    4.51's generate() makes it for T5 (_prepare_cache_for_generation: the
    config is_encoder_decoder, so requires_cross_attention_cache) and
    T5Attention (4.51) uses it: the self-attention DynamicCache.update
    torch.cats each new token onto the layer's keys, then values (the old
    tensors freed as the list slots are rebound); the cross-attention cache
    is filled at the first decoder forward with the k/v projections of the
    encoder's output (is_updated[layer] then True) and read back after."""

    def __init__(self):
        self.self_kv, self.cross, self.is_updated = [], [], {}

    def get_seq_length(self):
        return self.self_kv[0][0].shape[-2] if self.self_kv else 0

    def update(self, key_states, value_states, layer_idx, is_cross_attention):
        if is_cross_attention:
            self.cross.append((key_states, value_states))
            self.is_updated[layer_idx] = True
            return key_states, value_states
        if len(self.self_kv) <= layer_idx:
            self.self_kv.append([key_states, value_states])
        else:
            kv = self.self_kv[layer_idx]
            kv[0] = torch.cat([kv[0], key_states], dim=-2)
            kv[1] = torch.cat([kv[1], value_states], dim=-2)
        return self.self_kv[layer_idx][0], self.self_kv[layer_idx][1]


class T5Attention(nn.Module):
    def __init__(self, c, has_relative_attention_bias=False, layer_idx=None):
        super().__init__()
        self.is_decoder = c.is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = c.relative_attention_num_buckets
        self.relative_attention_max_distance = c.relative_attention_max_distance
        self.d_model = c.d_model
        self.key_value_proj_dim = c.d_kv
        self.n_heads = c.num_heads
        self.dropout = c.dropout_rate
        self.inner_dim = self.n_heads * self.key_value_proj_dim
        self.layer_idx = layer_idx
        self.q = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, self.d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, device=None, cache_position=None):
        if device is None:
            device = self.relative_attention_bias.weight.device
        if cache_position is None:
            context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        else:
            context_position = cache_position[:, None].to(device)
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=(not self.is_decoder),
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)
        values = values.permute([2, 0, 1]).unsqueeze(0)
        return values

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None,
                past_key_value=None, query_length=None, cache_position=None):
        batch_size, seq_length = hidden_states.shape[:2]
        is_cross_attention = key_value_states is not None
        query_states = self.q(hidden_states)
        query_states = query_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        current_states = key_value_states if is_cross_attention else hidden_states
        if not isinstance(past_key_value, T5GenCache):
            key_states = self.k(current_states)
            value_states = self.v(current_states)
            key_states = key_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
            value_states = value_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        if isinstance(past_key_value, T5GenCache):
            if is_cross_attention and past_key_value.is_updated.get(self.layer_idx):
                key_states, value_states = past_key_value.cross[self.layer_idx]
            else:
                key_states = self.k(current_states)
                value_states = self.v(current_states)
                key_states = key_states.view(batch_size, -1, self.n_heads,
                                             self.key_value_proj_dim).transpose(1, 2)
                value_states = value_states.view(batch_size, -1, self.n_heads,
                                                 self.key_value_proj_dim).transpose(1, 2)
                key_states, value_states = past_key_value.update(
                    key_states, value_states, self.layer_idx, is_cross_attention)
        elif past_key_value is not None:
            # EncoderDecoderCache: DynamicCache.update of an empty layer keeps and
            # returns the tensors themselves
            (past_key_value[1] if is_cross_attention else past_key_value[0]).append(
                (key_states, value_states))

        scores = torch.matmul(query_states, key_states.transpose(3, 2))

        if position_bias is None:
            key_length = key_states.shape[-2]
            real_seq_length = query_length if query_length is not None else cache_position[-1] + 1
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros(
                    (1, self.n_heads, seq_length, key_length), device=scores.device, dtype=scores.dtype)
            else:
                position_bias = self.compute_bias(
                    real_seq_length, key_length, device=scores.device, cache_position=cache_position)
                position_bias = position_bias[:, :, -seq_length:, :]
            if mask is not None:
                causal_mask = mask[:, :, :, : key_states.shape[-2]]
                position_bias = position_bias + causal_mask

        position_bias_masked = position_bias
        scores += position_bias_masked
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_weights = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.view(batch_size, -1, self.inner_dim)
        attn_output = self.o(attn_output)
        return (attn_output, past_key_value, position_bias)


class T5LayerSelfAttention(nn.Module):
    def __init__(self, c, has_relative_attention_bias=False, layer_idx=None):
        super().__init__()
        self.SelfAttention = T5Attention(c, has_relative_attention_bias, layer_idx)
        self.layer_norm = T5LayerNorm(c.d_model, eps=c.layer_norm_epsilon)
        self.dropout = nn.Dropout(c.dropout_rate)

    def forward(self, hidden_states, attention_mask=None, position_bias=None, past_key_value=None,
                cache_position=None):
        normed_hidden_states = self.layer_norm(hidden_states)
        attention_output = self.SelfAttention(
            normed_hidden_states, mask=attention_mask, position_bias=position_bias,
            past_key_value=past_key_value, cache_position=cache_position)
        hidden_states = hidden_states + self.dropout(attention_output[0])
        return (hidden_states,) + attention_output[1:]


class T5LayerCrossAttention(nn.Module):
    def __init__(self, c, layer_idx=None):
        super().__init__()
        self.EncDecAttention = T5Attention(c, has_relative_attention_bias=False, layer_idx=layer_idx)
        self.layer_norm = T5LayerNorm(c.d_model, eps=c.layer_norm_epsilon)
        self.dropout = nn.Dropout(c.dropout_rate)

    def forward(self, hidden_states, key_value_states, attention_mask=None, position_bias=None,
                past_key_value=None, query_length=None, cache_position=None):
        normed_hidden_states = self.layer_norm(hidden_states)
        attention_output = self.EncDecAttention(
            normed_hidden_states, mask=attention_mask, key_value_states=key_value_states,
            position_bias=position_bias, past_key_value=past_key_value, query_length=query_length,
            cache_position=cache_position)
        layer_output = hidden_states + self.dropout(attention_output[0])
        return (layer_output,) + attention_output[1:]


class T5Block(nn.Module):
    def __init__(self, c, has_relative_attention_bias=False, layer_idx=None):
        super().__init__()
        self.is_decoder = c.is_decoder
        self.layer = nn.ModuleList()
        self.layer.append(T5LayerSelfAttention(c, has_relative_attention_bias, layer_idx))
        if self.is_decoder:
            self.layer.append(T5LayerCrossAttention(c, layer_idx))
        self.layer.append(T5LayerFF(c))

    def forward(self, hidden_states, attention_mask=None, position_bias=None,
                encoder_hidden_states=None, encoder_attention_mask=None,
                encoder_decoder_position_bias=None, past_key_value=None, use_cache=False,
                cache_position=None):
        self_attention_outputs = self.layer[0](
            hidden_states, attention_mask=attention_mask, position_bias=position_bias,
            past_key_value=past_key_value, cache_position=cache_position)
        hidden_states, past_key_value = self_attention_outputs[:2]
        attention_outputs = self_attention_outputs[2:]
        do_cross_attention = self.is_decoder and encoder_hidden_states is not None
        if do_cross_attention:
            cross_attention_outputs = self.layer[1](
                hidden_states, key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask, position_bias=encoder_decoder_position_bias,
                past_key_value=past_key_value, query_length=cache_position[-1] + 1)
            hidden_states, past_key_value = cross_attention_outputs[:2]
            attention_outputs = attention_outputs + cross_attention_outputs[2:]
        hidden_states = self.layer[-1](hidden_states)
        outputs = (hidden_states,)
        if use_cache:
            outputs = outputs + (past_key_value,) + attention_outputs
        else:
            outputs = outputs + attention_outputs
        return outputs


def invert_attention_mask(encoder_attention_mask, dtype):
    """ModuleUtilsMixin.invert_attention_mask of a 2-D mask."""
    encoder_extended_attention_mask = encoder_attention_mask[:, None, None, :]
    encoder_extended_attention_mask = encoder_extended_attention_mask.to(dtype=dtype)
    return (1.0 - encoder_extended_attention_mask) * torch.finfo(dtype).min


class T5Stack(nn.Module):
    def __init__(self, c, embed_tokens):
        super().__init__()
        self.c = c
        self.embed_tokens = embed_tokens
        self.is_decoder = c.is_decoder
        n = c.num_decoder_layers if c.is_decoder else c.num_layers
        self.block = nn.ModuleList(
            [T5Block(c, has_relative_attention_bias=bool(i == 0), layer_idx=i) for i in range(n)])
        self.final_layer_norm = T5LayerNorm(c.d_model, eps=c.layer_norm_epsilon)
        self.dropout = nn.Dropout(c.dropout_rate)

    def _causal_mask(self, attention_mask, input_tensor, cache_position):
        """_update_causal_mask (eager) with
        _prepare_4d_causal_attention_mask_with_cache_position, a 2-D mask."""
        dtype, device = input_tensor.dtype, input_tensor.device
        sequence_length = input_tensor.shape[1]
        target_length = attention_mask.shape[-1]
        batch_size = input_tensor.shape[0]
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype,
                                 device=device)
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
        causal_mask = causal_mask.clone()
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :].to(causal_mask.device)
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(
            padding_mask, min_dtype)
        return causal_mask

    def forward(self, input_ids, encoder_hidden_states=None, use_cache=False, attention_mask=None,
                encoder_attention_mask=None, past_key_values=None, cache_position=None):
        """past_key_values: a T5GenCache (generate()'s), or None (a fresh cache
        when the decoder has use_cache); attention_mask and
        encoder_attention_mask: generate()'s [B, P] int64 mask, or None (ones)."""
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_length = input_shape
        if past_key_values is None:
            past_key_values = ([], []) if (self.is_decoder and use_cache) else None
            past_key_values_length = 0
        else:
            past_key_values_length = past_key_values.get_seq_length()
        if cache_position is None:
            cache_position = torch.arange(past_key_values_length, past_key_values_length + seq_length,
                                          device=inputs_embeds.device)
        if attention_mask is None:
            mask_seq_length = past_key_values_length + seq_length
            attention_mask = torch.ones(batch_size, mask_seq_length, device=inputs_embeds.device)
        if self.is_decoder:
            causal_mask = self._causal_mask(attention_mask, inputs_embeds, cache_position)
        else:
            causal_mask = attention_mask[:, None, None, :]
            causal_mask = causal_mask.to(dtype=inputs_embeds.dtype)
            causal_mask = (1.0 - causal_mask) * torch.finfo(inputs_embeds.dtype).min
        if self.is_decoder and encoder_hidden_states is not None:
            encoder_batch_size, encoder_sequence_length, _ = encoder_hidden_states.size()
            if encoder_attention_mask is None:
                encoder_attention_mask = torch.ones((encoder_batch_size, encoder_sequence_length),
                                                    device=inputs_embeds.device, dtype=torch.long)
            encoder_extended_attention_mask = invert_attention_mask(encoder_attention_mask,
                                                                    inputs_embeds.dtype)
        else:
            encoder_extended_attention_mask = None
        position_bias = None
        encoder_decoder_position_bias = None
        hidden_states = self.dropout(inputs_embeds)
        for layer_module in self.block:
            layer_outputs = layer_module(
                hidden_states, attention_mask=causal_mask, position_bias=position_bias,
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_extended_attention_mask,
                encoder_decoder_position_bias=encoder_decoder_position_bias,
                past_key_value=past_key_values, use_cache=use_cache, cache_position=cache_position)
            if use_cache is False:
                layer_outputs = layer_outputs[:1] + (None,) + layer_outputs[1:]
            hidden_states, next_decoder_cache = layer_outputs[:2]
            position_bias = layer_outputs[2]
            if self.is_decoder and encoder_hidden_states is not None:
                encoder_decoder_position_bias = layer_outputs[3]
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.dropout(hidden_states)
        next_cache = None
        if isinstance(past_key_values, T5GenCache):  # the Cache object passed in
            next_cache = past_key_values
        elif use_cache:  # to_legacy_cache(): per layer (self k, self v, cross k, cross v)
            next_cache = tuple(s + x for s, x in zip(past_key_values[0], past_key_values[1]))
        return hidden_states, next_cache


class T5ForConditionalGeneration(nn.Module):
    """Called as model(input_ids, decoder_input_ids) with decoder_input_ids =
    _shift_right(labels) made by the caller; returns (logits, past_key_values
    or None, encoder_last_hidden_state) as Seq2SeqLMOutput holds them."""

    def __init__(self, cfg):
        super().__init__()
        enc = T5Cfg(cfg, False)
        dec = T5Cfg(cfg, True)
        self.c = enc
        self.model_dim = enc.d_model
        self.decoder_start_token_id = cfg.get("decoder_start_token_id", 0)
        self.shared = nn.Embedding(enc.vocab_size, enc.d_model)
        self.encoder = T5Stack(enc, self.shared)
        self.decoder = T5Stack(dec, self.shared)
        self.lm_head = nn.Linear(enc.d_model, enc.vocab_size, bias=False)
        if enc.tie_word_embeddings:
            self.lm_head.weight = self.shared.weight

    def forward(self, input_ids, decoder_input_ids):
        use_cache = self.c.use_cache
        encoder_outputs = self.encoder(input_ids)  # encoder_config.use_cache = False
        hidden_states = encoder_outputs[0]
        decoder_outputs = self.decoder(decoder_input_ids, encoder_hidden_states=hidden_states,
                                       use_cache=use_cache)
        sequence_output = decoder_outputs[0]
        if self.c.tie_word_embeddings:
            sequence_output = sequence_output * (self.model_dim ** -0.5)
        lm_logits = self.lm_head(sequence_output)
        return lm_logits, decoder_outputs[1], hidden_states

    def decoder_forward(self, decoder_input_ids, encoder_hidden_states, attention_mask, cache,
                        cache_position):
        """T5ForConditionalGeneration.forward(decoder_input_ids, encoder_outputs=...,
        attention_mask, past_key_values, cache_position) as generate() calls it
        (4.51): the encoder is skipped, its mask is the decoder's
        encoder_attention_mask; the lm_head computes every decoder position's
        logits (no logits_to_keep in 4.51's T5)."""
        decoder_outputs = self.decoder(decoder_input_ids, encoder_hidden_states=encoder_hidden_states,
                                       use_cache=True, encoder_attention_mask=attention_mask,
                                       past_key_values=cache, cache_position=cache_position)
        sequence_output = decoder_outputs[0]
        if self.c.tie_word_embeddings:
            sequence_output = sequence_output * (self.model_dim ** -0.5)
        lm_logits = self.lm_head(sequence_output)
        return lm_logits, decoder_outputs[1], encoder_hidden_states


@torch.no_grad()
def t5_greedy_generate(model, input_ids, max_new_tokens, phase=None, decoder_start_token_id=0):
    """model.generate(input_ids, max_new_tokens=N, do_sample=False) of
    transformers 4.51 for T5ForConditionalGeneration (generation/utils.py):
    _prepare_attention_mask_for_generation's [B, P] int64 mask (ones: the
    values do not change the memory), _prepare_encoder_decoder_kwargs_for_
    generation runs the encoder once (its last_hidden_state kept in
    model_kwargs["encoder_outputs"] to the end), _prepare_decoder_input_ids_
    for_generation makes decoder_input_ids [B, 1] of decoder_start_token_id,
    _prepare_cache_for_generation an EncoderDecoderCache of two DynamicCaches
    (T5GenCache); then _sample: N decoder forwards (the first, phase
    "prefill", fills the cross-attention cache from the encoder output; each
    later one, "s<k>/decode", feeds one token and torch.cats it onto every
    layer's self-attention keys and values), each followed by the float32
    copy of the last position's logits, argmax and the torch.cat growing
    decoder_input_ids. The encoder runs in phase "encoder". No eos stop: the
    loop runs N forwards (as generate does when no sequence emits eos)."""
    phase = phase or _NoPhase
    batch = input_ids.shape[0]
    with phase("encoder"):
        attention_mask = torch.ones(input_ids.shape[:2], dtype=torch.long, device=input_ids.device)
        encoder_outputs = (model.encoder(input_ids, attention_mask=attention_mask)[0],)
        decoder_input_ids = torch.ones((batch, 1), dtype=torch.long,
                                       device=input_ids.device) * decoder_start_token_id
        cache = T5GenCache()
        unfinished_sequences = torch.ones(batch, dtype=torch.long, device=input_ids.device)
        # _get_initial_cache_position of the decoder_input_ids
        cache_position = torch.ones_like(decoder_input_ids[0, :], dtype=torch.int64).cumsum(0) - 1
    max_length = 1 + max_new_tokens
    step = 0
    while True:
        with phase("prefill" if step == 0 else f"s{step}/decode"):
            # prepare_inputs_for_generation: the uncached decoder tokens, cloned
            ids = decoder_input_ids if decoder_input_ids.shape[1] == cache_position.shape[0] else \
                decoder_input_ids[:, cache_position]
            ids = ids.clone(memory_format=torch.contiguous_format)
            outputs = model.decoder_forward(ids, encoder_outputs[0], attention_mask, cache,
                                            cache_position)
            # _update_model_kwargs_for_generation
            cache_position = cache_position[-1:] + 1
            next_token_logits = outputs[0][:, -1, :].to(copy=True, dtype=torch.float32)
            next_token_scores = next_token_logits  # an empty LogitsProcessorList
            next_tokens = torch.argmax(next_token_scores, dim=-1)
            decoder_input_ids = torch.cat([decoder_input_ids, next_tokens[:, None]], dim=-1)
            done = torch.full((batch,), decoder_input_ids.shape[-1] >= max_length, dtype=torch.bool)
            unfinished_sequences = unfinished_sequences & ~done
            this_peer_finished = unfinished_sequences.max() == 0
            del outputs
        step += 1
        if this_peer_finished:
            break
    return decoder_input_ids


def t5_shift_right(labels, config):
    """T5PreTrainedModel._shift_right (decoder_start_token_id, pad_token_id 0)."""
    start = config.get("decoder_start_token_id", 0)
    shifted = labels.new_zeros(labels.shape)
    shifted[..., 1:] = labels[..., :-1].clone()
    shifted[..., 0] = start
    shifted.masked_fill_(shifted == -100, config.get("pad_token_id", 0))
    return shifted


# --------------------------------------------------------------------------
# ViT (modeling_vit.py, transformers 4.53-4.57: eager_attention_forward)
# --------------------------------------------------------------------------


class ViTPatchEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        image_size, patch_size = cfg.get("image_size", 224), cfg.get("patch_size", 16)
        self.num_channels = cfg.get("num_channels", 3)
        self.num_patches = (image_size // patch_size) * (image_size // patch_size)
        self.projection = nn.Conv2d(self.num_channels, cfg.get("hidden_size", 768),
                                    kernel_size=patch_size, stride=patch_size)

    def forward(self, pixel_values):
        return self.projection(pixel_values).flatten(2).transpose(1, 2)


class ViTEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = cfg.get("hidden_size", 768)
        self.cls_token = nn.Parameter(torch.randn(1, 1, hidden))
        self.patch_embeddings = ViTPatchEmbeddings(cfg)
        n = self.patch_embeddings.num_patches
        self.position_embeddings = nn.Parameter(torch.randn(1, n + 1, hidden))
        self.dropout = nn.Dropout(cfg.get("hidden_dropout_prob", 0.0))

    def forward(self, pixel_values):
        batch_size = pixel_values.shape[0]
        embeddings = self.patch_embeddings(pixel_values)
        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        embeddings = torch.cat((cls_tokens, embeddings), dim=1)
        embeddings = embeddings + self.position_embeddings
        return self.dropout(embeddings)


def vit_eager_attention_forward(module, query, key, value, scaling, dropout=0.0):
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class ViTSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = cfg.get("hidden_size", 768)
        self.num_attention_heads = cfg.get("num_attention_heads", 12)
        self.attention_head_size = hidden // self.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.dropout_prob = cfg.get("attention_probs_dropout_prob", 0.0)
        self.scaling = self.attention_head_size ** -0.5
        bias = cfg.get("qkv_bias", True)
        self.query = nn.Linear(hidden, self.all_head_size, bias=bias)
        self.key = nn.Linear(hidden, self.all_head_size, bias=bias)
        self.value = nn.Linear(hidden, self.all_head_size, bias=bias)

    def forward(self, hidden_states):
        batch_size = hidden_states.shape[0]
        new_shape = batch_size, -1, self.num_attention_heads, self.attention_head_size
        key_layer = self.key(hidden_states).view(*new_shape).transpose(1, 2)
        value_layer = self.value(hidden_states).view(*new_shape).transpose(1, 2)
        query_layer = self.query(hidden_states).view(*new_shape).transpose(1, 2)
        context_layer, attention_probs = vit_eager_attention_forward(
            self, query_layer, key_layer, value_layer, scaling=self.scaling,
            dropout=0.0 if not self.training else self.dropout_prob)
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.reshape(new_context_layer_shape)
        return context_layer, attention_probs


class ViTSelfOutput(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = cfg.get("hidden_size", 768)
        self.dense = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(cfg.get("hidden_dropout_prob", 0.0))

    def forward(self, hidden_states):
        return self.dropout(self.dense(hidden_states))


class ViTAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = ViTSelfAttention(cfg)
        self.output = ViTSelfOutput(cfg)

    def forward(self, hidden_states):
        self_attn_output, _ = self.attention(hidden_states)
        return self.output(self_attn_output)


def _vit_act(name):
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_new":
        return NewGELUActivation()
    if name == "gelu_pytorch_tanh":
        return nn.GELU(approximate="tanh")
    raise ValueError(name)


class ViTIntermediate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.get("hidden_size", 768), cfg.get("intermediate_size", 3072))
        self.intermediate_act_fn = _vit_act(cfg.get("hidden_act", "gelu"))

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class ViTOutput(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.get("intermediate_size", 3072), cfg.get("hidden_size", 768))
        self.dropout = nn.Dropout(cfg.get("hidden_dropout_prob", 0.0))

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return hidden_states + input_tensor


class ViTLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden, eps = cfg.get("hidden_size", 768), cfg.get("layer_norm_eps", 1e-12)
        self.attention = ViTAttention(cfg)
        self.intermediate = ViTIntermediate(cfg)
        self.output = ViTOutput(cfg)
        self.layernorm_before = nn.LayerNorm(hidden, eps=eps)
        self.layernorm_after = nn.LayerNorm(hidden, eps=eps)

    def forward(self, hidden_states):
        hidden_states_norm = self.layernorm_before(hidden_states)
        attention_output = self.attention(hidden_states_norm)
        hidden_states = attention_output + hidden_states
        layer_output = self.layernorm_after(hidden_states)
        layer_output = self.intermediate(layer_output)
        layer_output = self.output(layer_output, hidden_states)
        return layer_output


class ViTEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layer = nn.ModuleList(ViTLayer(cfg) for _ in range(cfg.get("num_hidden_layers", 12)))

    def forward(self, hidden_states):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states)
        return hidden_states


class ViTPooler(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = cfg.get("hidden_size", 768)
        self.dense = nn.Linear(hidden, cfg.get("pooler_output_size", hidden))
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class ViTModel(nn.Module):
    def __init__(self, cfg, add_pooling_layer=True):
        super().__init__()
        self.embeddings = ViTEmbeddings(cfg)
        self.encoder = ViTEncoder(cfg)
        self.layernorm = nn.LayerNorm(cfg.get("hidden_size", 768), eps=cfg.get("layer_norm_eps", 1e-12))
        self.pooler = ViTPooler(cfg) if add_pooling_layer else None

    def forward(self, pixel_values):
        expected_dtype = self.embeddings.patch_embeddings.projection.weight.dtype
        if pixel_values.dtype != expected_dtype:
            pixel_values = pixel_values.to(expected_dtype)
        embedding_output = self.embeddings(pixel_values)
        sequence_output = self.encoder(embedding_output)
        sequence_output = self.layernorm(sequence_output)
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return sequence_output, pooled_output


class ViTForImageClassification(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        labels = cfg.get("id2label")
        self.num_labels = len(labels) if labels else cfg.get("num_labels", 2)
        self.vit = ViTModel(cfg, add_pooling_layer=False)
        self.classifier = nn.Linear(cfg.get("hidden_size", 768), self.num_labels)

    def forward(self, pixel_values):
        sequence_output, _ = self.vit(pixel_values)
        logits = self.classifier(sequence_output[:, 0, :])
        return (logits,)


# --------------------------------------------------------------------------
# Decoders with cat-based partial rotary, fused projections or learned
# positions: OPT, GPT-NeoX, Phi-3 (4.51; OPT the attention-interface version,
# 4.50-4.56), Gemma (4.51).  src/load/hf_decoders.inc builds the same.
# --------------------------------------------------------------------------


def attention_core(module, query, key, value, attention_mask, scaling, dropout=0.0):
    """eager_attention_forward of OPT (siglip's copy) and GPT-NeoX: no repeat_kv."""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


def llama_causal_mask(input_tensor, cache_position):
    """LlamaModel._update_causal_mask (eager, no attention_mask, DynamicCache)."""
    dtype, device = input_tensor.dtype, input_tensor.device
    sequence_length = input_tensor.shape[1]
    target_length = sequence_length + 1
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype, device=device)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)
    return causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)


class OPTAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_dim = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.head_dim = self.embed_dim // self.num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = cfg.get("attention_dropout", 0.0)
        bias = cfg.get("enable_bias", True)
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=bias)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=bias)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=bias)

    def forward(self, hidden_states, attention_mask, cache):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        query_states = query_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)
        key_states = key_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        key_states, value_states = cache_kv(cache, key_states, value_states, self.layer_idx)
        attn_output, attn_weights = attention_core(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.dropout, scaling=1.0)
        attn_output = attn_output.reshape(bsz, tgt_len, -1).contiguous()
        attn_output = self.out_proj(attn_output)
        return attn_output, attn_weights


class OPTDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.self_attn = OPTAttention(cfg)
        self.do_layer_norm_before = cfg.get("do_layer_norm_before", True)
        self.dropout = cfg.get("dropout", 0.1)
        assert cfg.get("activation_function", "relu") == "relu"
        self.activation_fn = nn.ReLU()
        bias = cfg.get("enable_bias", True)
        self.self_attn_layer_norm = nn.LayerNorm(E)
        self.fc1 = nn.Linear(E, cfg.get("ffn_dim"), bias=bias)
        self.fc2 = nn.Linear(cfg.get("ffn_dim"), E, bias=bias)
        self.final_layer_norm = nn.LayerNorm(E)

    def forward(self, hidden_states, attention_mask, cache):
        residual = hidden_states
        if self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, self_attn_weights = self.self_attn(hidden_states, attention_mask, cache)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        if not self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states_shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))
        residual = hidden_states
        if self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        hidden_states = self.fc2(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = (residual + hidden_states).view(hidden_states_shape)
        if not self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return (hidden_states,)


class OPTLearnedPositionalEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim):
        self.offset = 2
        super().__init__(num_embeddings + self.offset, embedding_dim)

    def forward(self, attention_mask, past_key_values_length=0, position_ids=None):
        return super().forward(position_ids + self.offset)


class OPTDecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, W = cfg.get("hidden_size"), cfg.get("word_embed_proj_dim", cfg.get("hidden_size"))
        self.embed_tokens = nn.Embedding(cfg.get("vocab_size"), W, cfg.get("pad_token_id", 1))
        self.embed_positions = OPTLearnedPositionalEmbedding(cfg.get("max_position_embeddings"), E)
        self.project_out = nn.Linear(E, W, bias=False) if W != E else None
        self.project_in = nn.Linear(W, E, bias=False) if W != E else None
        self.final_layer_norm = nn.LayerNorm(E) if cfg.get("do_layer_norm_before", True) else None
        self.layers = nn.ModuleList(OPTDecoderLayer(cfg) for _ in range(cfg.get("num_hidden_layers")))
        number_layers(self.layers, "self_attn")

    @staticmethod
    def _prepare_4d(attention_mask, sequence_length, target_length, dtype, cache_position, batch_size):
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype,
                                 device=cache_position.device)
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length, device=cache_position.device) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
        causal_mask = causal_mask.clone()
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(
            padding_mask, min_dtype)
        return causal_mask

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None,
                position_ids=None, cache_position=None):
        if past_key_values is not None:
            return self._generation_forward(input_ids, past_key_values, attention_mask, position_ids,
                                            cache_position)
        input_ids = input_ids.view(-1, input_ids.shape[-1])
        inputs_embeds = self.embed_tokens(input_ids)
        cache = [] if use_cache else None
        cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
        attention_mask = torch.ones(inputs_embeds.shape[0], inputs_embeds.shape[1], device=inputs_embeds.device)
        causal_mask = self._prepare_4d(attention_mask, inputs_embeds.shape[1], attention_mask.shape[-1],
                                       inputs_embeds.dtype, cache_position, inputs_embeds.shape[0])
        position_ids = torch.cumsum(attention_mask, dim=1)
        position_ids = (position_ids * attention_mask - 1).long()
        position_ids = position_ids[:, 0:]
        pos_embeds = self.embed_positions(attention_mask, 0, position_ids=position_ids)
        if self.project_in is not None:
            inputs_embeds = self.project_in(inputs_embeds)
        hidden_states = inputs_embeds + pos_embeds
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask, cache)[0]
        if self.final_layer_norm is not None:
            hidden_states = self.final_layer_norm(hidden_states)
        if self.project_out is not None:
            hidden_states = self.project_out(hidden_states)
        return hidden_states, cache

    def _generation_forward(self, input_ids, cache, attention_mask, position_ids, cache_position):
        """OPTDecoder.forward (4.50-4.51) as generate calls it: the DynamicCache
        and the 2-D attention_mask [B, L] passed, position_ids [B, q] from
        prepare_inputs_for_generation (OPTForCausalLM.forward takes them), so
        no mask or positions are made here beyond _update_causal_mask's 4-D
        mask (GPT-J's copy: eager builds it, [B, 1, q, L]) and the embedding's
        position_ids + 2."""
        input_ids = input_ids.view(-1, input_ids.shape[-1])
        inputs_embeds = self.embed_tokens(input_ids)
        past_seen = cache.get_seq_length()
        causal_mask = dynamic_causal_mask(inputs_embeds, cache_position, attention_mask, past_seen)
        pos_embeds = self.embed_positions(attention_mask, past_seen, position_ids=position_ids)
        if self.project_in is not None:
            inputs_embeds = self.project_in(inputs_embeds)
        hidden_states = inputs_embeds + pos_embeds
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask, cache)[0]
        if self.final_layer_norm is not None:
            hidden_states = self.final_layer_norm(hidden_states)
        if self.project_out is not None:
            hidden_states = self.project_out(hidden_states)
        return hidden_states, cache


class OPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.decoder = OPTDecoder(cfg)


class OPTForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = OPTModel(cfg)
        W = cfg.get("word_embed_proj_dim", cfg.get("hidden_size"))
        self.lm_head = nn.Linear(W, cfg.get("vocab_size"), bias=False)
        self.lm_head.weight = self.model.decoder.embed_tokens.weight
        self.use_cache = cfg.get("use_cache", True)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                cache_position=None):
        # no logits_to_keep in 4.51's OPTForCausalLM: lm_head(outputs[0]).contiguous(), every
        # position's logits (generate's prefill too)
        hidden_states, cache = self.model.decoder(input_ids, self.use_cache, past_key_values,
                                                  attention_mask, position_ids, cache_position)
        if isinstance(cache, DynamicCache):
            logits = self.lm_head(hidden_states).contiguous()
            return logits, cache
        logits = self.lm_head(hidden_states[:, slice(0, None), :]).contiguous()
        return logits, (tuple(cache) if cache is not None else None)


def apply_rotary_pos_emb_neox(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)
    q_embed = torch.cat([q_embed, q_pass], dim=-1)
    k_embed = torch.cat([k_embed, k_pass], dim=-1)
    return q_embed, k_embed


def apply_rotary_pos_emb_phi3(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed


class RotaryConfig:
    """A Config whose rope_theta is another field (GPT-NeoX's rotary_emb_base)."""

    def __init__(self, theta):
        self.theta = theta

    def get(self, key, default=None):
        return self.theta if key == "rope_theta" else default


class GPTNeoXAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.head_size = E // self.num_heads
        self.scaling = self.head_size ** -0.5
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        bias = cfg.get("attention_bias", True)
        self.query_key_value = nn.Linear(E, 3 * E, bias=bias)
        self.dense = nn.Linear(E, E, bias=bias)

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, 3 * self.head_size)
        qkv = self.query_key_value(hidden_states).view(hidden_shape).transpose(1, 2)
        query_states, key_states, value_states = qkv.chunk(3, dim=-1)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb_neox(query_states, key_states, cos, sin)
        key_states, value_states = cache_kv(cache, key_states, value_states, self.layer_idx)
        attn_output, attn_weights = attention_core(
            self, query_states, key_states, value_states, attention_mask, scaling=self.scaling,
            dropout=0.0 if not self.training else self.attention_dropout)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.dense(attn_output)
        return attn_output, attn_weights


class GPTNeoXMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, I = cfg.get("hidden_size"), cfg.get("intermediate_size")
        self.dense_h_to_4h = nn.Linear(E, I)
        self.dense_4h_to_h = nn.Linear(I, E)
        assert cfg.get("hidden_act", "gelu") == "gelu"

    def forward(self, hidden_states):
        hidden_states = self.dense_h_to_4h(hidden_states)
        hidden_states = nn.functional.gelu(hidden_states)  # GELUActivation
        return self.dense_4h_to_h(hidden_states)


class GPTNeoXLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, eps = cfg.get("hidden_size"), cfg.get("layer_norm_eps", 1e-5)
        self.use_parallel_residual = cfg.get("use_parallel_residual", True)
        self.input_layernorm = nn.LayerNorm(E, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(E, eps=eps)
        self.post_attention_dropout = nn.Dropout(cfg.get("hidden_dropout", 0.0))
        self.post_mlp_dropout = nn.Dropout(cfg.get("hidden_dropout", 0.0))
        self.attention = GPTNeoXAttention(cfg)
        self.mlp = GPTNeoXMLP(cfg)

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        attn_output, attn_weights = self.attention(self.input_layernorm(hidden_states), attention_mask,
                                                   position_embeddings, cache)
        attn_output = self.post_attention_dropout(attn_output)
        if self.use_parallel_residual:
            mlp_output = self.mlp(self.post_attention_layernorm(hidden_states))
            mlp_output = self.post_mlp_dropout(mlp_output)
            hidden_states = mlp_output + attn_output + hidden_states
        else:
            attn_output = attn_output + hidden_states
            mlp_output = self.mlp(self.post_attention_layernorm(attn_output))
            mlp_output = self.post_mlp_dropout(mlp_output)
            hidden_states = mlp_output + attn_output
        return (hidden_states,)


class GPTNeoXModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.embed_in = nn.Embedding(cfg.get("vocab_size"), E)
        self.emb_dropout = nn.Dropout(cfg.get("hidden_dropout", 0.0))
        self.layers = nn.ModuleList(GPTNeoXLayer(cfg) for _ in range(cfg.get("num_hidden_layers")))
        number_layers(self.layers, "attention")
        self.final_layer_norm = nn.LayerNorm(E, eps=cfg.get("layer_norm_eps", 1e-5))
        head = E // cfg.get("num_attention_heads")
        rot = int(head * cfg.get("rotary_pct", 0.25))
        self.rotary_emb = LlamaRotaryEmbedding(
            RotaryConfig(cfg.get("rotary_emb_base", cfg.get("rope_theta", 10000.0))), rot)

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None,
                position_ids=None, cache_position=None):
        inputs_embeds = self.embed_in(input_ids)
        if past_key_values is not None:  # generate: the DynamicCache, the 2-D mask, positions
            cache = past_key_values
            causal_mask = dynamic_causal_mask(inputs_embeds, cache_position, attention_mask,
                                              cache.get_seq_length())
        else:
            cache = [] if use_cache else None
            cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
            position_ids = cache_position.unsqueeze(0)
            causal_mask = llama_causal_mask(inputs_embeds, cache_position)
        hidden_states = self.emb_dropout(inputs_embeds)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, causal_mask, position_embeddings, cache)[0]
        hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states, cache


class GPTNeoXForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gpt_neox = GPTNeoXModel(cfg)
        self.embed_out = nn.Linear(cfg.get("hidden_size"), cfg.get("vocab_size"), bias=False)
        if cfg.get("tie_word_embeddings", False):
            self.embed_out.weight = self.gpt_neox.embed_in.weight
        self.use_cache = cfg.get("use_cache", True)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                cache_position=None, logits_to_keep=0):
        hidden_states, cache = self.gpt_neox(input_ids, self.use_cache, past_key_values,
                                             attention_mask, position_ids, cache_position)
        # logits_to_keep=0: all positions; generate passes 1 (the last position's)
        logits = self.embed_out(hidden_states[:, slice(-logits_to_keep, None), :])
        if isinstance(cache, DynamicCache):
            return logits, cache
        return logits, (tuple(cache) if cache is not None else None)


class Phi3Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.num_kv_heads = cfg.get("num_key_value_heads", self.num_heads)
        self.head_dim = E // self.num_heads
        self.num_key_value_groups = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        op_size = self.num_heads * self.head_dim + 2 * (self.num_kv_heads * self.head_dim)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, E, bias=False)
        self.qkv_proj = nn.Linear(E, op_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        qkv = self.qkv_proj(hidden_states)
        query_pos = self.num_heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos: query_pos + self.num_kv_heads * self.head_dim]
        value_states = qkv[..., query_pos + self.num_kv_heads * self.head_dim:]
        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb_phi3(query_states, key_states, cos, sin)
        key_states, value_states = cache_kv(cache, key_states, value_states, self.layer_idx)
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class Phi3MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, I = cfg.get("hidden_size"), cfg.get("intermediate_size")
        self.gate_up_proj = nn.Linear(E, 2 * I, bias=False)
        self.down_proj = nn.Linear(I, E, bias=False)
        assert cfg.get("hidden_act", "silu") == "silu"
        self.activation_fn = nn.SiLU()

    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class Phi3DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, eps = cfg.get("hidden_size"), cfg.get("rms_norm_eps", 1e-5)
        self.self_attn = Phi3Attention(cfg)
        self.mlp = Phi3MLP(cfg)
        self.input_layernorm = LlamaRMSNorm(E, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(E, eps=eps)
        self.resid_attn_dropout = nn.Dropout(cfg.get("resid_pdrop", 0.0))
        self.resid_mlp_dropout = nn.Dropout(cfg.get("resid_pdrop", 0.0))

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, self_attn_weights = self.self_attn(hidden_states, position_embeddings,
                                                          attention_mask, cache)
        hidden_states = residual + self.resid_attn_dropout(hidden_states)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + self.resid_mlp_dropout(hidden_states)
        return (hidden_states,)


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class GemmaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, I = cfg.get("hidden_size"), cfg.get("intermediate_size")
        self.gate_proj = nn.Linear(E, I, bias=False)
        self.up_proj = nn.Linear(E, I, bias=False)
        self.down_proj = nn.Linear(I, E, bias=False)
        act = cfg.get("hidden_activation") or cfg.get("hidden_act", "gelu_pytorch_tanh")
        self.approximate = "tanh" if act == "gelu_pytorch_tanh" else "none"

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate=self.approximate) * self.up_proj(x))


class GemmaDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        E, eps = cfg.get("hidden_size"), cfg.get("rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(cfg, layer_idx)
        self.mlp = GemmaMLP(cfg)
        self.input_layernorm = GemmaRMSNorm(E, eps=eps)
        self.post_attention_layernorm = GemmaRMSNorm(E, eps=eps)

    forward = LlamaDecoderLayer.forward


class DecoderModel(nn.Module):
    """LlamaModel's forward (4.51) for Phi-3 (Phi3Model) and Gemma (GemmaModel:
    the embeddings times a 0-d normalizer tensor after the rotary embedding)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        E, t = cfg.get("hidden_size"), cfg.model_type
        self.gemma = t == "gemma"
        self.embed_tokens = nn.Embedding(cfg.get("vocab_size"), E, cfg.get("pad_token_id"))
        if self.gemma:
            self.layers = nn.ModuleList(GemmaDecoderLayer(cfg, i) for i in range(cfg.get("num_hidden_layers")))
            self.norm = GemmaRMSNorm(E, eps=cfg.get("rms_norm_eps", 1e-6))
            head_dim = cfg.get("head_dim", 256)
        else:
            self.layers = nn.ModuleList(Phi3DecoderLayer(cfg) for _ in range(cfg.get("num_hidden_layers")))
            self.norm = LlamaRMSNorm(E, eps=cfg.get("rms_norm_eps", 1e-5))
            head_dim = int(E // cfg.get("num_attention_heads") * cfg.get("partial_rotary_factor", 1.0))
        number_layers(self.layers, "self_attn")
        self.rotary_emb = LlamaRotaryEmbedding(cfg, head_dim)

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None,
                position_ids=None, cache_position=None):
        inputs_embeds = self.embed_tokens(input_ids)
        if past_key_values is not None:  # generate: Gemma's mask in Llama's form, Phi-3's in Mistral's
            cache = past_key_values
            causal_mask = dynamic_causal_mask(inputs_embeds, cache_position, attention_mask,
                                              cache.get_seq_length(), mistral=not self.gemma,
                                              sliding_window=None if self.gemma else
                                              self.cfg.get("sliding_window"))
        else:
            cache = [] if use_cache else None
            cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
            position_ids = cache_position.unsqueeze(0)
            causal_mask = llama_causal_mask(inputs_embeds, cache_position)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        if self.gemma:
            normalizer = torch.tensor(self.cfg.get("hidden_size") ** 0.5, dtype=hidden_states.dtype)
            hidden_states = hidden_states * normalizer
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask, position_embeddings, cache)[0]
        hidden_states = self.norm(hidden_states)
        return hidden_states, cache


class DecoderForCausalLM(nn.Module):
    """Phi3ForCausalLM, GemmaForCausalLM (tied by default)."""

    def __init__(self, cfg):
        super().__init__()
        self.model = DecoderModel(cfg)
        self.lm_head = nn.Linear(cfg.get("hidden_size"), cfg.get("vocab_size"), bias=False)
        if cfg.get("tie_word_embeddings", cfg.model_type == "gemma"):
            self.lm_head.weight = self.model.embed_tokens.weight
        self.use_cache = cfg.get("use_cache", True)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                cache_position=None, logits_to_keep=0):
        hidden_states, cache = self.model(input_ids, self.use_cache, past_key_values,
                                          attention_mask, position_ids, cache_position)
        # logits_to_keep=0: all positions; generate passes 1 (the last position's)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :])
        if isinstance(cache, DynamicCache):
            return logits, cache
        return logits, (tuple(cache) if cache is not None else None)


class PhiAttention(nn.Module):
    """PhiAttention (4.51): partial rotary through cat, biased projections."""

    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.num_kv_heads = cfg.get("num_key_value_heads", self.num_heads)
        self.head_dim = E // self.num_heads
        self.num_key_value_groups = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.rotary_ndims = int(self.head_dim * cfg.get("partial_rotary_factor", 0.5))
        self.q_proj = nn.Linear(E, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(E, self.num_kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(E, self.num_kv_heads * self.head_dim, bias=True)
        self.dense = nn.Linear(self.num_heads * self.head_dim, E, bias=True)
        assert not cfg.get("qk_layernorm", False)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_rot, query_pass = query_states[..., : self.rotary_ndims], query_states[..., self.rotary_ndims:]
        key_rot, key_pass = key_states[..., : self.rotary_ndims], key_states[..., self.rotary_ndims:]
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin)
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)
        key_states, value_states = cache_kv(cache, key_states, value_states, self.layer_idx)
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.dense(attn_output)
        return attn_output, attn_weights


class PhiMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, I = cfg.get("hidden_size"), cfg.get("intermediate_size")
        self.fc1 = nn.Linear(E, I)
        self.fc2 = nn.Linear(I, E)
        assert cfg.get("hidden_act", "gelu_new") == "gelu_new"
        self.activation_fn = NewGELUActivation()

    def forward(self, hidden_states):
        return self.fc2(self.activation_fn(self.fc1(hidden_states)))


class PhiDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = PhiAttention(cfg)
        self.mlp = PhiMLP(cfg)
        self.input_layernorm = nn.LayerNorm(cfg.get("hidden_size"), eps=cfg.get("layer_norm_eps", 1e-5))
        self.resid_dropout = nn.Dropout(cfg.get("resid_pdrop", 0.0))

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        attn_outputs, self_attn_weights = self.self_attn(hidden_states, position_embeddings,
                                                         attention_mask, cache)
        attn_outputs = self.resid_dropout(attn_outputs)
        feed_forward_hidden_states = self.resid_dropout(self.mlp(hidden_states))
        hidden_states = attn_outputs + feed_forward_hidden_states + residual
        return (hidden_states,)


class PhiModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.embed_tokens = nn.Embedding(cfg.get("vocab_size"), E)
        self.layers = nn.ModuleList(PhiDecoderLayer(cfg) for _ in range(cfg.get("num_hidden_layers")))
        number_layers(self.layers, "self_attn")
        self.final_layernorm = nn.LayerNorm(E, eps=cfg.get("layer_norm_eps", 1e-5))
        rot = int(E // cfg.get("num_attention_heads") * cfg.get("partial_rotary_factor", 0.5))
        self.rotary_emb = LlamaRotaryEmbedding(cfg, rot)
        self.embed_dropout = nn.Dropout(cfg.get("embd_pdrop", 0.0))

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None,
                position_ids=None, cache_position=None):
        inputs_embeds = self.embed_tokens(input_ids)
        if past_key_values is not None:  # generate: the DynamicCache, the 2-D mask, positions
            cache = past_key_values
            causal_mask = dynamic_causal_mask(inputs_embeds, cache_position, attention_mask,
                                              cache.get_seq_length())
        else:
            cache = [] if use_cache else None
            cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
            position_ids = cache_position.unsqueeze(0)
            causal_mask = llama_causal_mask(inputs_embeds, cache_position)
        inputs_embeds = self.embed_dropout(inputs_embeds)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask, position_embeddings, cache)[0]
        hidden_states = self.final_layernorm(hidden_states)
        return hidden_states, cache


class PhiForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = PhiModel(cfg)
        self.lm_head = nn.Linear(cfg.get("hidden_size"), cfg.get("vocab_size"), bias=True)
        if cfg.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight
        self.use_cache = cfg.get("use_cache", True)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                cache_position=None, logits_to_keep=0):
        hidden_states, cache = self.model(input_ids, self.use_cache, past_key_values,
                                          attention_mask, position_ids, cache_position)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :])
        if isinstance(cache, DynamicCache):
            return logits, cache
        return logits, (tuple(cache) if cache is not None else None)


class FalconLinear(nn.Linear):
    def forward(self, input):
        hidden_states = input @ self.weight.T
        if self.bias is None:
            return hidden_states
        return hidden_states + self.bias


class FalconAttention(nn.Module):
    """FalconAttention (4.51-4.56), rotary (alibi false), eager path."""

    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.num_heads = cfg.get("num_attention_heads")
        self.head_dim = E // self.num_heads
        self.new_decoder_architecture = cfg.get("new_decoder_architecture", False)
        self.multi_query = cfg.get("multi_query", True)
        cfg_kv = cfg.get("num_kv_heads", self.num_heads)
        if self.new_decoder_architecture:
            qkv_out_dim = (cfg_kv * 2 + self.num_heads) * self.head_dim
        elif self.multi_query:
            qkv_out_dim = E + 2 * self.head_dim
        else:
            qkv_out_dim = 3 * E
        bias = cfg.get("bias", False)
        self.query_key_value = FalconLinear(E, qkv_out_dim, bias=bias)
        self.dense = FalconLinear(E, E, bias=bias)
        self.num_kv_heads = cfg_kv if (self.new_decoder_architecture or not self.multi_query) else 1

    def _split_heads(self, fused_qkv):
        if self.new_decoder_architecture:
            batch, seq_len, _ = fused_qkv.shape
            qkv = fused_qkv.view(batch, seq_len, -1, self.num_heads // self.num_kv_heads + 2, self.head_dim)
            query = qkv[:, :, :, :-2]
            key = qkv[:, :, :, [-2]]
            value = qkv[:, :, :, [-1]]
            key = torch.broadcast_to(key, query.shape)
            value = torch.broadcast_to(value, query.shape)
            query, key, value = [x.flatten(2, 3) for x in (query, key, value)]
            return query, key, value
        elif not self.multi_query:
            batch_size, seq_length, _ = fused_qkv.shape
            fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)
            return fused_qkv[..., 0, :], fused_qkv[..., 1, :], fused_qkv[..., 2, :]
        else:
            batch_size, seq_length, _ = fused_qkv.shape
            fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads + 2, self.head_dim)
            return fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        fused_qkv = self.query_key_value(hidden_states)
        num_kv_heads = self.num_heads if self.new_decoder_architecture else self.num_kv_heads
        (query_layer, key_layer, value_layer) = self._split_heads(fused_qkv)
        batch_size, query_length, _, _ = query_layer.shape
        query_layer = query_layer.transpose(1, 2).reshape(batch_size, self.num_heads, query_length, self.head_dim)
        key_layer = key_layer.transpose(1, 2).reshape(batch_size, num_kv_heads, query_length, self.head_dim)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size, num_kv_heads, query_length, self.head_dim)
        cos, sin = position_embeddings
        query_layer, key_layer = apply_rotary_pos_emb(query_layer, key_layer, cos, sin)
        key_layer, value_layer = cache_kv(cache, key_layer, value_layer, self.layer_idx)
        attention_mask = attention_mask[:, :, :, : key_layer.shape[-2]]
        attention_scores = query_layer @ key_layer.transpose(-1, -2)
        attention_scores /= math.sqrt(self.head_dim)
        attention_scores = F.softmax(attention_scores + attention_mask, dim=-1, dtype=hidden_states.dtype)
        attn_output = attention_scores @ value_layer
        attn_output = attn_output.view(batch_size, self.num_heads, query_length, self.head_dim)
        attn_output = attn_output.permute(0, 2, 1, 3)
        attn_output = attn_output.reshape(batch_size, query_length, self.num_heads * self.head_dim)
        attn_output = self.dense(attn_output)
        return attn_output


class FalconMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        I = cfg.get("ffn_hidden_size", 4 * E)
        bias = cfg.get("bias", False)
        self.dense_h_to_4h = FalconLinear(E, I, bias=bias)
        self.dense_4h_to_h = FalconLinear(I, E, bias=bias)
        assert cfg.get("activation", "gelu") == "gelu"

    def forward(self, x):
        x = F.gelu(self.dense_h_to_4h(x))
        return self.dense_4h_to_h(x)


def dropout_add(x, residual, prob, training):
    out = F.dropout(x, p=prob, training=training)
    return residual + out


class FalconDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, eps = cfg.get("hidden_size"), cfg.get("layer_norm_epsilon", 1e-5)
        self.cfg = cfg
        self.new_arch = cfg.get("new_decoder_architecture", False)
        self.parallel_attn = cfg.get("parallel_attn", True)
        self.num_ln = cfg.get("num_ln_in_parallel_attn", 2 if self.new_arch else None)
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)
        self.self_attention = FalconAttention(cfg)
        self.mlp = FalconMLP(cfg)
        if not self.parallel_attn:
            self.post_attention_layernorm = nn.LayerNorm(E, eps=eps)
            self.input_layernorm = nn.LayerNorm(E, eps=eps)
        elif self.num_ln == 2:
            self.ln_attn = nn.LayerNorm(E, eps=eps)
            self.ln_mlp = nn.LayerNorm(E, eps=eps)
        else:
            self.input_layernorm = nn.LayerNorm(E, eps=eps)

    def forward(self, hidden_states, attention_mask, position_embeddings, cache):
        residual = hidden_states
        if self.new_arch and self.num_ln == 2:
            attention_layernorm_out = self.ln_attn(hidden_states)
            mlp_layernorm_out = self.ln_mlp(hidden_states)
        else:
            attention_layernorm_out = self.input_layernorm(hidden_states)
        attention_output = self.self_attention(attention_layernorm_out, attention_mask,
                                               position_embeddings, cache)
        if not self.new_arch:
            if self.parallel_attn:
                mlp_layernorm_out = attention_layernorm_out
            else:
                residual = dropout_add(attention_output, residual, self.attention_dropout, training=self.training)
                mlp_layernorm_out = self.post_attention_layernorm(residual)
        if self.new_arch and self.parallel_attn and self.num_ln == 1:
            mlp_layernorm_out = attention_layernorm_out
        mlp_output = self.mlp(mlp_layernorm_out)
        if self.new_arch or self.parallel_attn:
            mlp_output += attention_output
        output = dropout_add(mlp_output, residual, self.hidden_dropout, training=self.training)
        return (output,)


class FalconModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.get("hidden_size")
        self.word_embeddings = nn.Embedding(cfg.get("vocab_size"), E)
        self.h = nn.ModuleList(FalconDecoderLayer(cfg) for _ in range(cfg.get("num_hidden_layers")))
        number_layers(self.h, "self_attention")
        self.ln_f = nn.LayerNorm(E, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.rotary_emb = LlamaRotaryEmbedding(cfg, E // cfg.get("num_attention_heads"))

    def forward(self, input_ids, use_cache, past_key_values=None, attention_mask=None,
                position_ids=None, cache_position=None):
        if past_key_values is not None:
            return self._generation_forward(input_ids, past_key_values, attention_mask, position_ids,
                                            cache_position)
        inputs_embeds = self.word_embeddings(input_ids)
        cache = [] if use_cache else None
        seq_length = inputs_embeds.shape[1]
        cache_position = torch.arange(0, seq_length, device=inputs_embeds.device)
        position_ids = cache_position.unsqueeze(0)
        # _update_causal_mask without attention_mask: target_length = past + S
        min_dtype = torch.finfo(inputs_embeds.dtype).min
        causal_mask = torch.full((seq_length, seq_length), fill_value=min_dtype, dtype=inputs_embeds.dtype)
        if seq_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(seq_length) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(inputs_embeds.shape[0], 1, -1, -1)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for block in self.h:
            hidden_states = block(hidden_states, causal_mask, position_embeddings, cache)[0]
        hidden_states = self.ln_f(hidden_states)
        return hidden_states, cache

    def _generation_forward(self, input_ids, cache, attention_mask, position_ids, cache_position):
        """FalconModel.forward (4.51) as generate calls it: the DynamicCache, the
        2-D attention_mask and position_ids given; _update_causal_mask (Llama's
        form, no alibi) builds the eager [B, 1, q, L] mask."""
        inputs_embeds = self.word_embeddings(input_ids)
        causal_mask = dynamic_causal_mask(inputs_embeds, cache_position, attention_mask,
                                          cache.get_seq_length())
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for block in self.h:
            hidden_states = block(hidden_states, causal_mask, position_embeddings, cache)[0]
        hidden_states = self.ln_f(hidden_states)
        return hidden_states, cache


class FalconForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = FalconModel(cfg)
        self.lm_head = nn.Linear(cfg.get("hidden_size"), cfg.get("vocab_size"), bias=False)
        if cfg.get("tie_word_embeddings", True):
            self.lm_head.weight = self.transformer.word_embeddings.weight
        self.use_cache = cfg.get("use_cache", True)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                cache_position=None, logits_to_keep=0):
        hidden_states, cache = self.transformer(input_ids, self.use_cache, past_key_values,
                                                attention_mask, position_ids, cache_position)
        # FalconForCausalLM (4.46+) takes logits_to_keep (num_logits_to_keep before 4.50)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :])
        if isinstance(cache, DynamicCache):
            return logits, cache
        return logits, (tuple(cache) if cache is not None else None)


# --------------------------------------------------------------------------


def _init(model):
    """_init_weights: Linear/Embedding normal(0, 0.02), biases zero, norms ones."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)


class _NoPhase:
    def __init__(self, name):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@torch.no_grad()
def greedy_generate(model, input_ids, max_new_tokens, phase=_NoPhase, sampling=None):
    """model.generate(input_ids, max_new_tokens=N, do_sample=False) of
    transformers 4.51 for the models whose class supports the Cache classes
    (_supports_cache_class, so _prepare_cache_for_generation makes a
    DynamicCache): LlamaForCausalLM and its copies, OPT, GPT-NeoX, Falcon,
    Phi, Phi-3, Gemma (no pad/eos token, no logits processors):
    GenerationMixin._sample's loop with what prepare_inputs_for_generation and
    _update_model_kwargs_for_generation do around each forward.
    logits_to_keep=1 is passed only to a forward that takes it
    (_supports_logits_to_keep: the name in inspect.signature(forward); 4.51's
    OPTForCausalLM has none and computes every position's logits). N forwards
    in all: the prefill (phase "prefill"), then N - 1 of one token each (phase
    "s<k>/decode"); the cache ends at prompt + N - 1 tokens. phase(name) is a
    context manager per forward. sampling: None (do_sample=False), or the
    warpers of sampling_processors (do_sample=True: next_token_scores and
    probs held to the next step, like any loop local)."""
    assert not isinstance(model, (GPT2LMHeadModel, BioGptForCausalLM, Gemma2ForCausalLM,
                                  T5ForConditionalGeneration)), \
        "generation with a DynamicCache: not this class (see generate_greedy)"
    import inspect
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    batch, prompt = input_ids.shape
    # _prepare_attention_mask_for_generation (no pad token): ones [B, P] int64
    attention_mask = torch.ones(input_ids.shape[:2], dtype=torch.long, device=input_ids.device)
    cache = DynamicCache()  # _prepare_cache_for_generation
    # _get_initial_cache_position
    cache_position = torch.ones_like(input_ids[0, :], dtype=torch.int64).cumsum(0) - 1
    unfinished_sequences = torch.ones(batch, dtype=torch.long, device=input_ids.device)
    max_length = prompt + max_new_tokens
    step = 0
    while True:
        with phase("prefill" if step == 0 else f"s{step}/decode"):
            # prepare_inputs_for_generation: the uncached tokens, positions from the mask
            ids = input_ids if input_ids.shape[1] == cache_position.shape[0] else \
                input_ids[:, cache_position]
            ids = ids.clone(memory_format=torch.contiguous_format)
            position_ids = attention_mask.long().cumsum(-1) - 1
            position_ids.masked_fill_(attention_mask == 0, 1)
            position_ids = position_ids[:, -ids.shape[1]:].clone(memory_format=torch.contiguous_format)
            outputs = model(ids, past_key_values=cache, attention_mask=attention_mask,
                            position_ids=position_ids, cache_position=cache_position, **keep)
            # _update_model_kwargs_for_generation
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, 1))], dim=-1)
            cache_position = cache_position[-1:] + 1
            next_token_logits = outputs[0][:, -1, :].to(copy=True, dtype=torch.float32)
            if sampling is None:
                next_token_scores = next_token_logits  # an empty LogitsProcessorList
                next_tokens = torch.argmax(next_token_scores, dim=-1)
            else:  # do_sample: the warpers, then softmax and multinomial
                next_token_scores = _process_logits(input_ids, next_token_logits, sampling)
                probs = F.softmax(next_token_scores, dim=-1)
                next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            # MaxLengthCriteria: full((B,), is_done, bool)
            done = torch.full((batch,), input_ids.shape[-1] >= max_length, dtype=torch.bool)
            unfinished_sequences = unfinished_sequences & ~done
            this_peer_finished = unfinished_sequences.max() == 0
            del outputs
        step += 1
        if this_peer_finished:
            break
    return input_ids



# --------------------------------------------------------------------------
# Gemma 2 and Gemma 3 (text) with the HybridCache of transformers 4.51:
# modeling_gemma2.py / modeling_gemma3.py and cache_utils.HybridCache (4.51.3),
# used by generate() because their configs carry cache_implementation="hybrid".
# Read in: a copy of 4.51.3's Gemma3ForCausalLM (Unsloth's compiled module,
# headed "4.51.3"), the 4.51-era HybridCache kept as "OriginalHybridCache" in
# quic/efficient-transformers, and generation/utils.py of April 2025 main.
# --------------------------------------------------------------------------


class HybridCache:
    """cache_utils.HybridCache (4.51): per layer a key and a value tensor of
    fixed shape, zeroed when the cache is made (before the prefill): global
    layers [B, K, max_cache_len, D], sliding layers [B, K, min(sliding_window,
    max_cache_len), D]; `is_sliding` a bool tensor with (i + 1) %
    sliding_window_pattern (2 where the config has none)."""

    def __init__(self, cfg, max_batch_size, max_cache_len, dtype):
        self.max_cache_len = max_cache_len
        self.max_batch_size = max_batch_size
        H = cfg.get("num_attention_heads")
        self.head_dim = cfg.get("head_dim", cfg.get("hidden_size") // H)
        self._dtype = dtype
        self.num_key_value_heads = cfg.get("num_key_value_heads", H)
        layer_switch = cfg.get("sliding_window_pattern", 2)
        n = cfg.get("num_hidden_layers")
        self.is_sliding = torch.tensor([bool((i + 1) % layer_switch) for i in range(n)], dtype=torch.bool)
        self.key_cache, self.value_cache = [], []
        global_shape = (max_batch_size, self.num_key_value_heads, max_cache_len, self.head_dim)
        sliding_shape = (max_batch_size, self.num_key_value_heads,
                         min(cfg.get("sliding_window"), max_cache_len), self.head_dim)
        for i in range(n):  # torch._dynamo.mark_static_address: no allocation (and no dynamo in 1.13)
            shape = global_shape if not self.is_sliding[i] else sliding_shape
            self.key_cache.append(torch.zeros(shape, dtype=dtype))
            self.value_cache.append(torch.zeros(shape, dtype=dtype))

    def _sliding_update(self, cache_position, layer_idx, key_states, value_states, k_out, v_out, max_cache_len):
        if cache_position.shape[0] > max_cache_len:  # a prompt longer than the window
            k_out = key_states[:, :, -max_cache_len:, :]
            v_out = value_states[:, :, -max_cache_len:, :]
            self.key_cache[layer_idx] += k_out
            self.value_cache[layer_idx] += v_out
            return key_states, value_states
        slicing = torch.ones(max_cache_len, dtype=torch.long).cumsum(0)
        cache_position = cache_position.clamp(0, max_cache_len - 1)
        to_shift = cache_position >= max_cache_len - 1
        indices = (slicing + to_shift[-1].int() - 1) % max_cache_len
        k_out = k_out[:, :, indices]  # a rolled copy of the layer's cache
        v_out = v_out[:, :, indices]
        k_out[:, :, cache_position] = key_states
        v_out[:, :, cache_position] = value_states
        self.key_cache[layer_idx].zero_()
        self.value_cache[layer_idx].zero_()
        self.key_cache[layer_idx] += k_out
        self.value_cache[layer_idx] += v_out
        return k_out, v_out

    def _static_update(self, cache_position, layer_idx, key_states, value_states, k_out, v_out, max_cache_len):
        k_out[:, :, cache_position] = key_states
        v_out[:, :, cache_position] = value_states
        self.key_cache[layer_idx] = k_out
        self.value_cache[layer_idx] = v_out
        return k_out, v_out

    def update(self, key_states, value_states, layer_idx, cache_kwargs):
        cache_position = cache_kwargs.get("cache_position")
        k_out = self.key_cache[layer_idx]
        v_out = self.value_cache[layer_idx]
        key_states = key_states.to(k_out.dtype)
        value_states = value_states.to(v_out.dtype)
        fn = self._sliding_update if cache_kwargs.get("sliding_window") else self._static_update
        return fn(cache_position, layer_idx, key_states, value_states, k_out, v_out, k_out.shape[2])

    def get_max_cache_shape(self):
        return self.max_cache_len

    def get_seq_length(self, layer_idx=0):
        return (self.key_cache[layer_idx][0, 0].any(dim=-1)).sum()


def _cfg_value(cfg, key, default):
    """A config field that may be null on purpose (softcapping off)."""
    return cfg.d[key] if key in cfg.d else default


def causal_mask_4d(attention_mask, sequence_length, target_length, dtype, cache_position, batch_size):
    """_prepare_4d_causal_attention_mask_with_cache_position (Llama's, which
    Gemma 2/3 copy in 4.51): [B, 1, q, target] from a 2-D mask."""
    if attention_mask is not None and attention_mask.dim() == 4:
        return attention_mask
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    if attention_mask is not None:
        causal_mask = causal_mask.clone()
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(
            padding_mask, min_dtype)
    return causal_mask


def gemma_eager_attention_forward(module, query, key, value, attention_mask, scaling, softcap=None,
                                  dropout=0.0):
    """Gemma 2/3 eager_attention_forward (4.51): repeat_kv, the scores over
    every key the cache returns, tanh softcapping (Gemma 2), the mask sliced
    to the keys, softmax in float32."""
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class Gemma2Attention(nn.Module):
    """Gemma2Attention / Gemma3Attention (4.51): query_pre_attn_scalar**-0.5,
    Gemma 3's q_norm/k_norm after the transpose, the layer's sliding_window
    (Gemma 2: even layers; Gemma 3: (i + 1) % sliding_window_pattern) passed
    to the cache update."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        g3 = cfg.model_type == "gemma3_text"
        E = cfg.get("hidden_size")
        self.layer_idx = layer_idx
        self.num_heads = cfg.get("num_attention_heads")
        self.num_kv_heads = cfg.get("num_key_value_heads", self.num_heads)
        self.head_dim = cfg.get("head_dim", 256)
        self.num_key_value_groups = self.num_heads // self.num_kv_heads
        self.scaling = cfg.get("query_pre_attn_scalar", 256) ** -0.5
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        bias = cfg.get("attention_bias", False)
        self.q_proj = nn.Linear(E, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(E, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(E, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, E, bias=bias)
        self.attn_logit_softcapping = _cfg_value(cfg, "attn_logit_softcapping", None if g3 else 50.0)
        if g3:
            self.is_sliding = bool((layer_idx + 1) % cfg.get("sliding_window_pattern", 6))
            eps = cfg.get("rms_norm_eps", 1e-6)
            self.q_norm = GemmaRMSNorm(self.head_dim, eps=eps)
            self.k_norm = GemmaRMSNorm(self.head_dim, eps=eps)
        else:
            self.is_sliding = not bool(layer_idx % 2)
        self.g3 = g3
        self.sliding_window = cfg.get("sliding_window", 4096) if self.is_sliding else None

    def forward(self, hidden_states, position_embeddings, attention_mask, cache, cache_position):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if self.g3:
            query_states = self.q_norm(query_states)
            key_states = self.k_norm(key_states)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if cache is not None:
            cache_kwargs = {"sin": sin, "cos": cos, "cache_position": cache_position,
                            "sliding_window": self.sliding_window}
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx, cache_kwargs)
        attn_output, attn_weights = gemma_eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, scaling=self.scaling,
            softcap=None if self.g3 else self.attn_logit_softcapping,
            dropout=self.attention_dropout if self.training else 0.0)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class Gemma2DecoderLayer(nn.Module):
    """Gemma2DecoderLayer / Gemma3DecoderLayer (4.51): a sliding layer turns
    the 4-D mask into where(tril(ones_like(mask, bool), -window), min, mask)
    and slices it (a view) from max(0, last_cache_position - max(q, window));
    four norms."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        E, eps = cfg.get("hidden_size"), cfg.get("rms_norm_eps", 1e-6)
        self.self_attn = Gemma2Attention(cfg, layer_idx)
        self.is_sliding = self.self_attn.is_sliding
        self.sliding_window = cfg.get("sliding_window", 4096)
        self.mlp = GemmaMLP(cfg)
        self.input_layernorm = GemmaRMSNorm(E, eps=eps)
        self.post_attention_layernorm = GemmaRMSNorm(E, eps=eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(E, eps=eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(E, eps=eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache, cache_position,
                last_cache_position):
        if self.is_sliding and attention_mask is not None:
            effective_seq_len = max(cache_position.shape[0], self.sliding_window)
            min_dtype = torch.finfo(attention_mask.dtype).min
            sliding_window_mask = torch.tril(torch.ones_like(attention_mask, dtype=torch.bool),
                                             diagonal=-self.sliding_window)
            attention_mask = torch.where(sliding_window_mask, min_dtype, attention_mask)
            offset = max(0, last_cache_position - effective_seq_len)
            attention_mask = attention_mask[:, :, :, offset: offset + effective_seq_len]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, self_attn_weights = self.self_attn(hidden_states, position_embeddings,
                                                          attention_mask, cache, cache_position)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return (hidden_states,)


class Gemma2Model(nn.Module):
    """Gemma2Model / Gemma3TextModel.forward (4.51): a HybridCache of the
    input's length when called without one (use_cache, eval), the 4-D mask
    over the cache's max length, Gemma 2's embeddings times a 0-d normalizer,
    Gemma 3's scaled embedding and local/global rotary embeddings."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.g3 = cfg.model_type == "gemma3_text"
        E = cfg.get("hidden_size")
        self.embed_tokens = nn.Embedding(cfg.get("vocab_size"), E, cfg.get("pad_token_id", 0))
        if self.g3:  # Gemma3TextScaledWordEmbedding's non-persistent 0-d buffer
            self.embed_tokens.register_buffer("embed_scale", torch.tensor(E ** 0.5), persistent=False)
        self.layers = nn.ModuleList(Gemma2DecoderLayer(cfg, i) for i in range(cfg.get("num_hidden_layers")))
        self.norm = GemmaRMSNorm(E, eps=cfg.get("rms_norm_eps", 1e-6))
        D = cfg.get("head_dim", 256)
        self.rotary_emb = LlamaRotaryEmbedding(cfg, D)
        if self.g3:
            self.rotary_emb_local = LlamaRotaryEmbedding(RotaryConfig(cfg.get("rope_local_base_freq", 10000.0)), D)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=True, cache_position=None, last_cache_position=None):
        inputs_embeds = self.embed_tokens(input_ids)
        if self.g3:
            emb = self.embed_tokens
            inputs_embeds = inputs_embeds * emb.embed_scale.to(emb.weight.dtype)
        if use_cache and past_key_values is None and not self.training:
            batch_size, seq_len, _ = inputs_embeds.shape
            past_key_values = HybridCache(self.cfg, batch_size, seq_len, inputs_embeds.dtype)
        if cache_position is None:
            past_seen = past_key_values.get_seq_length() if past_key_values is not None else 0
            cache_position = torch.arange(past_seen, past_seen + inputs_embeds.shape[1])
        if position_ids is None:
            position_ids = cache_position.unsqueeze(0)
        if last_cache_position is None:
            last_cache_position = 0
            if attention_mask is not None:
                last_cache_position = (attention_mask.shape[-1] if attention_mask.dim() == 2
                                       else cache_position[-1].item())
        # _update_causal_mask: target_length = the cache's max length
        target = (past_key_values.get_max_cache_shape() if past_key_values is not None
                  else attention_mask.shape[-1] if attention_mask is not None else inputs_embeds.shape[1])
        causal_mask = causal_mask_4d(attention_mask, inputs_embeds.shape[1], target, inputs_embeds.dtype,
                                     cache_position, inputs_embeds.shape[0])
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        local = self.rotary_emb_local(hidden_states, position_ids) if self.g3 else None
        if not self.g3:
            normalizer = torch.tensor(self.cfg.get("hidden_size") ** 0.5, dtype=hidden_states.dtype)
            hidden_states = hidden_states * normalizer
        for layer in self.layers:
            pe = local if self.g3 and layer.is_sliding else position_embeddings
            hidden_states = layer(hidden_states, pe, causal_mask, past_key_values, cache_position,
                                  last_cache_position)[0]
        hidden_states = self.norm(hidden_states)
        return hidden_states, past_key_values


class Gemma2ForCausalLM(nn.Module):
    """Gemma2ForCausalLM / Gemma3ForCausalLM (4.51): logits_to_keep, Gemma 2's
    final tanh softcapping; returns (logits, the HybridCache)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Gemma2Model(cfg)
        self.lm_head = nn.Linear(cfg.get("hidden_size"), cfg.get("vocab_size"), bias=False)
        if cfg.get("tie_word_embeddings", True):
            self.lm_head.weight = self.model.embed_tokens.weight
        self.use_cache = cfg.get("use_cache", True)
        self.final_logit_softcapping = _cfg_value(
            cfg, "final_logit_softcapping", None if cfg.model_type == "gemma3_text" else 30.0)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                cache_position=None, logits_to_keep=0, last_cache_position=None):
        hidden_states, cache = self.model(input_ids, attention_mask, position_ids, past_key_values,
                                          self.use_cache, cache_position, last_cache_position)
        logits = self.lm_head(hidden_states[:, slice(-logits_to_keep, None), :])
        if self.final_logit_softcapping is not None:
            logits = logits / self.final_logit_softcapping
            logits = torch.tanh(logits)
            logits = logits * self.final_logit_softcapping
        return logits, cache


def _hybrid_model_inputs(model, input_ids, cache, attention_mask, cache_position):
    """Gemma2ForCausalLM.prepare_inputs_for_generation (4.51.3): the generic
    preparation (uncached tokens cloned, position_ids from the mask's cumsum,
    sliced and cloned), last_cache_position = the 2-D mask's length, and the
    4-D mask [B, 1, q, max_cache_len] made here (dtype of lm_head) because the
    cache is a HybridCache. Returned as a dict, as _sample holds it until the
    next step's dict replaces it."""
    ids = input_ids if input_ids.shape[1] == cache_position.shape[0] else input_ids[:, cache_position]
    ids = ids.clone(memory_format=torch.contiguous_format)
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids.masked_fill_(attention_mask == 0, 1)
    position_ids = position_ids[:, -ids.shape[1]:].clone(memory_format=torch.contiguous_format)
    last_cache_position = attention_mask.shape[-1]
    mask4 = causal_mask_4d(attention_mask, ids.shape[1], cache.get_max_cache_shape(),
                           model.lm_head.weight.dtype, cache_position, ids.shape[0])
    return dict(input_ids=ids, past_key_values=cache, attention_mask=mask4, position_ids=position_ids,
                cache_position=cache_position, logits_to_keep=1, last_cache_position=last_cache_position)


@torch.no_grad()
def hybrid_generate(model, input_ids, max_new_tokens, phase=_NoPhase, sampling=None):
    """model.generate(input_ids, max_new_tokens=N, do_sample=False) of
    transformers 4.51 for Gemma 2 / Gemma 3 text, whose config has
    cache_implementation="hybrid": _prepare_cache_for_generation builds the
    HybridCache with max_cache_len = max_length - 1 = P + N - 1 (generate's
    "max_cache_length = generation_config.max_length - 1"), batch B, the
    model's dtype, before _sample; _sample then runs as greedy_generate's loop
    (the model_inputs dict of each step held until the next one's is made).
    The cache stays referenced as model._cache (_get_cache) after generate."""
    batch, prompt = input_ids.shape
    attention_mask = torch.ones(input_ids.shape[:2], dtype=torch.long, device=input_ids.device)
    dtype = model.lm_head.weight.dtype
    cache = HybridCache(model.cfg, batch, prompt + max_new_tokens - 1, dtype)
    model._cache = cache
    # _get_initial_cache_position: the past length asked of the cache twice
    cache_position = torch.ones_like(input_ids[0, :], dtype=torch.int64).cumsum(0) - 1
    if cache.get_seq_length() is not None:
        past_length = cache.get_seq_length()
        cache_position = cache_position[past_length:]
    unfinished_sequences = torch.ones(batch, dtype=torch.long, device=input_ids.device)
    max_length = prompt + max_new_tokens
    step = 0
    model_inputs = None
    while True:
        with phase("prefill" if step == 0 else f"s{step}/decode"):
            model_inputs = _hybrid_model_inputs(model, input_ids, cache, attention_mask, cache_position)
            outputs = model(**model_inputs)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, 1))], dim=-1)
            cache_position = cache_position[-1:] + 1
            next_token_logits = outputs[0][:, -1, :].to(copy=True, dtype=torch.float32)
            if sampling is None:
                next_token_scores = next_token_logits
                next_tokens = torch.argmax(next_token_scores, dim=-1)
            else:  # do_sample: the warpers, then softmax and multinomial
                next_token_scores = _process_logits(input_ids, next_token_logits, sampling)
                probs = F.softmax(next_token_scores, dim=-1)
                next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            done = torch.full((batch,), input_ids.shape[-1] >= max_length, dtype=torch.bool)
            unfinished_sequences = unfinished_sequences & ~done
            this_peer_finished = unfinished_sequences.max() == 0
            del outputs
        step += 1
        if this_peer_finished:
            break
    return input_ids


def build(config):
    """The causal LM of a config.json dict (or path)."""
    if isinstance(config, str):
        import json
        with open(config) as f:
            config = json.load(f)
    cfg = Config(config)
    if cfg.model_type in ("llama", "mistral", "qwen2", "qwen3") + MOE_TYPES:
        model = LlamaForCausalLM(cfg)
    elif cfg.model_type == "gpt2":
        model = GPT2LMHeadModel(cfg)
    elif cfg.model_type in ("t5", "mt5"):
        model = T5ForConditionalGeneration(cfg)
    elif cfg.model_type == "vit":
        arch = cfg.get("architectures", ["ViTModel"])
        model = ViTForImageClassification(cfg) if "ViTForImageClassification" in arch else ViTModel(cfg)
    elif cfg.model_type == "opt":
        model = OPTForCausalLM(cfg)
    elif cfg.model_type == "biogpt":
        model = BioGptForCausalLM(cfg)
    elif cfg.model_type == "gpt_neox":
        model = GPTNeoXForCausalLM(cfg)
    elif cfg.model_type in ("phi3", "gemma"):
        model = DecoderForCausalLM(cfg)
    elif cfg.model_type in ("gemma2", "gemma3_text"):
        model = Gemma2ForCausalLM(cfg)
    elif cfg.model_type == "phi":
        model = PhiForCausalLM(cfg)
    elif cfg.model_type == "falcon":
        model = FalconForCausalLM(cfg)
    else:
        raise ValueError("model_type %r not modelled" % cfg.model_type)
    _init(model)
    return model


class LoraLayer(nn.Module):
    """peft.tuners.lora.Linear.forward (PEFT 0.12+; Conv1D with fan_in_fan_out):
    the frozen base layer's output plus lora_B(lora_A(dropout(x))) * alpha / r,
    the adapter input cast to the adapter dtype and the sum back to the
    result's (no-ops in a float32 model)."""

    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        self.base_layer = base
        if isinstance(base, nn.Linear):
            in_f, out_f = base.in_features, base.out_features
        else:  # Conv1D: weight [nx, nf]
            in_f, out_f = base.weight.shape
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A = nn.Linear(in_f, r, bias=False)
        self.lora_B = nn.Linear(r, out_f, bias=False)
        self.scaling = alpha / r

    def forward(self, x):
        result = self.base_layer(x)
        torch_result_dtype = result.dtype
        x = x.to(self.lora_A.weight.dtype)
        result = result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        return result.to(torch_result_dtype)


def add_lora(model, r, alpha, dropout, targets):
    """get_peft_model: freeze every parameter, then wrap each Linear / Conv1D
    whose name (the last part of its path) is in `targets`."""
    for p in model.parameters():
        p.requires_grad_(False)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in targets and isinstance(child, (nn.Linear, Conv1D)):
                setattr(module, child_name, LoraLayer(child, r, alpha, dropout))
    return model


def vocab_size(config):
    return config["vocab_size"]
