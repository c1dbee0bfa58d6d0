/* functional.c: Keras functional models, a graph of layer calls joined by their
 * inbound nodes (keras.h). */

#include "keras.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reference to a layer output: ["name", node_index, tensor_index, ...]
 * (Keras 2) or {"class_name": "__keras_tensor__", "config": {"keras_history":
 * [...]}} (Keras 3). */
struct ref {
    const char *layer;
    int64_t node, tensor;
};

static bool parse_history(json_t *h, struct ref *r)
{
    if (!json_is_array(h) || json_array_size(h) < 3 || !json_is_string(json_array_get(h, 0)) ||
        !dm_kr_json_int(json_array_get(h, 1), &r->node) ||
        !dm_kr_json_int(json_array_get(h, 2), &r->tensor))
        return false;
    r->layer = json_string_value(json_array_get(h, 0));
    return r->node >= 0 && r->tensor >= 0;
}

static void collect_refs(struct keras *k, json_t *v, struct ref *refs, int *n, int depth);

/* Tensors passed by keyword: MultiHeadAttention's value, then key (other
 * keyword tensors, such as masks, are not modelled). */
static void collect_kwargs(struct keras *k, json_t *kw, struct ref *refs, int *n, int depth)
{
    static const char *const keys[] = {"value", "key"};
    for (size_t i = 0; i < 2 && json_is_object(kw); i++)
        if (dm_kr_field(kw, keys[i]))
            collect_refs(k, dm_kr_field(kw, keys[i]), refs, n, depth + 1);
}

/* Collect the tensor references of an inbound node into refs. */
static void collect_refs(struct keras *k, json_t *v, struct ref *refs, int *n, int depth)
{
    if (k->st != DNNMEM_OK || depth > 8)
        return;
    struct ref r;
    if (json_is_object(v)) {
        const char *cn = json_string_value(dm_kr_field(v, "class_name"));
        if (cn && !strcmp(cn, "__keras_tensor__")) {
            if (!parse_history(dm_kr_field(dm_kr_field(v, "config"), "keras_history"), &r)) {
                dm_kr_fail(k, DNNMEM_E_MODEL, "an input has no valid keras_history");
                return;
            }
        } else
            return; /* other arguments (constants, kwargs) */
    } else if (json_is_array(v) && parse_history(v, &r)) {
        /* a Keras 2 reference */
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            collect_refs(k, json_array_get(v, i), refs, n, depth + 1);
        return;
    } else
        return;
    if (*n >= MAX_IN) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "more than %d inputs to one layer", MAX_IN);
        return;
    }
    refs[(*n)++] = r;
    if (json_is_array(v) && json_array_size(v) >= 4) /* Keras 2: [name, node, tensor, kwargs] */
        collect_kwargs(k, json_array_get(v, 3), refs, n, depth);
}

/* One call of a layer in a functional model (its inbound node). */
struct call {
    bool done;
    int n_out;
    struct kt out[MAX_OUT];
};

struct flayer {
    json_t *layer;
    const char *name;
    json_t *nodes;   /* inbound_nodes */
    int n_calls;
    struct call *calls;
};

static struct flayer *find_layer(struct flayer *ls, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (ls[i].name && !strcmp(ls[i].name, name))
            return &ls[i];
    return NULL;
}

/* The tensor a reference names, NULL while its layer call has not run. */
static const struct kt *resolve(struct keras *k, struct flayer *ls, size_t n, const struct ref *r,
                                bool *missing)
{
    struct flayer *l = find_layer(ls, n, r->layer);
    *missing = false;
    if (!l || r->node >= l->n_calls) {
        *missing = true;
        dm_kr_fail(k, DNNMEM_E_MODEL, "the input '%s' (call %lld) is no layer output of the model",
                   r->layer, (long long)r->node);
        return NULL;
    }
    struct call *c = &l->calls[r->node];
    if (!c->done)
        return NULL;
    if (r->tensor >= c->n_out) {
        *missing = true;
        dm_kr_fail(k, DNNMEM_E_MODEL, "the input '%s' has no output %lld", r->layer,
                   (long long)r->tensor);
        return NULL;
    }
    return &c->out[r->tensor];
}

/* The endpoints list of input_layers / output_layers: [[name, node, tensor],
 * ...] or one [name, node, tensor]. */
static int endpoints(struct keras *k, json_t *v, struct ref *refs, const char *what)
{
    int n = 0;
    struct ref r;
    if (parse_history(v, &r)) {
        refs[0] = r;
        return 1;
    }
    if (!json_is_array(v) || json_array_size(v) < 1) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is missing or empty", what);
        return 0;
    }
    for (size_t i = 0; i < json_array_size(v) && k->st == DNNMEM_OK; i++) {
        if (n >= MAX_IN) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "more than %d entries in '%s'", MAX_IN, what);
            return 0;
        }
        if (!parse_history(json_array_get(v, i), &refs[n++]))
            dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' holds a malformed entry", what);
    }
    return n;
}

void dm_kr_build_functional(struct keras *k, json_t *cfg, const struct kt *in, int n_in,
                            struct layer_io *io)
{
    json_t *layers = dm_kr_field(cfg, "layers");
    size_t n = json_array_size(layers);
    if (!json_is_array(layers) || n == 0) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'layers' is missing or empty");
        return;
    }
    struct ref *ins = calloc(MAX_IN, sizeof *ins), *outs = calloc(MAX_IN, sizeof *outs);
    struct ref *refs = calloc(MAX_IN, sizeof *refs);
    struct flayer *ls = calloc(n, sizeof *ls);
    if (!ins || !outs || !refs || !ls) {
        dm_kr_oom(k);
        goto out;
    }
    int n_ins = endpoints(k, dm_kr_field(cfg, "input_layers"), ins, "input_layers");
    int n_outs = endpoints(k, dm_kr_field(cfg, "output_layers"), outs, "output_layers");
    if (k->st != DNNMEM_OK)
        goto out;
    if (in && n_in != n_ins) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "the nested model takes %d inputs but is called with %d",
                   n_ins, n_in);
        goto out;
    }
    for (size_t i = 0; i < n && k->st == DNNMEM_OK; i++) {
        json_t *l = json_array_get(layers, i);
        ls[i].layer = l;
        ls[i].name = json_string_value(dm_kr_field(l, "name"));
        if (!ls[i].name)
            ls[i].name = dm_kr_layer_name(l);
        if (!ls[i].name) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "layer #%zu has no name", i);
            break;
        }
        if (find_layer(ls, i, ls[i].name)) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "two layers are named '%s'", ls[i].name);
            break;
        }
        ls[i].nodes = dm_kr_field(l, "inbound_nodes");
        size_t nc = json_array_size(ls[i].nodes);
        const char *cls = json_string_value(dm_kr_field(l, "class_name"));
        bool is_input = cls && !strcmp(cls, "InputLayer");
        ls[i].n_calls = is_input ? 1 : (int)(nc < 64 ? nc : 64);
        if (!is_input && nc == 0)
            ls[i].n_calls = 0; /* a layer never called: no outputs */
        ls[i].calls = calloc((size_t)ls[i].n_calls + 1, sizeof *ls[i].calls);
        if (!ls[i].calls)
            dm_kr_oom(k);
    }
    /* the model's inputs: graph inputs at the top, the caller's tensors when nested */
    for (int j = 0; j < n_ins && k->st == DNNMEM_OK; j++) {
        struct flayer *l = find_layer(ls, n, ins[j].layer);
        if (!l || l->n_calls < 1) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "input layer '%s' is not a layer of the model",
                       ins[j].layer);
            break;
        }
        struct call *c = &l->calls[0];
        if (in)
            c->out[0] = in[j];
        else {
            struct saved s = dm_kr_enter_layer(k, l->layer, 0);
            dm_kr_input_layer(k, l->layer, &c->out[0]);
            dm_kr_leave_layer(k, s);
        }
        c->n_out = 1;
        c->done = true;
    }
    /* layer calls in dependency order: passes over the list, each running the
     * calls whose inputs are ready (one pass when the list is topological) */
    for (bool progress = true; progress && k->st == DNNMEM_OK;) {
        progress = false;
        for (size_t i = 0; i < n && k->st == DNNMEM_OK; i++) {
            struct flayer *l = &ls[i];
            for (int c = 0; c < l->n_calls && k->st == DNNMEM_OK; c++) {
                if (l->calls[c].done)
                    continue;
                json_t *nodes = json_array_get(l->nodes, (size_t)c);
                int nr = 0;
                json_t *args = json_is_object(nodes) ? dm_kr_field(nodes, "args") : nodes;
                collect_refs(k, args, refs, &nr, 0);
                if (json_is_object(nodes)) /* Keras 3: tensors passed by keyword too */
                    collect_kwargs(k, dm_kr_field(nodes, "kwargs"), refs, &nr, 0);
                if (k->st != DNNMEM_OK)
                    break;
                struct kt tin[MAX_IN];
                bool ready = nr > 0, missing;
                for (int j = 0; j < nr && ready; j++) {
                    const struct kt *t = resolve(k, ls, n, &refs[j], &missing);
                    if (!t)
                        ready = false;
                    else
                        tin[j] = *t;
                }
                if (k->st != DNNMEM_OK)
                    break;
                if (nr == 0 && !json_array_size(l->nodes))
                    continue; /* an InputLayer the model does not list among its inputs */
                if (nr == 0) {
                    struct saved s = dm_kr_enter_layer(k, l->layer, c);
                    dm_kr_fail(k, DNNMEM_E_MODEL, "an inbound node without inputs (an "
                               "InputLayer not listed in input_layers?)");
                    dm_kr_leave_layer(k, s);
                    break;
                }
                if (!ready)
                    continue;
                struct layer_io lio = {.in = tin, .n_in = nr};
                struct saved s = dm_kr_enter_layer(k, l->layer, c);
                dm_kr_call_layer(k, l->layer, &lio);
                dm_kr_leave_layer(k, s);
                if (k->st != DNNMEM_OK)
                    break;
                l->calls[c].n_out = lio.n_out;
                memcpy(l->calls[c].out, lio.out, sizeof lio.out);
                l->calls[c].done = true;
                progress = true;
            }
        }
    }
    io->n_out = 0;
    for (int j = 0; j < n_outs && k->st == DNNMEM_OK; j++) {
        bool missing;
        const struct kt *t = resolve(k, ls, n, &outs[j], &missing);
        if (!t) {
            if (k->st == DNNMEM_OK)
                dm_kr_fail(k, DNNMEM_E_MODEL, "output '%s' is never computed (its inputs "
                           "form a cycle or are missing)", outs[j].layer);
            break;
        }
        if (io->n_out >= MAX_OUT) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "more than %d model outputs", MAX_OUT);
            break;
        }
        io->out[io->n_out++] = *t;
    }
out:
    for (size_t i = 0; ls && i < n; i++)
        free(ls[i].calls);
    free(ls);
    free(ins);
    free(outs);
    free(refs);
}
