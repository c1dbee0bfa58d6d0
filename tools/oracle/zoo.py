#!/usr/bin/env python3
"""PyTorch 2.x CPU ground truth for models never used in developing dnnmem.

    python3 -m venv /tmp/zoo-venv
    /tmp/zoo-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx
    nice -n 19 /tmp/zoo-venv/bin/python tools/oracle/zoo.py measure [--jobs N] [--only SUBSTR ...]
    python3 tools/oracle/zoo.py compare [--dnnmem build/dnnmem] [--misses FILE] [-v]

`measure` runs every configuration of configs() (torchvision classifiers, segmentation and
video models; seeded random
architectures from tools/oracle/randnet.py; timm models, which need `pip install timm`) in its own process (a fresh interpreter, so the
allocator and the profiler start empty), bounded by --timeout, and appends one JSON row
per configuration to tests/validation/pytorch-cpu-2.x-zoo.jsonl; configurations already in
that file are skipped (resumable), and failures go to build/zoo/failed.jsonl (skipped too,
unless --retry-failed).  Each model is exported first, in its own process, to a graph-only
ONNX file tests/models/zoo/<model>-i<image>.onnx (TorchScript exporter, dynamo=False,
training=TrainingMode.TRAINING, do_constant_folding=False, opset 14, batch dim dynamic;
initializer bytes stripped as tools/export_fixtures.py does): Dropout and training
BatchNorm survive, and the file is small and kept out of git.  `export` re-exports.

What a row's peak_bytes is (the same method as tools/measure_cpu.py, for torch 2.x):
  * bytes_before: the distinct CPU storages of every live torch.Tensor (gc scan) just
    before profiling: parameters, buffers, input, target (bytes_before_unaccounted
    says whether anything else was live);
  * the run, inside torch.profiler.profile(activities=[CPU], profile_memory=True): every
    event of prof.profiler.kineto_results.events() with nbytes() != 0 is one call of
    c10's CPU allocator (reportMemoryUsage: + requested bytes at allocation, - at free),
    taken in start_ns() order (stable); peak_bytes = bytes_before + the maximum of the
    running sum.  Exactness checks per row: end_check_ok (a gc scan after the run equals
    bytes_before + the sum of all events, to the byte) and tree_matches_events (the
    event tree's Allocation nodes, ordered by time, give the same size sequence);
  * training: 2 iterations of opt.zero_grad() (2.x default set_to_none=True) -> out =
    model(x) -> loss = F.cross_entropy(out, y) -> loss.backward() -> opt.step() -> del
    out, loss; model.train().  SGD lr 0.01 momentum 0.9; Adam lr 1e-3; foreach left at
    None, which resolves to the single-tensor loops for CPU parameters (recorded);
  * inference: model.eval(), torch.no_grad(), out = model(x), del out;
  * torch.set_num_threads(1) (dnnmem --cpu-threads 1); the model after
    torch.manual_seed(0), inputs after manual_seed(1), the run after manual_seed(2).
The rows also carry the largest blocks live at the peak, by operator (live_at_peak_top).

Under PyTorch 1.13 (Debian's /usr/bin/python3: python3-torch 1.13, torchvision 0.14; timm
from a venv made with --system-site-packages) `measure` writes OUT_113 instead: the ids of
OUT only, each model first checked against OUT's row (parameter and buffer bytes, randnet's
architecture: the graph must be this model's), the same peak with 1.13's API (storage(),
start_us()) and 1.13's zero_grad default (set_to_none=False, recorded).

`compare` needs no torch: it runs build/dnnmem estimate on each row's graph (re-exported
by `measure`/`export` if absent, which needs torch) with --device cpu --framework
pytorch@MAJOR.MINOR of the row's torch (--ref OUT_113: pytorch@1.13) --cpu-threads 1 and the row's batch, mode and optimizer, and prints the
per-family and per-source figures (median |error|, share within 3%, under-estimates
beyond 3%, worst cases).  With --misses it exits 1 when a row misses by more than 3%
without being listed there, or a listed row no longer misses.
"""

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "validation", "pytorch-cpu-2.x-zoo.jsonl")
# The same configurations measured with PyTorch 1.13 (Debian's python3-torch 1.13 and
# python3-torchvision 0.14, docs/validation-zoo.md "PyTorch 1.13"): only the ids of OUT,
# on models whose definition in that release has OUT's parameter and buffer bytes.
OUT_113 = os.path.join(ROOT, "tests", "validation", "pytorch-cpu-1.13-zoo.jsonl")
WORK = os.path.join(ROOT, "build", "zoo")
PREFIX = "dnnmem/"
ITERS = 2
SGD_LR, SGD_MOMENTUM, ADAM_LR = 0.01, 0.9, 1e-3
BAR = 3.0
TOP = 8

# torchvision classifiers: name -> (constructor keyword arguments, image size).  Image sizes
# below the usual 224 only for fully convolutional models ending in adaptive pooling (the
# graph is the same, the activations smaller); googlenet and inception_v3 without their
# auxiliary heads (their train-mode BatchNorm after a 1x1 pooling fails at batch 1).
TORCHVISION = {
    "resnet18": ({}, 224),
    "resnet50": ({}, 224),
    "resnext50_32x4d": ({}, 160),
    "wide_resnet50_2": ({}, 128),
    "mobilenet_v2": ({}, 224),
    "mobilenet_v3_small": ({}, 224),
    "mobilenet_v3_large": ({}, 224),
    "densenet121": ({}, 224),
    "efficientnet_b0": ({}, 224),
    "shufflenet_v2_x1_0": ({}, 224),
    "squeezenet1_1": ({}, 224),
    "mnasnet1_0": ({}, 224),
    "regnet_y_400mf": ({}, 224),
    "regnet_x_800mf": ({}, 224),
    "convnext_tiny": ({}, 160),
    "vit_b_16": ({}, 224),
    "swin_t": ({}, 224),
    "googlenet": ({"aux_logits": False, "init_weights": False}, 224),
    "inception_v3": ({"aux_logits": False, "init_weights": False}, 299),
    "alexnet": ({}, 224),
    "vgg11": ({}, 224),
    "vgg11_bn": ({}, 224),  # at 160 its AdaptiveAvgPool2d((7, 7)) of 5x5 does not export
    # added 2026-12-04 (NAME=fresh29, issue 13; measured before any fix): classifiers of
    # torchvision 0.29.1 not in the zoo before (MaxViT and Swin V2 at their fixed 224)
    "shufflenet_v2_x0_5": ({}, 224),
    "mnasnet0_5": ({}, 224),
    "squeezenet1_0": ({}, 224),
    "efficientnet_v2_s": ({}, 128),
    "swin_v2_t": ({}, 224),
    "maxvit_t": ({}, 224),
}
# timm models (timm 1.0.31, pretrained=False, the default 1000 classes), at 96 px: ones whose
# training-mode TorchScript export works at that size (the transformers take img_size=96),
# across its families; never used in developing dnnmem.
TIMM = {name: ({"img_size": 96} if name.split("_")[0] in ("vit", "deit", "mixer", "resmlp",
                                                           "gmlp", "xcit", "cait", "pit") else {},
               96)
        for name in (
            "resnet26d", "resnest14d", "regnetx_002", "regnety_002", "mobilenetv3_small_050",
            "mobilenetv4_conv_small", "convnext_atto", "ghostnet_100", "mixnet_s", "rexnet_100",
            "dla34", "hrnet_w18_small", "cspresnet50", "repvgg_a0", "lcnet_050", "tinynet_e",
            "efficientvit_b0", "fastvit_t8", "mobilevit_xxs", "edgenext_xx_small",
            "poolformer_s12", "vit_tiny_patch16_224", "deit_tiny_patch16_224", "mixer_s16_224",
            "resmlp_12_224", "gmlp_ti16_224", "xcit_nano_12_p16_224", "cait_xxs24_224",
            "pit_ti_224", "mobileone_s0", "ghostnetv2_100", "inception_next_atto", "hgnetv2_b0")}
# Added 2026-12-02 (out of sample for that session: measured and compared before any of its
# fixes); the ones taking img_size are the transformers, whose position tables depend on it.
TIMM_IMG_SIZE = {"levit_128s", "convit_tiny", "deit3_small_patch16_224",
                 "efficientvit_m0"}
TIMM.update({name: ({"img_size": 96} if name in TIMM_IMG_SIZE else {}, 96) for name in (
    "seresnext26d_32x4d", "skresnet18", "res2net50_26w_4s", "dpn48b", "densenetblur121d",
    "efficientnet_lite0", "tf_efficientnet_b0", "mobilenetv1_100", "fbnetc_100",
    "hardcorenas_a", "gernet_s", "ese_vovnet19b_dw", "cs3darknet_s", "nf_resnet26",
    "selecsls42b", "convnextv2_atto", "mobilevitv2_050", "repvit_m0_9", "starnet_s050",
    "mambaout_femto", "regnetz_b16", "dla46_c", "xception41", "fasternet_t0", "hgnet_tiny",
    "levit_128s", "convit_tiny", "deit3_small_patch16_224", "efficientvit_m0", "pvt_v2_b0")})
# Added 2026-12-02 (NAME=zoo, issue 13; measured and compared before that session's fixes):
# families new to the zoo first (BEiT, CoAtNet, CoaT, MaxViT, Swin, EfficientFormer, TResNet,
# NesT, Twins, Sequencer, Visformer, TNT, DaViT, FocalNet, Next-ViT, BoTNet, LambdaNet, ...),
# small variants; name -> image size (the ones in TIMM_IMG_SIZE2 take img_size, the rest
# are fully convolutional or fixed at that size: swin_tiny, coatnet_pico and
# efficientformer_l1 at their 224).  Probed first (export, batch-1 training, dnnmem accepts
# the graph): eva02_tiny (its SDPA call fails to trace), efficientformerv2_s0, crossvit_tiny
# (fixed image sizes), volo_d1 (aten::col2im has no opset-14 export), halonet26t,
# haloregnetz_b and bat_resnext26ts (assertions at 96 px) do not export; gcvit_xxtiny's
# Tile takes run-time repeats, which dnnmem refuses (docs/validation-zoo.md);
# poolformerv2_s12 was refused until lift.c took F.group_norm without a bias.
TIMM_IMG_SIZE2 = {"beit_base_patch16_224", "coat_lite_tiny", "maxvit_rmlp_pico_rw_256",
                  "nest_tiny_jx", "twins_pcpvt_small", "twins_svt_small", "visformer_tiny",
                  "tnt_s_patch16_224", "botnet26t_256", "vit_tiny_r_s16_p8_224",
                  "vit_relpos_small_patch16_224", "deit_tiny_distilled_patch16_224",
                  "levit_conv_128s", "xcit_tiny_12_p16_224", "hiera_tiny_224", "mvitv2_tiny",
                  "gmixer_12_224", "vitamin_small_224"}
TIMM3 = {  # in the order measured: requested families and small models first
    "beit_base_patch16_224": 96, "coatnet_pico_rw_224": 224, "coat_lite_tiny": 96,
    "maxvit_rmlp_pico_rw_256": 128, "swin_tiny_patch4_window7_224": 224,
    "efficientformer_l1": 224, "tresnet_m": 96, "nest_tiny_jx": 96, "twins_pcpvt_small": 96,
    "twins_svt_small": 96, "sequencer2d_s": 96, "visformer_tiny": 96, "tnt_s_patch16_224": 96,
    "botnet26t_256": 128, "lambda_resnet26t": 128, "poolformerv2_s12": 96, "spnasnet_100": 96,
    "semnasnet_075": 96, "mobilenetv2_050": 96, "mobilenetv3_large_075": 96,
    "mobilenetv4_hybrid_medium": 96, "efficientnet_es": 96, "tf_efficientnetv2_b0": 96,
    "lcnet_075": 96, "convnext_pico": 96, "convnextv2_femto": 96, "dla60x_c": 96,
    "regnety_004": 96, "legacy_seresnet18": 96, "resnet10t": 96, "vit_tiny_r_s16_p8_224": 96,
    "deit_tiny_distilled_patch16_224": 96, "levit_conv_128s": 96, "mobileone_s1": 96,
    "repghostnet_050": 96, "edgenext_x_small": 96, "mobilevit_xs": 96, "cs3darknet_focus_s": 96,
    "xcit_tiny_12_p16_224": 96, "ecaresnet26t": 96, "efficientnetv2_rw_t": 96,
    "fastvit_sa12": 96, "hrnet_w18_small_v2": 96, "pvt_v2_b1": 96, "dpn68b": 96,
    "resnest26d": 96, "gmixer_12_224": 96, "davit_tiny": 96, "focalnet_tiny_srf": 96,
    "nextvit_small": 96, "vovnet39a": 96, "resnetv2_50x1_bit": 96, "cspdarknet53": 96,
    "vit_relpos_small_patch16_224": 96, "hiera_tiny_224": 96, "mvitv2_tiny": 96,
    "rdnet_tiny": 96, "vitamin_small_224": 96,
}
TIMM.update({name: ({"img_size": img} if name in TIMM_IMG_SIZE2 else {}, img)
             for name, img in TIMM3.items()})
# Added 2026-12-02 (NAME=oos, issue 13; measured and compared before any fix): small variants
# across the families the issue names (ConvNeXt, EfficientNet, RegNet, ResNeSt, MobileNetV3/V4,
# MobileViT, DeiT, Swin, CoAtNet, MaxViT, EVA, ...) and others; name -> (image size, whether it
# takes img_size).  Probed first (export, dnnmem accepts the graph; docs/validation-zoo.md
# lists the ones dropped).
TIMM4 = {
    "convnext_femto": (96, False), "convnext_nano": (96, False), "efficientnet_b1": (96, False),
    "efficientnet_cc_b0_4e": (96, False), "tf_efficientnet_lite0": (96, False),
    "regnety_006": (96, False), "regnetx_004": (96, False), "resnest50d": (96, False),
    "mobilenetv3_large_100": (96, False), "tf_mobilenetv3_small_minimal_100": (96, False),
    "mobilenetv4_conv_medium": (96, False), "mobilevit_s": (96, False),
    "mobilevitv2_075": (96, False), "deit_small_patch16_224": (96, True),
    "vit_small_patch32_224": (96, True), "swinv2_tiny_window8_256": (128, True),
    "coatnet_nano_rw_224": (128, True), "maxvit_nano_rw_256": (128, True),
    "maxxvitv2_nano_rw_256": (128, True), "eva02_tiny_patch14_224": (112, True),
    "vit_little_patch16_reg4_gap_256": (96, True), "efficientvit_b1": (96, False),
    "efficientvit_m1": (96, True), "fastvit_t12": (96, False), "repvit_m1_0": (96, False),
    "tinynet_d": (96, False), "resnet18d": (96, False), "resnet34": (96, False),
    "gcresnext26ts": (96, False), "sebotnet33ts_256": (128, True), "mixnet_m": (96, False),
    "ghostnet_050": (96, False), "mnasnet_small": (96, False), "lcnet_100": (96, False),
    "pit_xs_224": (96, True), "cait_xxs36_224": (96, True), "xcit_nano_12_p8_224": (96, True),
    "edgenext_small": (96, False), "poolformer_s24": (96, False), "mobileone_s2": (96, False),
    "res2next50": (96, False), "ese_vovnet19b_slim_dw": (96, False),
    "levit_conv_192": (96, True), "flexivit_small": (96, True), "regnetz_c16": (96, False),
    "cspresnext50": (96, False), "darknet17": (96, False), "mambaout_kobe": (96, False),
    "starnet_s1": (96, False), "fasternet_t1": (96, False), "hgnetv2_b1": (96, False),
}
TIMM.update({name: ({"img_size": img} if takes else {}, img)
             for name, (img, takes) in TIMM4.items()})
# Added 2026-12-03 (NAME=fresh, issue 13; measured and compared before any fix): 25 models
# of families thin in the zoo (timm's test_* models, FastViT-S12, RepViT-M1.1, GhostNet-130,
# GhostNetV3, TinyNet-A, HGNet-S, ReXNet-R, NesT, PiT-S, EdgeNeXt-S-rw, LeViT-128,
# InceptionNeXt-T, StarNet-S2), in the order measured (smallest first); name -> (image size,
# whether it takes img_size).  Probed first (built, a forward at 96 px): fastvit_mci0 left out
# (its head has 512 outputs, the MobileCLIP embedding, so the 1000-class target is out of range).
# test_vit2 takes img_size=96: at its default 160 its dynamic_img_size resamples the position
# table by aten::_upsample_bicubic2d_aa, which has no opset-14 export.
TIMM5 = {
    "test_byobnet": (96, False), "test_convnext2": (96, False),
    "test_efficientnet_gn": (96, False), "test_efficientnet_ln": (96, False),
    "test_efficientnet_evos": (96, False), "test_vit2": (96, True), "test_resnet": (96, False),
    "test_nfnet": (96, False), "test_mambaout": (96, False), "test_coatnet": (96, True),
    "test_maxvit": (96, True), "test_vit_relpos": (96, True), "ghostnetv3_050": (96, False),
    "starnet_s2": (96, False), "rexnetr_100": (96, False), "tinynet_a": (96, False),
    "ghostnet_130": (96, False), "edgenext_small_rw": (96, False), "repvit_m1_1": (96, False),
    "levit_128": (96, True), "fastvit_s12": (96, False), "nest_tiny": (96, True),
    "pit_s_224": (96, True), "hgnet_small": (96, False), "inception_next_tiny": (96, False),
}
TIMM.update({name: ({"img_size": img} if takes else {}, img)
             for name, (img, takes) in TIMM5.items()})
# Added 2026-12-03 (NAME=fresh27, issue 13; measured and compared before any fix): models
# of timm families not in the zoo before (SHViT, SwiftFormer, EfficientViM, LowFormer,
# PP-LCNetV2, FBNetV3, MobileNet-EdgeTPU-V2, CSPNeXt, ResNet-blur, iFormer, CPUBone,
# CoAtNeXt, CAFormer), small variants, smallest first; name -> (image size, whether it takes
# img_size).  Probed first (built, a training-mode forward at 96 px at batch 2); csatv2 left out:
# its TorchScript export fails (SymbolicValueError).
TIMM6 = {  # 13 models
    "cspnext_tiny": (96, False), "iformer_t": (96, False), "swiftformer_xs": (96, False),
    "lcnetv2_small": (96, False), "mobilenet_edgetpu_v2_xs": (96, False),
    "shvit_s1": (96, False), "efficientvim_m1": (96, False), "fbnetv3_b": (96, False),
    "cpubone_b0_bfrobust": (96, False), "resnetblur18": (96, False),
    "lowformer_b0": (96, False), "coatnext_nano_rw_224": (128, True), "caformer_s18": (96, False),
}
TIMM.update({name: ({"img_size": img} if takes else {}, img)
             for name, (img, takes) in TIMM6.items()})
# Added 2026-12-04 (NAME=fresh29, issue 13; measured and compared before any fix): models of
# timm families not in the zoo before (ConvMixer, Xception (legacy and pre-act), Inception-v4,
# Swin-V2-CR, ResNet-RS, GroupNorm ResNet, anti-aliased ResNet, SE-ResNeXt-T, ECA-VoVNet,
# NF-RegNet, TinyViT), smallest first; name -> (image size, whether it takes img_size).
# hieradet_small (SAM2's HieraDet) left out: its TorchScript graph keeps an If, which dnnmem refuses.
TIMM7 = {
    "nf_regnet_b0": (96, False), "resnetaa50": (96, False), "resnet50_gn": (96, False),
    "seresnext26t_32x4d": (96, False), "eca_vovnet39b": (96, False), "resnetrs50": (96, False),
    "xception41p": (96, False), "legacy_xception": (96, False), "convmixer_768_32": (96, False),
    "inception_v4": (96, False), "tiny_vit_5m_224": (224, False),
    "swinv2_cr_tiny_ns_224": (224, False),
}
TIMM.update({name: ({"img_size": img} if takes else {}, img)
             for name, (img, takes) in TIMM7.items()})
# Added 2026-12-04 (NAME=fresh30, issue 13; measured and compared before any fix): models of
# timm families not in the zoo before (GC-EfficientNetV2, RegNetV, SE-DarkNet, ConvFormer,
# SK-ResNeXt, NFNet-L) and new variants of thin ones (blur-pool EfficientNet, anti-aliased
# MobileNetV4, CS3-EdgeNet), smallest first; name -> (image size, whether it takes img_size).
# timm's inception_v3 was measured and dropped: torchvision's inception_v3 has that name here
# (build_model takes the name only), as with resnet34.
TIMM8 = {
    "efficientnet_blur_b0": (96, False), "mobilenetv4_conv_aa_medium": (96, False),
    "gc_efficientnetv2_rw_t": (96, False), "regnetv_040": (96, False),
    "sedarknet21": (96, False), "convformer_s18": (96, False),
    "skresnext50_32x4d": (96, False), "nfnet_l0": (96, False), "cs3edgenet_x": (96, False),
}
TIMM.update({name: ({"img_size": img} if takes else {}, img)
             for name, (img, takes) in TIMM8.items()})
# Models whose attention modules are switched to timm's unfused path (each `fused_attn`
# attribute set False after construction), in the export and the measurement alike: their
# F.scaled_dot_product_attention call does not trace (eva02_tiny: `is_causal` a tensor).
TIMM_UNFUSED_ATTN = {"eva02_tiny_patch14_224"}
# torchvision beyond classification (added 2026-12-02, issue 13): semantic segmentation
# (weights=None, weights_backbone=None, 21 classes, no auxiliary head; the model's
# {"out": ...} dict unwrapped; loss F.cross_entropy(out[B, 21, H, W], y[B, H, W])) and
# video classification (input [B, 3, FRAMES, H, W], 400 classes).  Detection is not here:
# its training-mode forward takes the targets and returns losses, which the TorchScript
# exporter cannot trace as a graph of the image alone.
SEGMENTATION = {"lraspp_mobilenet_v3_large": 128, "deeplabv3_mobilenet_v3_large": 128,
                "fcn_resnet50": 96, "deeplabv3_resnet50": 96}
VIDEO = {"r3d_18": 64, "mc3_18": 64, "r2plus1d_18": 64}
FRAMES = 8
RANDOM_SEEDS = range(0, 182)
RUNS = (("inference", None), ("train", "sgd-momentum"), ("train", "adam"))


def family(model):
    if model.startswith("rand"):
        return "random"
    if model in TIMM:
        return "timm-" + re.match(r"[a-z]+", model).group()
    if model in SEGMENTATION:
        return "seg-" + model.split("_")[0]
    if model in VIDEO:
        return "video-" + model
    for f in ("resnext", "wide_resnet", "resnet", "mobilenet_v2", "mobilenet_v3", "densenet",
              "efficientnet", "shufflenet", "squeezenet", "mnasnet", "regnet", "convnext", "vit",
              "swin", "googlenet", "inception", "alexnet", "vgg"):
        if model.startswith(f):
            return f
    return model


def configs():
    out = []
    models = [(m, "torchvision", img) for m, (_, img) in TORCHVISION.items()]
    models += [(f"rand{s}", "random", 32) for s in RANDOM_SEEDS]
    models += [(m, "timm", img) for m, (_, img) in TIMM.items()]
    models += [(m, "torchvision", img) for m, img in SEGMENTATION.items()]
    models += [(m, "torchvision", img) for m, img in VIDEO.items()]
    for model, source, image in models:
        for mode, opt in RUNS:
            for b in (1, 2):
                tag = "infer" if mode == "inference" else "train-" + ("sgd" if opt == "sgd-momentum" else "adam")
                out.append(dict(id=f"{model}-{tag}-b{b}-i{image}", model=model, source=source,
                                family=family(model), mode=mode, optimizer=opt, batch=b, image=image,
                                graph=f"tests/models/zoo/{model}-i{image}.onnx"))
    return out


# --------------------------------------------------------------------------
# In the child (torch imported there only)
# --------------------------------------------------------------------------


def build_model(name):
    import torch
    torch.manual_seed(0)
    if name.startswith("rand"):
        import randnet
        m, desc = randnet.build(int(name[4:]))
        return m, desc, randnet.CLASSES
    if name in TIMM:
        import timm
        kw, _ = TIMM[name]
        m = timm.create_model(name, pretrained=False, **kw)
        for mod in m.modules() if name in TIMM_UNFUSED_ATTN else ():
            if hasattr(mod, "fused_attn"):
                mod.fused_attn = False
        return m, None, 1000
    import torchvision
    if name in SEGMENTATION:
        class Out(torch.nn.Module):  # the {"out": ...} dict's tensor
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        m = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
        return Out(m), None, 21
    if name in VIDEO:
        return getattr(torchvision.models.video, name)(weights=None), None, 400
    kw, _ = TORCHVISION[name]
    return getattr(torchvision.models, name)(weights=None, **kw), None, 1000


def input_shape(name, batch, image):
    """The model's input: [B, 3, FRAMES, H, W] for a video model, else [B, 3, H, W]."""
    return (batch, 3, FRAMES, image, image) if name in VIDEO else (batch, 3, image, image)


def target_shape(name, batch, image):
    """The loss's class ids: one per pixel for a segmentation model, else one per sample."""
    return (batch, image, image) if name in SEGMENTATION else (batch,)


# --variant modules: the same export with each module class that has an annotated
# `inplace` attribute (nn.ReLU, nn.ReLU6, nn.SiLU, nn.ELU, ...) exported as an ONNX local
# function (export_modules_as_functions, opset 15), whose calls carry the module's
# `inplace` (torch/onnx/utils.py, _get_module_attributes): dnnmem inlines them and takes
# each activation's in-place fact from them (docs/inplace.md).  The rows are the same.
VARIANTS = {"plain": "tests/models/zoo/", "modules": "tests/models/zoo-modules/"}


def graph_path(cfg, variant):
    """Row cfg's graph for the variant (the rows record the plain one)."""
    return cfg["graph"].replace(VARIANTS["plain"], VARIANTS[variant], 1)


def inplace_module_types(model):
    import typing
    return {type(m) for m in model.modules()
            if isinstance(getattr(m, "inplace", None), bool)
            and "inplace" in typing.get_type_hints(type(m))}


def export_graph(name, image, path, variant="plain"):
    import io
    import warnings

    import onnx
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from export_fixtures import strip_initializers
    model, _, _ = build_model(name)
    model.train()
    buf = io.BytesIO()
    kw = dict(opset_version=14)
    if variant == "modules":
        kw = dict(opset_version=15, export_modules_as_functions=inplace_module_types(model))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(*input_shape(name, 2, image)),), buf, dynamo=False,
                          export_params=True, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, **kw)
    m = onnx.load_from_string(buf.getvalue())
    strip_initializers(m, os.path.basename(path)[:-5] + ".weights")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(m.SerializeToString())
    os.replace(path + ".tmp", path)


class Range:
    """A profiler range without record_function's own tensor (as tools/measure_cpu.py's rf)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        import torch
        self.h = torch.ops.profiler._record_function_enter_new(PREFIX + self.name, None)

    def __exit__(self, *exc):
        import torch
        torch.ops.profiler._record_function_exit._RecordFunction(self.h)


def storage_of(t):
    """t's storage: untyped_storage() in 2.x; 1.13 has only storage() (a TypedStorage,
    whose data_ptr() and nbytes() are the same storage's)."""
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def torch_major():
    import torch
    return int(torch.__version__.split(".")[0])


def live_storages():
    import gc

    import torch
    gc.collect()
    seen = {}
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.device.type == "cpu" and not o.is_sparse:
                st = storage_of(o)
                if st.nbytes():
                    seen[st.data_ptr()] = st.nbytes()
        except Exception:  # noqa: BLE001 - odd tensor subclasses
            pass
    return seen


def unique_bytes(ts):
    return sum({storage_of(t).data_ptr(): storage_of(t).nbytes()
                for t in ts if t is not None}.values())


def tree_allocations(kr):
    """Allocation nodes of the event tree in time order: (t, id, size, ptr, phase, op)."""
    allocs, stack = [], list(kr.experimental_event_tree())
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if "Allocation" not in str(n.tag):
            continue
        ef = n.extra_fields
        size = int(ef.alloc_size)
        if size == 0 or not str(getattr(ef, "device", "cpu")).startswith("cpu"):
            continue
        names, phase, p = [], None, n.parent
        while p is not None:
            if p.name.startswith(PREFIX):
                phase = p.name[len(PREFIX):]
                break
            names.append(p.name)
            p = p.parent
        names.reverse()
        outer = names[0] if names else "(python)"
        inner = [x for x in names if not x.startswith(("aten::empty", "aten::zeros", "aten::resize_"))]
        op = outer if not inner or inner[-1] == outer else f"{outer} > {inner[-1]}"
        allocs.append((int(n.start_time_ns), int(n.id), size, int(ef.ptr), phase, op))
    allocs.sort()
    return allocs


def check_definition(expect, param_bytes, buffer_bytes, desc):
    """Raises when the model built here is not the one `expect` (a row of OUT, measured on
    the model the graph was exported from) describes: torchvision's definitions differ
    between releases, and the graph must be this model's."""
    arch = json.loads(json.dumps(desc))
    if isinstance(arch, str) and isinstance(expect.get("architecture"), str) and \
            not re.match(r"stem\d+\[", expect["architecture"]):
        # rows measured before randnet named the stem's norm and activation (4978684):
        # the same build, the shorter description
        arch = re.sub(r"^(stem\d+)\[[^\]]*\]", r"\1", arch)
    got = dict(param_bytes=param_bytes, buffer_bytes=buffer_bytes, architecture=arch)
    for k, v in got.items():
        if expect.get(k) != v:
            raise ValueError(f"definition differs from the graph's: {k} {v} here, "
                             f"{expect.get(k)} in {os.path.basename(OUT)}")


def profiled_run(cfg, expect=None):
    """The configuration's run under the profiler: a dict with the kineto results (kr),
    the sorted allocator events (evs: start_ns or 1.13's start_us, index, signed bytes),
    the bytes live before and after (gc scans), the parameter, buffer, input and target
    bytes, the model's description and class count, and the run's seconds.  With
    `expect`, the model is first checked against it (check_definition)."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    torch.set_num_threads(1)
    train = cfg["mode"] == "train"
    model, desc, classes = build_model(cfg["model"])
    model.train(train)
    torch.manual_seed(1)
    x = torch.randn(*input_shape(cfg["model"], cfg["batch"], cfg["image"]))
    y = torch.randint(0, classes, target_shape(cfg["model"], cfg["batch"], cfg["image"]),
                      dtype=torch.long) if train else None
    opt = None
    if cfg["optimizer"] == "sgd-momentum":
        opt = torch.optim.SGD(model.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)
    elif cfg["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR)
    param_bytes = unique_bytes(model.parameters())
    buffer_bytes = unique_bytes(model.buffers())
    input_bytes, target_bytes = unique_bytes([x]), unique_bytes([y])
    if expect is not None:
        check_definition(expect, param_bytes, buffer_bytes, desc)
    before = sum(live_storages().values())
    torch.manual_seed(2)
    t0 = time.time()
    # a row's "autocast": the forward and the loss under torch.autocast("cpu", dtype), as
    # the AMP recipe writes the loop (tools/oracle/autocast_zoo.py)
    amp = (lambda: torch.autocast("cpu", dtype=getattr(torch, cfg["autocast"]))) if cfg.get("autocast") \
        else contextlib.nullcontext
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if not train:
            with torch.no_grad(), amp():
                with Range("it0/forward"):
                    out = model(x)
                with Range("it0/cleanup"):
                    del out
        else:
            for it in range(ITERS):
                with Range(f"it{it}/zero_grad"):
                    opt.zero_grad()
                with amp():
                    with Range(f"it{it}/forward"):
                        out = model(x)
                    with Range(f"it{it}/loss"):
                        loss = F.cross_entropy(out, y)
                with Range(f"it{it}/backward"):
                    loss.backward()
                with Range(f"it{it}/optimizer"):
                    opt.step()
                with Range(f"it{it}/cleanup"):
                    del out, loss
    run_s = time.time() - t0
    kr = prof.profiler.kineto_results
    # 2.x events carry start_ns(), 1.13's start_us(): the sort is stable either way
    # (events of the same tick keep their recorded order; tree_matches_events checks it)
    start = (lambda e: e.start_ns()) if hasattr(kr.events()[0], "start_ns") else \
        (lambda e: e.start_us())
    evs = sorted((int(start(e)), i, int(e.nbytes())) for i, e in enumerate(kr.events())
                 if e.nbytes() != 0 and str(e.device_type()).endswith("CPU"))
    after = sum(live_storages().values())
    return dict(kr=kr, evs=evs, before=before, after=after, param_bytes=param_bytes,
                buffer_bytes=buffer_bytes, input_bytes=input_bytes, target_bytes=target_bytes,
                desc=desc, classes=classes, run_s=run_s)


def measure(cfg):
    import platform

    import torch
    import torchvision
    train = cfg["mode"] == "train"
    cfg = dict(cfg)
    p = profiled_run(cfg, cfg.pop("expect", None))
    kr, evs, before, after, run_s = p["kr"], p["evs"], p["before"], p["after"], p["run_s"]
    param_bytes, buffer_bytes = p["param_bytes"], p["buffer_bytes"]
    input_bytes, target_bytes = p["input_bytes"], p["target_bytes"]
    desc, classes = p["desc"], p["classes"]
    run, peak, peak_i = 0, 0, -1
    for i, (_, _, nb) in enumerate(evs):
        run += nb
        if run > peak:
            peak, peak_i = run, i
    allocs = tree_allocations(kr)
    tree_ok = [a[2] for a in allocs] == [nb for _, _, nb in evs]
    top, peak_phase, by_phase = [], None, {}
    if tree_ok:
        live, level = {}, 0
        for i, a in enumerate(allocs):
            level += a[2]
            ph = (a[4] or "(outside)").split("/")[-1]
            by_phase[ph] = max(by_phase.get(ph, 0), before + level)
            if a[2] > 0:
                live[a[3]] = a
            else:
                live.pop(a[3], None)
            if i == peak_i:
                peak_phase = a[4]
                top = [dict(bytes=b[2], phase=b[4], op=b[5])
                       for b in sorted(live.values(), key=lambda b: -b[2])[:TOP]]
    accounted = param_bytes + buffer_bytes + input_bytes + target_bytes
    if cfg["source"] == "timm":
        import timm
        cfg = dict(cfg, timm=timm.__version__)
    row = dict(cfg, torch=torch.__version__, torchvision=torchvision.__version__,
               python=platform.python_version(), num_threads=torch.get_num_threads(),
               cpu_isa=host_cpu_isa(), architecture=desc,
               loss=(f"F.cross_entropy(out[B,{classes},H,W], y[B,H,W] int64), mean"
                     if cfg["model"] in SEGMENTATION else
                     f"F.cross_entropy(out[B,{classes}], y[B] int64), mean") if train else None,
               input_shape=list(input_shape(cfg["model"], cfg["batch"], cfg["image"])),
               optimizer_args=(dict(lr=SGD_LR, momentum=SGD_MOMENTUM, foreach=None)
                               if cfg["optimizer"] == "sgd-momentum" else
                               dict(lr=ADAM_LR, foreach=None) if cfg["optimizer"] == "adam" else None),
               # opt.zero_grad()'s default: set_to_none=True from 2.0, False in 1.13
               zero_grad_set_to_none=(torch_major() >= 2) if train else None, iterations=ITERS if train else 1,
               bytes_before=before, peak_bytes=before + peak, peak_phase=peak_phase,
               end_bytes=before + run, memory_events=len(evs),
               param_bytes=param_bytes, buffer_bytes=buffer_bytes, input_bytes=input_bytes,
               target_bytes=target_bytes, bytes_before_unaccounted=before - accounted,
               end_check_ok=after == before + run, tree_matches_events=tree_ok,
               peak_by_phase_kind=by_phase, live_at_peak_top=top, run_s=round(run_s, 2))
    return row


# --------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------


def read_rows(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(ln) for ln in f if ln.strip()]
    return rows


def _forked(conn, args):
    try:
        sys.path.insert(0, HERE)
        if args[0] == "export":
            export_graph(args[1], int(args[2]), args[3], args[4] if len(args) > 4 else "plain")
            conn.send(("", None))
        else:
            conn.send((json.dumps(measure(json.loads(args[1]))), None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send((None, f"{type(e).__name__}: {str(e).strip().splitlines()[-1:] or ''}"))


def run_child(args, timeout):
    """One configuration (or export) in a forked child of this process, which has torch
    imported already (imported once: the child starts with the allocator and the profiler
    untouched, since the parent never runs an op); killed after `timeout` seconds."""
    import multiprocessing as mp
    t0 = time.time()
    rx, tx = mp.Pipe(duplex=False)
    p = mp.get_context("fork").Process(target=_forked, args=(tx, args))
    p.start()
    tx.close()
    line, err = None, f"timeout after {timeout} s"
    if rx.poll(timeout):
        try:
            line, err = rx.recv()
        except EOFError:  # the child died without a word
            err = None
    p.join(5)
    if p.exitcode is None:
        p.kill()
        p.join()
    if line is None and err is None:
        err = f"exit {p.exitcode}"
    return line, err, time.time() - t0


def ensure_graph(cfg, timeout, force=False, variant="plain"):
    path = os.path.join(ROOT, graph_path(cfg, variant))
    if os.path.exists(path) and not force:
        return None
    for _ in range(3):  # the modules export dies by SIGSEGV now and then in a forked child
        _, err, _ = run_child(["export", cfg["model"], str(cfg["image"]), path, variant], timeout)
        if err != "exit -11":
            break
    return err


def cmd_measure(a):
    import torch  # imported once here; each configuration runs in a forked child
    import torchvision  # noqa: F401
    old = torch_major() < 2  # 1.13: OUT's configurations, on the same models (OUT_113)
    a.out = a.out or (OUT_113 if old else OUT)
    done = {r["id"] for r in read_rows(a.out)}
    failed_path = os.path.join(WORK, "failed-113.jsonl" if old else "failed.jsonl")
    failed = set() if a.retry_failed else {r["id"] for r in read_rows(failed_path)}
    todo = [c for c in configs() if c["id"] not in done and c["id"] not in failed
            and (not a.only or any(s in c["id"] for s in a.only))]
    if a.only:  # in the order of --only's strings (cheapest models first, say)
        todo.sort(key=lambda c: next(k for k, s in enumerate(a.only) if s in c["id"]))
    if old:
        ref = {r["id"]: r for r in read_rows(OUT)}
        todo = [dict(c, expect={k: ref[c["id"]][k] for k in
                                ("param_bytes", "buffer_bytes", "architecture")})
                for c in todo if c["id"] in ref]
    if any(c["source"] == "timm" for c in todo):
        try:
            import timm  # noqa: F401
        except ImportError:
            if not old:
                raise
            print("timm not importable: its configurations skipped")
            todo = [c for c in todo if c["source"] != "timm"]
    torch.set_num_threads(1)
    sys.path.insert(0, HERE)
    print(f"{len(todo)} configurations to measure ({len(done)} done, {len(failed)} failed before)")
    os.makedirs(WORK, exist_ok=True)

    lock = threading.Lock()

    def one(c):
        err = ensure_graph(c, a.timeout)
        line, dt = None, 0
        if err:
            err = "export: " + err
        else:
            line, err, dt = run_child(["measure", json.dumps(c)], a.timeout)
        with lock:  # each row as soon as it is measured (an interrupted run loses nothing)
            if err:
                print(f"FAIL {c['id']}: {err}", flush=True)
                with open(failed_path, "a") as f:
                    f.write(json.dumps(dict(id=c["id"], error=err)) + "\n")
                return
            with open(a.out, "a") as f:
                f.write(line + "\n")
            print(f"{c['id']}: {json.loads(line)['peak_bytes'] / 2**20:.1f} MiB ({dt:.0f} s)",
                  flush=True)

    # one model's configurations in one worker, in order: its graph is exported once
    by_model = {}
    for c in todo:
        by_model.setdefault(c["model"], []).append(c)
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for fut in [ex.submit(lambda cs: [one(c) for c in cs], cs) for cs in by_model.values()]:
            fut.result()


def cmd_export(a):
    import torch  # noqa: F401
    seen = set()
    for c in configs():
        if (c["model"], c["image"]) in seen or (a.only and not any(s in c["id"] for s in a.only)):
            continue
        seen.add((c["model"], c["image"]))
        err = ensure_graph(c, a.timeout, force=True, variant=a.variant)
        print(graph_path(c, a.variant), err or "ok", flush=True)


def host_cpu_isa():
    """This machine's --cpu-isa (python/dnnmem/host.py, loaded by its path: the package
    itself would load libdnnmem)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "dnnmem_host", os.path.join(ROOT, "python", "dnnmem", "host.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.host_cpu_isa()


def row_framework(row):
    """--framework for the row: pytorch@MAJOR.MINOR of the torch that measured it."""
    return "pytorch@" + ".".join(re.match(r"(\d+)\.(\d+)", row.get("torch", "2.14")).groups())


def estimate(dnnmem, row, extra=(), variant="plain"):
    """The row's configuration estimated with the framework that measured it
    (row_framework); `cpu_isa` is the measuring machine's (rows before 2026-12-02 have
    none: they were measured on AVX-512 machines, dnnmem's default)."""
    cmd = [dnnmem, "estimate", os.path.join(ROOT, graph_path(row, variant)), "--device", "cpu",
           "--framework", row_framework(row), "--cpu-threads", "1", "--batch-size", str(row["batch"]),
           "--cpu-isa", row.get("cpu_isa", "avx512"), "--json"]
    cmd += ["--mode", "infer"] if row["mode"] == "inference" else \
        ["--mode", "train", "--optimizer", row["optimizer"]]
    p = subprocess.run(cmd + list(extra), capture_output=True, text=True)
    if p.returncode not in (0, 1):
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    return json.loads(p.stdout), None


def figures(rows, key):
    groups = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    print(f"\n{key:<14} {'n':>4} {'median|e|':>10} {'within3%':>9} {'under>3%':>9} {'over>3%':>8}  worst")
    for k in sorted(groups) + ["(all)"]:
        g = rows if k == "(all)" else groups[k]
        es = [r["error"] for r in g]
        worst = max(g, key=lambda r: abs(r["error"]))
        print(f"{k:<14} {len(g):>4} {statistics.median(abs(e) for e in es):>9.2f}% "
              f"{100 * sum(abs(e) <= BAR for e in es) / len(es):>8.0f}% "
              f"{sum(e < -BAR for e in es):>9} {sum(e > BAR for e in es):>8}  "
              f"{worst['id']} {worst['error']:+.1f}%")


def cmd_compare(a):
    rows = read_rows(a.ref)
    misses = {}
    if a.misses and os.path.exists(a.misses):
        with open(a.misses) as f:
            for ln in f:
                ln = ln.split("#", 1)
                if ln[0].strip():
                    misses[ln[0].strip()] = ln[1].strip() if len(ln) > 1 else ""
    bad, done, absent = 0, [], 0
    say = (lambda *x: None) if a.brief else print
    say(f"{'configuration':<40} {'measured':>11} {'estimated':>11} {'error':>8}")
    for r in rows:
        if a.only and not any(s in r["id"] for s in a.only):
            continue
        if not os.path.exists(os.path.join(ROOT, graph_path(r, a.variant))):
            if a.skip_missing:
                absent += 1
                continue
            err = ensure_graph(r, a.timeout, variant=a.variant) if a.export else \
                "graph missing (run `zoo.py export`)"
            if err:
                print(f"{r['id']:<40} {err}")
                bad += 1
                continue
        est, err = estimate(a.dnnmem, r, a.estimate_args.split() if a.estimate_args else (),
                            a.variant)
        if err:
            print(f"{r['id']:<40} error: {err}")
            bad += 1
            continue
        e = 100.0 * (est["peak_allocated_bytes"] - r["peak_bytes"]) / r["peak_bytes"]
        mark = ""
        if abs(e) > BAR and r["id"] not in misses:
            mark, bad = "  MISS", bad + (1 if a.misses else 0)
        elif abs(e) > BAR:
            mark = "  (expected miss)"
        elif r["id"] in misses:
            mark, bad = "  UNEXPECTED PASS", bad + 1
        (print if mark.strip() not in ("", "(expected miss)") else say)(
            f"{r['id']:<40} {r['peak_bytes'] / 2**20:>7.2f} MiB "
            f"{est['peak_allocated_bytes'] / 2**20:>7.2f} MiB {e:>+7.2f}%{mark}")
        if a.verbose and abs(e) > BAR:
            print(f"    measured peak in {r['peak_phase']}; dnnmem's in {est['peak']['phase']} "
                  f"it{est['peak']['iteration']} at {est['peak']['node']}")
            for t in r["live_at_peak_top"][:5]:
                print(f"      torch  {t['bytes'] / 2**20:8.2f} MiB {t['phase']} {t['op']}")
            for t in sorted(est["live_at_peak"], key=lambda t: -t["bytes"])[:5]:
                print(f"      dnnmem {t['bytes'] / 2**20:8.2f} MiB {t['category']} {t['name']}")
        done.append(dict(r, error=e))
    if done:
        for key in ("source", "mode", "family"):
            figures(done, key)
    for m in sorted(set(misses) - {r["id"] for r in rows}):
        print(f"{m}: listed in {a.misses} but not a row")
        bad += 1
    print(f"\n{os.path.relpath(a.ref, ROOT)}: {len(done)} rows compared"
          + (f", {absent} skipped (graphs absent: tools/oracle/zoo.py export makes them)" if absent else "")
          + f", {bad} problems")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("measure", "export", "compare"):
        s = sub.add_parser(name)
        s.add_argument("--only", nargs="*", help="configuration ids containing one of these "
                       "(measure: in this order)")
        s.add_argument("--timeout", type=int, default=600, help="seconds per child process")
    for name in ("export", "compare"):
        sub.choices[name].add_argument("--variant", choices=sorted(VARIANTS), default="plain",
                                       help="which export of each model (VARIANTS)")
    sub.choices["compare"].add_argument("--estimate-args", default="",
                                        help="more dnnmem options (what-ifs), one string")
    m = sub.choices["measure"]
    m.add_argument("--out", help=f"default {os.path.relpath(OUT, ROOT)}, or under torch 1.x "
                   f"{os.path.relpath(OUT_113, ROOT)}")
    m.add_argument("--jobs", type=int, default=1)
    m.add_argument("--retry-failed", action="store_true")
    c = sub.choices["compare"]
    c.add_argument("--ref", default=OUT)
    c.add_argument("--dnnmem", default=os.path.join(ROOT, "build", "dnnmem"))
    c.add_argument("--misses", help="expected misses: 'id  # mechanism' lines")
    c.add_argument("--export", action="store_true", help="export missing graphs (needs torch)")
    c.add_argument("--skip-missing", action="store_true", help="skip rows whose graph is absent")
    c.add_argument("--brief", action="store_true", help="print only problems and the figures")
    c.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    return {"measure": cmd_measure, "export": cmd_export, "compare": cmd_compare}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
