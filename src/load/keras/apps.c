/* apps.c: the default input size of a Keras Application whose JSON leaves
 * the image size open (an input [None, None, None, 3]: include_top=False or
 * input_shape=None with weights=None). Such a model is recognised by the
 * name keras.applications gives it (its top-level config "name", or that of
 * the model a Sequential wraps first) and by its structure (one image input
 * of 3 channels, height and width open); the size is the `default_size` the
 * application passes to imagenet_utils.obtain_input_shape, which is what
 * `keras.applications.X(weights=None)` builds when no input_shape is given
 * and what its ImageNet weights were trained at. The estimate states it as
 * an assumption (dims.height, dims.width) that --dim overrides.
 *
 * Sources (keras-team/keras, keras/src/applications/, as installed with
 * keras 3.15.1; the same names and sizes in keras 2.x keras/applications/):
 * inception_v3.py, xception.py, inception_resnet_v2.py default_size=299;
 * resnet.py, resnet_v2.py, vgg16.py, vgg19.py, densenet.py default_size=224;
 * nasnet.py NASNetMobile 224, NASNetLarge 331 (Keras 2.1.6 named both
 * "NASNet": not recognised); efficientnet.py B0..B7 224, 240, 260, 300, 380,
 * 456, 528, 600; efficientnet_v2.py B0..B3 224, 240, 260, 300, S 384, M and
 * L 480; convnext.py MODEL_CONFIGS 224; mobilenet_v3.py 224 (its weights
 * are the 224 ones); mobilenet.py and mobilenet_v2.py name the model
 * f"mobilenet_{alpha:0.2f}_{rows}" / "mobilenetv2_..._{rows}", the rows
 * being the size it was built for.
 */
#include "keras.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name; /* the Functional's name as keras.applications sets it */
    int64_t size;
    const char *app;  /* the application, for the assumption line */
} apps[] = {
    {"inception_v3", 299, "InceptionV3"},
    {"xception", 299, "Xception"},
    {"inception_resnet_v2", 299, "InceptionResNetV2"},
    {"resnet50", 224, "ResNet50"},
    {"resnet101", 224, "ResNet101"},
    {"resnet152", 224, "ResNet152"},
    {"resnet50v2", 224, "ResNet50V2"},
    {"resnet101v2", 224, "ResNet101V2"},
    {"resnet152v2", 224, "ResNet152V2"},
    {"vgg16", 224, "VGG16"},
    {"vgg19", 224, "VGG19"},
    {"densenet121", 224, "DenseNet121"},
    {"densenet169", 224, "DenseNet169"},
    {"densenet201", 224, "DenseNet201"},
    {"nasnet_mobile", 224, "NASNetMobile"},
    {"nasnet_large", 331, "NASNetLarge"},
    {"efficientnetb0", 224, "EfficientNetB0"},
    {"efficientnetb1", 240, "EfficientNetB1"},
    {"efficientnetb2", 260, "EfficientNetB2"},
    {"efficientnetb3", 300, "EfficientNetB3"},
    {"efficientnetb4", 380, "EfficientNetB4"},
    {"efficientnetb5", 456, "EfficientNetB5"},
    {"efficientnetb6", 528, "EfficientNetB6"},
    {"efficientnetb7", 600, "EfficientNetB7"},
    {"efficientnetv2-b0", 224, "EfficientNetV2B0"},
    {"efficientnetv2-b1", 240, "EfficientNetV2B1"},
    {"efficientnetv2-b2", 260, "EfficientNetV2B2"},
    {"efficientnetv2-b3", 300, "EfficientNetV2B3"},
    {"efficientnetv2-s", 384, "EfficientNetV2S"},
    {"efficientnetv2-m", 480, "EfficientNetV2M"},
    {"efficientnetv2-l", 480, "EfficientNetV2L"},
    {"convnext_tiny", 224, "ConvNeXtTiny"},
    {"convnext_small", 224, "ConvNeXtSmall"},
    {"convnext_base", 224, "ConvNeXtBase"},
    {"convnext_large", 224, "ConvNeXtLarge"},
    {"convnext_xlarge", 224, "ConvNeXtXLarge"},
    {"MobileNetV3Small", 224, "MobileNetV3Small"},
    {"MobileNetV3Large", 224, "MobileNetV3Large"},
};

/* "mobilenet_1.00_224", "mobilenetv2_0.35_96": the rows after the last '_'. */
static int64_t mobilenet_rows(const char *name, const char **app)
{
    const char *rest;
    if (!strncmp(name, "mobilenetv2_", 12)) {
        rest = name + 12;
        *app = "MobileNetV2";
    } else if (!strncmp(name, "mobilenet_", 10)) {
        rest = name + 10;
        *app = "MobileNet";
    } else
        return 0;
    const char *u = strrchr(rest, '_');
    if (!u || u == rest || !u[1] || strlen(u + 1) > 4)
        return 0;
    int64_t v = 0;
    for (const char *p = u + 1; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    return v >= 32 && v <= 1024 ? v : 0;
}

/* The application a model name is, with its size; 0 when none. */
static int64_t app_size(const char *name, const char **app)
{
    if (!name)
        return 0;
    for (size_t i = 0; i < sizeof apps / sizeof apps[0]; i++)
        if (!strcmp(name, apps[i].name)) {
            *app = apps[i].app;
            return apps[i].size;
        }
    return mobilenet_rows(name, app);
}

/* The name of the model `root` is, or of the model a top-level Sequential
 * runs first (an application wrapped for transfer learning). */
static const char *model_name(json_t *root, const char **wrapped)
{
    json_t *cfg = dm_kr_field(root, "config");
    const char *name = json_is_object(cfg) ? json_string_value(dm_kr_field(cfg, "name")) : NULL;
    const char *cls = json_string_value(dm_kr_field(root, "class_name"));
    const char *dummy;
    *wrapped = NULL;
    if (app_size(name, &dummy) || !cls || strcmp(cls, "Sequential"))
        return name;
    json_t *layers = json_is_array(cfg) ? cfg : dm_kr_field(cfg, "layers");
    for (size_t i = 0; i < json_array_size(layers); i++) {
        json_t *l = json_array_get(layers, i);
        const char *lc = json_string_value(dm_kr_field(l, "class_name"));
        if (lc && !strcmp(lc, "InputLayer"))
            continue;
        if (lc && (!strcmp(lc, "Functional") || !strcmp(lc, "Model"))) {
            json_t *lcfg = dm_kr_field(l, "config");
            *wrapped = name;
            return json_is_object(lcfg) ? json_string_value(dm_kr_field(lcfg, "name")) : NULL;
        }
        break;
    }
    return name;
}

enum dnnmem_status dm_kr_app_defaults(struct keras *k, json_t *root)
{
    struct dm_graph *g = k->g;
    if (g->n_inputs != 1)
        return DNNMEM_OK;
    const struct dm_tensor *in = &g->tensors[g->inputs[0]];
    /* NHWC [batch, height, width, 3] with height and width open */
    if (in->rank != 4 || in->dims[1].sym < 0 || in->dims[2].sym < 0 || in->dims[3].sym >= 0 ||
        in->dims[3].value != 3)
        return DNNMEM_OK;
    const char *wrapped, *app = NULL;
    const char *name = model_name(root, &wrapped);
    int64_t size = app_size(name, &app);
    if (!size)
        return DNNMEM_OK;
    int64_t *def = dm_arena_array(&g->arena, (size_t)g->n_symbols, sizeof *def);
    if (!def)
        return dm_kr_oom(k), k->st;
    for (int32_t i = 0; i < g->n_symbols; i++)
        def[i] = -1;
    def[in->dims[1].sym] = size;
    def[in->dims[2].sym] = size;
    g->sym_default = def;
    g->n_sym_default = g->n_symbols;
    g->sym_default_why =
        wrapped ? dm_arena_printf(&g->arena,
                                  "keras.applications.%s's default_size, the model Sequential "
                                  "'%s' wraps first being named '%s'",
                                  app, wrapped, name)
                : dm_arena_printf(&g->arena,
                                  "keras.applications.%s's default_size, the model being "
                                  "named '%s'",
                                  app, name);
    if (!g->sym_default_why)
        return dm_kr_oom(k), k->st;
    return DNNMEM_OK;
}
