/*
 * linear.c (src/load/hf/): nn.Linear and GPT-2's Conv1D, with the LoRA and quantization
 * wrappers (quant.c: the quantized layers).
 */
#include "hf.h"

/* Whether the current module (the scope's last part) gets a LoRA adapter:
 * a target names it, or "all-linear" and it is not an output layer. */
static bool lora_wanted(struct hf *h)
{
    if (!h->lora || h->st != DNNMEM_OK)
        return false;
    const char *name = strrchr(h->scope, '/');
    name = name ? name + 1 : h->scope;
    bool output = strcmp(name, "lm_head") == 0 || strcmp(name, "decoder") == 0 ||
                  strcmp(name, "vocab_projector") == 0 || strstr(h->scope, "/classifier") ||
                  strcmp(name, "classifier") == 0;
    for (size_t k = 0; k < h->n_lora_targets; k++)
        if (strcmp(h->lora_targets[k], name) == 0 ||
            (strcmp(h->lora_targets[k], "all-linear") == 0 && !output)) {
            h->lora_hits[k]++;
            return true;
        }
    return false;
}

/* The layer an adapter wraps: PEFT dispatches bitsandbytes' layers to
 * lora.bnb's Linear8bitLt and Linear4bit, whose forward is not lora.Linear's. */
enum lora_base { LB_LINEAR, LB_BNB8, LB_BNB4 };

/* Tensor.clone(): a fresh copy whose backward passes the grad on as it is
 * (CloneBackward0), built as x + 0 (an Add allocates its output and passes
 * its grad through). */
static int32_t clone(struct hf *h, int32_t x)
{
    return hf_op(h, DM_OP_Add, 2, x, hf_const_f(h, 0.0));
}

/* PEFT's LoRA forward around the base layer's output y (huggingface/peft
 * src/peft/tuners/lora/layer.py and bnb.py, v0.14-0.15).
 * lora.Linear: y + lora_B(lora_A(hf_dropout(x.to(float32)))) * scaling, then
 * .to(y's dtype).
 * lora.bnb (bitsandbytes bases): Linear4bit first clones y ("As per Tim
 * Dettmers, for 4bit, we need to defensively clone here"); then, unless
 * autocast is on, x.to(float32) and the adapters' output .to(y's dtype)
 * before y + output, in y's dtype.
 * The casts are no-ops when the types agree (.to() of the same dtype returns
 * its input). */
static int32_t lora(struct hf *h, int32_t x, int64_t in, int64_t out, int32_t y,
                    enum lora_base base)
{
    if (!lora_wanted(h))
        return y;
    int64_t r = h->lora->r;
    int32_t a = hf_param(h, "lora_A.default.weight", DM_FLOAT, 2, (int64_t[]){r, in});
    int32_t b = hf_param(h, "lora_B.default.weight", DM_FLOAT, 2, (int64_t[]){out, r});
    hf_keep32(h, a);
    hf_keep32(h, b);
    bool bnb = base != LB_LINEAR;
    if (base == LB_BNB4)
        y = clone(h, y);
    int32_t xa = x;
    if (!bnb || !h->amp) {
        xa = hf_op(h, DM_OP_Cast, 1, x);
        hf_attr_i(h, "to", DM_FLOAT);
        hf_keep32(h, xa);
    }
    if (h->lora->dropout > 0) {
        xa = hf_dropout(h, xa, h->lora->dropout);
        hf_keep32(h, xa);
    }
    int32_t at = hf_op(h, DM_OP_Transpose, 1, a);
    hf_attr_ints(h, "perm", INTS(1, 0));
    int32_t u = hf_op(h, DM_OP_MatMul, 2, xa, at);
    hf_keep32(h, u);
    int32_t bt = hf_op(h, DM_OP_Transpose, 1, b);
    hf_attr_ints(h, "perm", INTS(1, 0));
    u = hf_op(h, DM_OP_MatMul, 2, u, bt);
    hf_keep32(h, u);
    u = hf_op(h, DM_OP_Mul, 2, u, hf_const_f(h, h->lora_alpha / (double)r));
    hf_keep32(h, u);
    if (bnb) {
        if (!h->amp)
            u = hf_op(h, DM_OP_CastLike, 2, u, y);
        return hf_op(h, DM_OP_Add, 2, y, u);
    }
    u = hf_op(h, DM_OP_Add, 2, y, u);
    hf_keep32(h, u);
    return hf_op(h, DM_OP_CastLike, 2, u, y);
}

/* The LoRA layer PEFT makes around a quantized linear layer (gptq's and
 * awq's LoRA layers are taken as lora.Linear). */
static enum lora_base lora_base(const struct hf *h)
{
    return h->q.method == Q_BNB4 ? LB_BNB4 : h->q.method == Q_BNB8 ? LB_BNB8 : LB_LINEAR;
}

/* nn.Linear(in, out): F.linear(x, W [out, in], b) = matmul(x, W.t()), then the
 * bias added in place (the schedule's linear_bias_target); `tied` >= 0: the
 * weight is that tensor. Inside the module's scope; `name` (or NULL) names
 * the result. */
int32_t hf_linear(struct hf *h, int32_t x, int64_t in, int64_t out, bool bias, int32_t tied,
                  const char *name)
{
    if (hf_quantized(h, tied, name, false))
        return lora(h, x, in, out, hf_qlinear(h, x, in, out, bias, name), lora_base(h));
    int32_t w = tied >= 0 ? tied : hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){out, in});
    int32_t b = bias ? hf_param(h, "bias", DM_FLOAT, 1, &out) : -1;
    int32_t wt = hf_op(h, DM_OP_Transpose, 1, w);
    hf_attr_ints(h, "perm", INTS(1, 0));
    if (!bias)
        h->out_name = name;
    int32_t y = hf_op(h, DM_OP_MatMul, 2, x, wt);
    if (bias) {
        h->out_name = name;
        y = hf_op(h, DM_OP_Add, 2, b, y);
    }
    return tied < 0 ? lora(h, x, in, out, y, LB_LINEAR) : y;
}

/* transformers' Conv1D(nf, nx) (GPT-2): addmm(b, x, W [nx, nf]). */
int32_t hf_conv1d(struct hf *h, int32_t x, int64_t nx, int64_t nf)
{
    /* bitsandbytes and gptq replace Conv1D too, as a linear nx -> nf */
    if (hf_quantized(h, -1, NULL, true))
        return lora(h, x, nx, nf, hf_qlinear(h, x, nx, nf, true, NULL), lora_base(h));
    int32_t w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){nx, nf});
    int32_t b = hf_param(h, "bias", DM_FLOAT, 1, &nf);
    int32_t y = hf_op(h, DM_OP_MatMul, 2, x, w);
    return lora(h, x, nx, nf, hf_op(h, DM_OP_Add, 2, b, y), LB_LINEAR);
}
