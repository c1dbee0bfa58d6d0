/*
 * attention.c (src/load/hf/): the attention cores: eager, sdpa (and the kernel
 * --sdpa-backend forces), flash, grouped heads.
 */
#include "hf.h"

/* The attention core on permuted [B, H, S, D] views of q, k and v. sdpa: one
 * fused Attention node, which takes the strided views as they are. eager:
 * torch.matmul copies each permuted operand (the reshape of a non-contiguous
 * tensor) and BmmBackward keeps the copies; heads_copy makes them. */
static int32_t fused_attention(struct hf *h, const int32_t qkv[3], bool causal)
{
    int32_t o = hf_op(h, DM_OP_Attention, 3, qkv[0], qkv[1], qkv[2]);
    hf_attr_i(h, "is_causal", causal);
    return o;
}

/* flash_attention_forward of transformers 4.51 (integrations/
 * flash_attention.py) on q [B, H, S, D] and k, v [B, KV, S, D]: each
 * .transpose(1, 2) back to [B, S, H, D], the memory order projections and
 * rotary results have, so flash_attn_func's maybe_contiguous copies nothing
 * (it copies only a tensor whose last dim is strided); keys and values keep
 * their KV heads (FlashAttention-2 takes grouped heads); no mask (the
 * models' _update_causal_mask returns None for flash_attention_2 unless
 * the attention_mask has padding); `causal` for the decoders, not for
 * DistilBERT's and ViT's encoders. The node is marked for the schedule:
 * always the flash kernel, and with KV < H backward's H-headed dk and dv. */
int32_t hf_flash_attention(struct hf *h, int32_t q, int32_t k, int32_t v, double scale,
                           bool causal)
{
    int32_t o = fused_attention(h, (int32_t[]){q, k, v}, causal);
    hf_attr_f(h, "scale", scale);
    hf_attr_i(h, "flash_attn", 1);
    return o;
}

static const char *const backend_name[] = {"auto", "flash", "efficient", "cudnn", "math"};

/* Whether PyTorch takes the kernel --sdpa-backend forces for one
 * F.scaled_dot_product_attention call (q [B, H, S, D], k [B, KV, S, D], v's
 * head dim Dv; `masked`: an attn_mask is passed; KV < H: grouped heads under
 * enable_gqa). select_sdp_backend (aten/src/ATen/native/transformers/cuda/
 * sdp_utils.cpp) tries only the enabled kernel and otherwise fails with "No
 * available kernel"; this fails the estimate the same way. Conditions, from
 * sdp_utils.cpp's can_use_*_attention: flash: no attn_mask
 * (check_for_attn_mask), fp16/bf16 (check_dtypes_low_precision), sm80 to
 * sm121 (check_flash_attention_hardware_support), one head dim for q, k, v
 * up to 256 (check_head_dim_size_flash; 128 before PyTorch 2.2), and in
 * training on sm86-sm89/sm120 no head dim in (192, 224], nor in (224, 256]
 * with dropout. cuDNN: fp16/bf16, sm80 to sm121 (check_cudnn_hardware_support),
 * head dims up to 128 and multiples of 8 (check_cudnn_tensor_shapes: 256 only
 * with cuDNN above 9.22 on sm90/sm100; the H200's PyTorch 2.11 bundles 9.19).
 * memory-efficient: sm50 and later (check_mem_efficient_hardware_support),
 * bf16 from sm80, and no grouped heads: measured on the H200 with PyTorch
 * 2.11, Qwen3-0.6B bf16 forced to it fails with "No available kernel"
 * (tools/gpu/results/hf-more.jsonl; later sources pass supports_gqa to
 * check_batch_size_and_num_heads_dense). Masks and dropout are taken by
 * cuDNN and the memory-efficient kernel. */
static bool sdpa_forced_ok(struct hf *h, int64_t H, int64_t KV, int64_t D, int64_t Dv, bool masked,
                           double drop)
{
    enum dnnmem_sdpa_backend b = h->backend;
    if (b == DNNMEM_SDPA_AUTO || b == DNNMEM_SDPA_MATH)
        return true;
    bool half = h->half || h->g->quant_fp16_default;
    int cc = h->cc;
    const char *why = NULL;
    char buf[96];
    if (b == DNNMEM_SDPA_FLASH) {
        int64_t lim = h->torch >= 202 ? 256 : 128;
        if (masked)
            why = "the model passes an attn_mask (check_for_attn_mask)";
        else if (!half)
            why = "float32 q, k, v: it takes fp16/bf16 (check_dtypes_low_precision)";
        else if (cc < 80 || cc > 121)
            why = "it needs compute capability 8.0 to 12.1 "
                  "(check_flash_attention_hardware_support)";
        else if (D != Dv || D > lim) {
            snprintf(buf, sizeof buf, "head dim %lld/%lld: one for q, k, v, at most %lld "
                     "(check_head_dim_size_flash)", (long long)D, (long long)Dv, (long long)lim);
            why = buf;
        } else if (h->train && ((cc >= 86 && cc <= 89) || cc == 120 || cc == 121) &&
                   ((D > 192 && D <= 224) || (D > 224 && drop > 0)))
            why = "training with this head dim on sm86-sm89/sm120 "
                  "(check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120)";
    } else if (b == DNNMEM_SDPA_CUDNN) {
        if (!half)
            why = "float32 q, k, v: it takes fp16/bf16 (check_dtypes_low_precision)";
        else if (cc < 80 || cc > 121)
            why = "it needs compute capability 8.0 to 12.1 (check_cudnn_hardware_support)";
        else if (D > 128 || Dv > 128 || D % 8 || Dv % 8) {
            snprintf(buf, sizeof buf, "head dim %lld/%lld: at most 128 and a multiple of 8 "
                     "(check_cudnn_tensor_shapes)", (long long)D, (long long)Dv);
            why = buf;
        }
    } else if (b == DNNMEM_SDPA_EFFICIENT) {
        if (KV != H)
            why = "grouped keys and values under enable_gqa (transformers 4.54+): it "
                  "takes one head count for q, k, v";
        else if (cc < 50)
            why = "it needs compute capability 5.0 or later "
                  "(check_mem_efficient_hardware_support)";
        else if (h->bf16 && cc < 80)
            why = "bf16 q, k, v before sm80: it takes fp16 and float32 there";
    }
    if (!why)
        return true;
    hf_refuse(h, DM_REFUSE_SDPA_KERNEL, backend_name[b], why);
    return false;
}

/* PyTorch's math kernel (_scaled_dot_product_attention_math in
 * aten/src/ATen/native/transformers/attention.cpp), run for sdpa when forced
 * (--sdpa-backend math) or where no fused kernel takes grouped heads
 * (gqa_attention): fp16/bf16 q, k and v upcast to float32 ("Keep query, key,
 * value in high precision for accuracy", unless
 * allowFP16BF16ReductionMathSDP, off by default), q * sqrt(scale), k and v
 * repeat_interleave'd to H heads under enable_gqa (KV < H), k^T * sqrt(scale),
 * the [B, H, S, S] scores, the attn_mask added, softmax, dropout, times v,
 * cast back to the input dtype. MmBackward keeps the scaled q and k and the
 * repeated v; softmax its output. k, v: [B, KV, S, D]. */
static int32_t math_attention(struct hf *h, int32_t q, int32_t k, int32_t v, int32_t mask,
                              int64_t H, int64_t KV, int64_t D, double scale, double drop)
{
    bool half = h->half || h->g->quant_fp16_default;
    if (half) {
        q = hf_op(h, DM_OP_Cast, 1, q);
        hf_attr_i(h, "to", DM_FLOAT);
        hf_keep32(h, q);
    }
    int32_t qin = q, r = hf_const_f(h, sqrt(scale));
    q = hf_op(h, DM_OP_Mul, 2, q, r);
    hf_keep32(h, q);
    int32_t kv[2] = {k, v};
    for (int j = 0; j < 2; j++) {
        if (half) {
            kv[j] = hf_op(h, DM_OP_Cast, 1, kv[j]);
            hf_attr_i(h, "to", DM_FLOAT);
            hf_keep32(h, kv[j]);
        }
        if (KV != H) {
            kv[j] = hf_repeat_kv(h, kv[j], H / KV, H, D);
            hf_keep32(h, kv[j]);
        }
    }
    int32_t kt = hf_transpose(h, kv[0], INTS(0, 1, 3, 2));
    kt = hf_op(h, DM_OP_Mul, 2, kt, r);
    hf_keep32(h, kt);
    int32_t s = hf_op(h, DM_OP_MatMul, 2, q, kt);
    hf_keep32(h, s);
    if (mask >= 0) { /* attn.add_(attn_mask): taken out of place here */
        s = hf_op(h, DM_OP_Add, 2, s, mask);
        hf_keep32(h, s);
    }
    int32_t p = hf_op(h, DM_OP_Softmax, 1, s);
    hf_attr_i(h, "axis", -1);
    hf_keep32(h, p);
    p = hf_dropout(h, p, drop);
    hf_keep32(h, p);
    int32_t o = hf_op(h, DM_OP_MatMul, 2, p, kv[1]);
    hf_keep32(h, o);
    if (half)
        o = hf_op(h, DM_OP_CastLike, 2, o, qin);
    return o;
}

/* Whether F.scaled_dot_product_attention on the CPU takes its flash kernel
 * (_scaled_dot_product_flash_attention_for_cpu) rather than the math one.
 * PyTorch 2.13's CPU selection (sdp_utils_cpp) was checked by measuring the
 * cases transformers passes (profiler, 1 thread): an attn_mask [B, 1, S, S],
 * is_causal and grouped heads under enable_gqa all run the flash kernel; a
 * dropout_p above 0 in training, or a value head dim Dv other than q's and
 * k's D (DeepSeek's MLA: check_head_dim_size_cpp wants one), runs
 * _scaled_dot_product_attention_math. */
static bool cpu_flash(const struct hf *h, int64_t D, int64_t Dv, double drop)
{
    return h->cpu && (drop <= 0 || !h->train) && D == Dv;
}

/* One F.scaled_dot_product_attention call on q [B, H, S, D] and k, v
 * [B, KV, S, D] (KV < H: enable_gqa): the fused Attention hf_node (with the
 * attn_mask as a fourth input when mask >= 0, the forced kernel marked for
 * the schedule), or under --sdpa-backend math the math kernel's ops. scale
 * 0: the default 1/sqrt(D), not recorded on the node. Dv: v's head dim. */
int32_t hf_sdpa_attention(struct hf *h, const int32_t qkv[3], int32_t mask, bool causal,
                          int64_t H, int64_t KV, int64_t D, int64_t Dv, double scale,
                          double drop)
{
    if (h->backend == DNNMEM_SDPA_MATH || (h->cpu && !cpu_flash(h, D, Dv, drop)))
        return math_attention(h, qkv[0], qkv[1], qkv[2], mask, H, KV, D,
                              scale > 0 ? scale : 1.0 / sqrt((double)D), drop);
    if (!sdpa_forced_ok(h, H, KV, D, Dv, mask >= 0, drop))
        return -1;
    int32_t o = mask >= 0 ? hf_op(h, DM_OP_Attention, 4, qkv[0], qkv[1], qkv[2], mask)
                          : hf_op(h, DM_OP_Attention, 3, qkv[0], qkv[1], qkv[2]);
    hf_attr_i(h, "is_causal", causal);
    if (scale > 0)
        hf_attr_f(h, "scale", scale);
    if (h->backend != DNNMEM_SDPA_AUTO)
        hf_attr_i(h, "sdpa_backend", h->backend);
    return o;
}

/* sdpa_attention_forward from transformers 4.54 (PR #39412, use_gqa_in_sdpa)
 * on PyTorch 2.5+ when no mask is passed: keys and values keep their KV heads
 * and F.scaled_dot_product_attention gets enable_gqa=True. The flash and
 * cuDNN kernels take grouped heads; the memory-efficient one does not
 * (sdp_utils.cpp), so where no fused kernel can run (float32, before sm80,
 * head dim above 256) PyTorch takes the math kernel (math_attention), as it
 * does when forced to. Measured (tools/gpu/results, transformers 5.17,
 * PyTorch 2.11, H200): TinyLlama's float32 sdpa step peaks at its eager
 * step's bytes; Qwen3-0.6B's bf16 sdpa step without the repeat_kv copies
 * within 0.1%. q: the caller's [B, H, S, D] (its contiguous copy on the fused
 * path: a q-sized tensor per layer stays in the 5.17 measurement). Returns -1
 * where repeat_kv still runs. */
int32_t hf_gqa_attention(struct hf *h, int32_t q, int32_t k, int32_t v, int64_t H, int64_t KV,
                         int64_t D, double scale, double drop)
{
    if (!h->gqa_sdpa || H == KV)
        return -1;
    bool half = h->half || h->g->quant_fp16_default;
    bool fused = h->cpu                         ? cpu_flash(h, D, D, drop)
                 : h->backend == DNNMEM_SDPA_AUTO ? half && h->cc >= 80 && D <= 256
                                                  : h->backend != DNNMEM_SDPA_MATH;
    if (fused) {
        /* up to 4.55 .contiguous() copies q (the rotary result in
         * [B, S, H, D] order); from 4.56 the kernel takes it as it is */
        int32_t qc = h->sdpa_as_is ? q : hf_reshape(h, q, INTS(0, H, -1, D));
        return hf_sdpa_attention(h, (int32_t[]){qc, k, v}, -1, true, H, KV, D, D, scale, drop);
    }
    return math_attention(h, q, k, v, -1, H, KV, D, scale, drop);
}

/* F.scaled_dot_product_attention on k, v of KV < H heads without
 * enable_gqa (FalconAttention's multi-query k, v [B, 1, S, D]): the head
 * dim broadcasts, which no fused kernel takes (sdp_utils'
 * check_batch_size_and_num_heads_dense wants one head count), so PyTorch
 * runs the math kernel, whose torch.matmul expands and copies k and v to H
 * heads (math_attention's repeat). Measured (2.13, CPU): Falcon-7B's sdpa
 * training step peaks at its eager step's bytes. */
int32_t hf_sdpa_broadcast(struct hf *h, int32_t q, int32_t k, int32_t v, int32_t mask, int64_t H,
                          int64_t KV, int64_t D, double scale)
{
    return math_attention(h, q, k, v, mask, H, KV, D, scale, 0);
}

void hf_heads_copy(struct hf *h, const int32_t qkv[3], int64_t heads, int64_t d, int32_t out[3])
{
    for (int j = 0; j < 3; j++)
        out[j] = hf_reshape(h, qkv[j], INTS(0, heads, -1, d));
}

/* torch.matmul's fold of a 4-D operand [B, H, S, D] into bmm's [B * H, S, D]
 * (aten/src/ATen/native/LinearAlgebra.cpp, _matmul_impl: tensor.expand(...)
 * .reshape(...)): the reshape copies a non-contiguous operand, except at
 * batch 1, where it only drops the size-1 dim, a view whatever the strides
 * (TensorShape.cpp, computeStride), and bmm takes a strided batch of
 * row-major matrices as it is (prepare_batch_matrix_for_cublas on CUDA,
 * addmm_impl_cpu_ per batch on the CPU: a unit stride in one of the last two
 * dims is all they need). Marked for the schedule (forward.c), which makes
 * the Reshape a view when the batch is 1. */
int32_t hf_matmul_fold(struct hf *h, int32_t x, int64_t heads, int64_t d)
{
    int32_t y = hf_reshape(h, x, INTS(0, heads, -1, d));
    hf_attr_i(h, "matmul_fold", 1);
    return y;
}

/* The three eager operands' folds (hf_matmul_fold). */
void hf_heads_fold(struct hf *h, const int32_t qkv[3], int64_t heads, int64_t d, int32_t out[3])
{
    for (int j = 0; j < 3; j++)
        out[j] = hf_matmul_fold(h, qkv[j], heads, d);
}

/* repeat_kv: x[:, :, None].expand(B, kv, n_rep, S, D).reshape(B, kv * n_rep, S, D).
 * The expand is a view and the reshape copies in PyTorch; here Expand
 * allocates and the Reshape of its contiguous result is a view: one
 * allocation of the repeated size either way. */
int32_t hf_repeat_kv(struct hf *h, int32_t x, int64_t n_rep, int64_t heads, int64_t d)
{
    if (n_rep == 1)
        return x;
    int32_t u = hf_unsqueeze(h, x, INTS(2));
    int32_t s = hf_const_ints(h, INTS(1, 1, n_rep, 1, 1));
    int32_t e = hf_op(h, DM_OP_Expand, 2, u, s);
    return hf_reshape(h, e, INTS(0, heads, -1, d));
}

/* attn_weights = softmax(s, dim=-1, dtype=float32).to(query.dtype), one
 * statement. ATen's softmax with a dtype (aten/src/ATen/native/SoftMax.cpp)
 * runs an fp16 CUDA input through _softmax(half_to_float=True): float32 out,
 * no copy, and its backward returns fp16; any other 16-bit input (bf16, the
 * CPU) is converted to float32 first, a copy the softmax does not keep. The
 * float32 probabilities are what SoftmaxBackward keeps and the cast back is
 * what the next matmul keeps (no casts on float32). The variable still holds
 * the scores until .to() returns (measured: Llama-3.2-1B bf16 eager
 * inference on the H200, B 4, S 2048, was one [B, H, S, S] bf16 tensor, 1
 * GiB, over the estimate without it). */
int32_t hf_softmax_f32(struct hf *h, int32_t s, int32_t like)
{
    int32_t s32 = s;
    if (!h->half_to_float) {
        s32 = hf_op(h, DM_OP_Cast, 1, s);
        hf_attr_i(h, "to", DM_FLOAT);
        hf_keep32(h, s32);
    }
    int32_t p = hf_op(h, DM_OP_Softmax, 1, s32);
    hf_attr_i(h, "axis", -1);
    hf_keep32(h, p);
    p = hf_op(h, DM_OP_CastLike, 2, p, like);
    hf_hold(h, s, hf_last_node(h));
    return p;
}
