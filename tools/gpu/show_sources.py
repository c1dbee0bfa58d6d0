#!/usr/bin/env python3
"""Print the source of the installed transformers' functions that decide what
memory a step takes (the attention interfaces, the cache layers, the models'
forwards), so that dnnmem's model of a release can be checked against the
release itself on the GPU machine, where it is installed.

    python3 tools/gpu/show_sources.py > $OUT/sources.txt

The output is for reading, not for the repository (it is transformers' code).
"""
import importlib, inspect, sys

NAMES = [
    "transformers.integrations.sdpa_attention:sdpa_attention_forward",
    "transformers.integrations.sdpa_attention:use_gqa_in_sdpa",
    "transformers.cache_utils:DynamicLayer",
    "transformers.cache_utils:DynamicCache.__init__",
    "transformers.models.gpt2.modeling_gpt2:eager_attention_forward",
    "transformers.models.gpt2.modeling_gpt2:GPT2Attention.forward",
    "transformers.models.gpt2.modeling_gpt2:GPT2Block.forward",
    "transformers.models.llama.modeling_llama:eager_attention_forward",
    "transformers.models.llama.modeling_llama:LlamaAttention.forward",
    "transformers.models.llama.modeling_llama:LlamaDecoderLayer.forward",
    "transformers.models.llama.modeling_llama:LlamaRMSNorm.forward",
    "transformers.models.llama.modeling_llama:LlamaModel.forward",
    "transformers.models.llama.modeling_llama:LlamaForCausalLM.forward",
    "transformers.models.qwen3.modeling_qwen3:Qwen3Attention.forward",
    "transformers.models.gemma.modeling_gemma:eager_attention_forward",
    "transformers.models.phi.modeling_phi:eager_attention_forward",
    "transformers.models.phi3.modeling_phi3:eager_attention_forward",
    "transformers.models.gpt_neox.modeling_gpt_neox:eager_attention_forward",
    "transformers.models.gpt_neox.modeling_gpt_neox:GPTNeoXAttention.forward",
    "transformers.models.opt.modeling_opt:eager_attention_forward",
    "transformers.models.opt.modeling_opt:OPTAttention.forward",
    "transformers.masking_utils:create_causal_mask",
    "transformers.masking_utils:eager_mask",
    "transformers.masking_utils:sdpa_mask",
    "transformers.generation.utils:GenerationMixin._sample",
    "transformers.generation.utils:GenerationMixin._beam_search",
]


def main():
    import transformers, torch
    print("# transformers", transformers.__version__, "torch", torch.__version__)
    for spec in NAMES:
        mod, _, attr = spec.partition(":")
        print("\n# ==== %s" % spec)
        try:
            obj = importlib.import_module(mod)
            for part in attr.split("."):
                obj = getattr(obj, part)
            print(inspect.getsource(obj))
        except Exception as e:  # a name a release lacks
            print("# not found: %s: %s" % (type(e).__name__, e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
