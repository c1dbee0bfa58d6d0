/*
 * html.c: the memory timeline and the allocation events as CSV, and as one
 * self-contained HTML page (no network): the peak, the verdict, the version
 * and command line; a chart of memory by kind over the run (stacked, the
 * CUDA context at the bottom, the allocator's reserved-but-free memory on
 * top; drawn by src/report/report.js: round IEC ticks, zoom and pan, phase
 * and iteration boundaries, the capacity, the peak, a tooltip per step); the
 * breakdown at the peak, the bytes by module there, the advice, the tensors
 * live at the peak and the assumptions.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>


static void csv_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) /* CSV quoting */
        fputs(*s == '"' ? "\"\"" : (char[2]){*s, 0}, f);
    fputc('"', f);
}

int dnnmem_report_timeline_csv(const struct dnnmem_result *r, FILE *f)
{
    fprintf(f, "step,iteration,phase,node,op");
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        fprintf(f, ",%s", dnnmem_category_name((enum dnnmem_category)c));
    fprintf(f, ",allocated,reserved,cuda_context\n");
    for (size_t k = 0; k < r->n_timeline; k++) {
        const struct dnnmem_timeline_point *p = &r->timeline[k];
        fprintf(f, "%zu,%d,%s,", k, p->iteration, p->phase);
        csv_string(f, p->node);
        fprintf(f, ",%s", p->op);
        for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
            fprintf(f, ",%llu", (unsigned long long)p->category_bytes[c]);
        fprintf(f, ",%llu,%llu,%llu\n", (unsigned long long)p->allocated,
                (unsigned long long)p->reserved, (unsigned long long)r->context_bytes);
    }
    return ferror(f) ? -1 : 0;
}

int dnnmem_report_events_csv(const struct dnnmem_result *r, FILE *f)
{
    fprintf(f, "event,step,iteration,phase,node,op,kind,bytes,category,buffer,requested\n");
    uint64_t level = 0;
    for (size_t k = 0; k < r->n_events; k++) {
        const struct dnnmem_event *e = &r->events[k];
        const struct dnnmem_timeline_point *p = &r->timeline[e->step];
        level = e->alloc ? level + e->bytes : level - e->bytes;
        fprintf(f, "%zu,%zu,%d,%s,", k, e->step, p->iteration, p->phase);
        csv_string(f, p->node);
        fprintf(f, ",%s,%s,%llu,%s,", p->op, e->alloc ? "alloc" : "free",
                (unsigned long long)e->bytes, dnnmem_category_name(e->category));
        csv_string(f, e->buffer);
        fprintf(f, ",%llu\n", (unsigned long long)level);
    }
    return ferror(f) ? -1 : 0;
}

static void html_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A JSON string inside a <script> element: escape quotes, backslashes and
 * '<' (so no "</script>" can end the element). */
static void js_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if (*s == '<')
            fputs("\\u003c", f);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* The series of the chart, bottom to top. */
enum { S_CONTEXT = DNNMEM_CAT_COUNT, S_ROUNDING, S_FREE, N_SERIES };
static const char *const series_name[N_SERIES] = {
    [DNNMEM_CAT_WEIGHT] = "weights",         [DNNMEM_CAT_WORKSPACE] = "workspaces",
    [DNNMEM_CAT_INPUT] = "inputs",           [DNNMEM_CAT_ACTIVATION] = "activations",
    [DNNMEM_CAT_SAVED] = "saved for backward", [DNNMEM_CAT_GRADIENT] = "gradients",
    [DNNMEM_CAT_OPTIMIZER] = "optimizer state", [DNNMEM_CAT_TEMPORARY] = "temporaries",
    [DNNMEM_CAT_KV_CACHE] = "kv cache",
    [S_CONTEXT] = "cuda context",            [S_ROUNDING] = "rounding",
    [S_FREE] = "reserved, free"};
static const char *const series_color[N_SERIES] = {
    [DNNMEM_CAT_WEIGHT] = "#4e79a7",   [DNNMEM_CAT_WORKSPACE] = "#9c755f",
    [DNNMEM_CAT_INPUT] = "#76b7b2",    [DNNMEM_CAT_ACTIVATION] = "#59a14f",
    [DNNMEM_CAT_SAVED] = "#edc948",    [DNNMEM_CAT_GRADIENT] = "#e15759",
    [DNNMEM_CAT_OPTIMIZER] = "#b07aa1", [DNNMEM_CAT_TEMPORARY] = "#f28e2b",
    [DNNMEM_CAT_KV_CACHE] = "#ff9da7",
    [S_CONTEXT] = "#bab0ac",           [S_ROUNDING] = "#d4a6c8",
    [S_FREE] = "#e8e8e8"};
/* drawing order, bottom up */
static const int order[N_SERIES] = {S_CONTEXT,           DNNMEM_CAT_WEIGHT,    DNNMEM_CAT_WORKSPACE,
                                    DNNMEM_CAT_INPUT,    DNNMEM_CAT_KV_CACHE,  DNNMEM_CAT_OPTIMIZER,
                                    DNNMEM_CAT_GRADIENT,
                                    DNNMEM_CAT_SAVED,    DNNMEM_CAT_ACTIVATION, DNNMEM_CAT_TEMPORARY,
                                    S_ROUNDING,          S_FREE};

static uint64_t value(const struct dnnmem_result *r, const struct dnnmem_timeline_point *p, int s)
{
    if (s < DNNMEM_CAT_COUNT)
        return p->category_bytes[s];
    uint64_t req = 0;
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        req += p->category_bytes[c];
    switch (s) {
    case S_CONTEXT: return r->context_bytes;
    case S_ROUNDING: return p->allocated > req ? p->allocated - req : 0;
    case S_FREE: return p->reserved > p->allocated ? p->reserved - p->allocated : 0;
    }
    return 0;
}

/* Steps embedded in the page: every step up to this many (a 70B-parameter
 * decoder's training step has ~28,000; a page of 65,536 is ~8 MB), else
 * each bucket's step of the most allocated memory (so the peak is always
 * one): zooming then shows the buckets, not every step. */
#define MAX_POINTS 65536
/* Phase and iteration boundaries drawn, at most */
#define MAX_BOUNDARIES 4096

/* The timeline step where allocated memory first peaks (the result's peak). */
static size_t peak_point(const struct dnnmem_result *r)
{
    size_t best = 0;
    for (size_t k = 1; k < r->n_timeline; k++)
        if (r->timeline[k].allocated > r->timeline[best].allocated)
            best = k;
    return best;
}

/* The steps embedded (*n of them, malloc'd): all, or per bucket the one of
 * the most allocated memory (the first such). NULL when out of memory. */
static size_t *points_of(const struct dnnmem_result *r, size_t *n)
{
    size_t nt = r->n_timeline, np = nt < MAX_POINTS ? nt : MAX_POINTS;
    size_t *pt = malloc((np + 1) * sizeof *pt);
    if (!pt)
        return NULL;
    for (size_t c = 0; c < np; c++) {
        size_t lo = c * nt / np, hi = (c + 1) * nt / np, best = lo;
        for (size_t k = lo; k < hi; k++)
            if (r->timeline[k].allocated > r->timeline[best].allocated)
                best = k;
        pt[c] = best;
    }
    *n = np;
    return pt;
}

/* Whether series s holds anything at any step (an empty one gets no legend
 * entry and no area). */
static bool series_used(const struct dnnmem_result *r, int s)
{
    for (size_t k = 0; k < r->n_timeline; k++)
        if (value(r, &r->timeline[k], s))
            return true;
    return false;
}

static void page_head(FILE *f, const char *path)
{
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>dnnmem: ");
    html_escape(f, path);
    fprintf(f, "</title>\n<style>\n"
               "body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
               "h1{font-size:20px;margin-bottom:6px}h2{font-size:16px;margin:22px 0 6px}"
               "table{border-collapse:collapse}"
               "td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd}"
               "td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
               "tr.total td{font-weight:bold;border-top:2px solid #888}"
               "code{background:#f4f4f4;padding:1px 4px;word-break:break-all}"
               "#meta{color:#555;font-size:12px}"
               "#tip{position:absolute;display:none;background:#fff;border:1px solid #888;"
               "padding:6px 8px;font-size:12px;pointer-events:none;white-space:pre}"
               ".legend span{display:inline-block;margin-right:14px}"
               ".legend i{display:inline-block;width:12px;height:12px;margin-right:4px;"
               "vertical-align:-1px}"
               "#controls button{margin-right:6px}#controls{margin:6px 0}"
               "#chart{user-select:none;cursor:grab}"
               ".bar{display:inline-block;height:9px;background:#59a14f;margin-left:6px}"
               "\n</style></head>\n<body>\n");
}

/* The headline: the peak, where it is, the verdict. */
static void headline(FILE *f, const struct dnnmem_result *r, const char *path)
{
    char b1[32], b2[32], b3[32], b4[32];
    fprintf(f, "<h1>Device memory over the run: ");
    html_escape(f, path);
    fprintf(f, "</h1>\n<p id=\"headline\">Peak <b id=\"total\" data-bytes=\"%llu\">%s</b> (reserved %s"
               " + CUDA context %s; allocated %s), at %s, step %d%s",
            (unsigned long long)r->total_bytes, dm_format_bytes(r->total_bytes, b1),
            dm_format_bytes(r->peak_reserved, b2), dm_format_bytes(r->context_bytes, b3),
            dm_format_bytes(r->peak_allocated, b4), r->peak_phase, r->peak_iteration,
            r->peak_node[0] ? ", node " : "");
    html_escape(f, r->peak_node);
    if (r->peak_op[0]) {
        fprintf(f, " (");
        html_escape(f, r->peak_op);
        fprintf(f, ")");
    }
    fprintf(f, ".");
    if (r->verdict != DNNMEM_VERDICT_NONE) {
        uint64_t gap = r->margin_bytes < 0 ? (uint64_t)-r->margin_bytes : (uint64_t)r->margin_bytes;
        fprintf(f, " Verdict: <b id=\"verdict\">%s</b> in %s (%s %s).",
                dnnmem_verdict_name(r->verdict), dm_format_bytes(r->capacity_bytes, b1),
                r->margin_bytes < 0 ? "short by" : "margin", dm_format_bytes(gap, b2));
    }
    fprintf(f, "</p>\n");
    for (size_t k = 0; k < r->n_warnings; k++) {
        fprintf(f, "<p class=\"warning\">warning: ");
        html_escape(f, r->warnings[k]);
        fprintf(f, "</p>\n");
    }
}

/* What made the page: dnnmem's version and the command line. */
static void meta(FILE *f, const struct dnnmem_page_info *pi)
{
    fprintf(f, "<p id=\"meta\">Made by <span id=\"version\">dnnmem " DNNMEM_VERSION "</span>");
    if (pi && pi->command_line) {
        fprintf(f, ": <code id=\"command\">");
        html_escape(f, pi->command_line);
        fprintf(f, "</code>");
    }
    fprintf(f, "</p>\n");
}

/* The legend (the series that hold anything, top first), the zoom
 * controls, the chart (drawn by the script) and its tooltip. */
static void chart(FILE *f, const struct dnnmem_result *r)
{
    fprintf(f, "<div class=\"legend\" id=\"legend\">");
    for (int i = N_SERIES - 1; i >= 0; i--)
        if (series_used(r, order[i]))
            fprintf(f, "<span data-series=\"%s\"><i style=\"background:%s\"></i>%s</span>",
                    series_name[order[i]], series_color[order[i]], series_name[order[i]]);
    fprintf(f, "</div>\n<div id=\"controls\"><button id=\"zin\">zoom in</button>"
               "<button id=\"zout\">zoom out</button><button id=\"zreset\">whole run</button>"
               "<button id=\"zpeak\">around the peak</button><span id=\"view\"></span>"
               " <small>(wheel: zoom, drag: pan, double-click: the whole run)</small></div>\n"
               "<svg id=\"chart\" width=\"1060\" height=\"440\" "
               "xmlns=\"http://www.w3.org/2000/svg\"></svg>\n<div id=\"tip\"></div>\n");
}

/* One row of bytes cells: the value, or "-" for none. */
static void bytes_cell(FILE *f, uint64_t v)
{
    char b1[32];
    fprintf(f, "<td class=\"n\" data-bytes=\"%llu\">%s</td>", (unsigned long long)v,
            v ? dm_format_bytes(v, b1) : "-");
}

/* The breakdown at the peak, as the text prints it. */
static void breakdown_table(FILE *f, const struct dnnmem_result *r)
{
    fprintf(f, "<h2>Breakdown at the peak</h2>\n<table id=\"breakdown\">\n"
               "<tr><th>kind</th><th class=\"n\">bytes</th><th class=\"n\">tensors</th></tr>\n");
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++) {
        if (!r->category_bytes[c])
            continue;
        fprintf(f, "<tr data-kind=\"%s\"><td>%s</td>", dnnmem_category_name((enum dnnmem_category)c),
                dnnmem_category_name((enum dnnmem_category)c));
        bytes_cell(f, r->category_bytes[c]);
        fprintf(f, "<td class=\"n\">%zu</td></tr>\n", r->category_count[c]);
    }
    static const char *const extra[] = {"rounding", "allocator slack", "cuda context"};
    uint64_t v[] = {r->rounding_bytes, r->slack_bytes, r->context_bytes};
    for (int k = 0; k < 3; k++) {
        if (!v[k])
            continue;
        fprintf(f, "<tr data-kind=\"%s\"><td>%s</td>", extra[k], extra[k]);
        bytes_cell(f, v[k]);
        fprintf(f, "<td></td></tr>\n");
    }
    fprintf(f, "<tr class=\"total\" data-kind=\"total\"><td>total</td>");
    bytes_cell(f, r->total_bytes);
    fprintf(f, "<td class=\"n\">%zu</td></tr>\n</table>\n", r->n_live_total);
}

/* The bytes at the peak by module scope (dnnmem_result.modules): a column
 * per kind the peak holds, the live bytes with a bar, a total row. */
static void modules_table(FILE *f, const struct dnnmem_result *r)
{
    if (!r->n_modules)
        return;
    uint64_t top = 1;
    for (size_t k = 0; k < r->n_modules; k++)
        top = r->modules[k].live_bytes > top ? r->modules[k].live_bytes : top;
    fprintf(f, "<h2>By module at the peak (depth %d)</h2>\n<table id=\"modules\">\n<tr><th>module</th>",
            r->module_depth);
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        if (r->category_bytes[c])
            fprintf(f, "<th class=\"n\">%s</th>", dnnmem_category_name((enum dnnmem_category)c));
    fprintf(f, "<th class=\"n\">live</th><th></th></tr>\n");
    uint64_t live = 0;
    for (size_t k = 0; k <= r->n_modules; k++) {
        const struct dnnmem_module_info *mi = k < r->n_modules ? &r->modules[k] : NULL;
        fprintf(f, "<tr%s><td>", mi ? "" : " class=\"total\"");
        html_escape(f, mi ? mi->name : "total");
        fprintf(f, "</td>");
        for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
            if (r->category_bytes[c])
                bytes_cell(f, mi ? mi->category_bytes[c] : r->category_bytes[c]);
        live += mi ? mi->live_bytes : 0;
        bytes_cell(f, mi ? mi->live_bytes : live);
        fprintf(f, "<td>");
        if (mi)
            fprintf(f, "<span class=\"bar\" style=\"width:%.0fpx\"></span>",
                    1 + 160.0 * (double)mi->live_bytes / (double)top);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table>\n");
}

/* The changes that would make the job fit (the list the CLI prints under
 * "what would change it"). */
static void advice_list(FILE *f, const struct dnnmem_result *r, const struct dnnmem_page_info *pi)
{
    fprintf(f, "<h2>What would change it</h2>\n");
    if (pi && pi->n_advice) {
        fprintf(f, "<table id=\"advice\">\n<tr><th>change</th><th class=\"n\">total</th>"
                   "<th>verdict</th></tr>\n");
        for (size_t k = 0; k < pi->n_advice; k++) {
            fprintf(f, "<tr><td><code>");
            html_escape(f, pi->advice[k].change);
            fprintf(f, "</code></td>");
            bytes_cell(f, pi->advice[k].total_bytes);
            fprintf(f, "<td>%s</td></tr>\n", dnnmem_verdict_name(pi->advice[k].verdict));
        }
        fprintf(f, "</table>\n");
    } else {
        fprintf(f, "<p id=\"advice\">%s</p>\n",
                r->verdict == DNNMEM_VERDICT_NONE ? "No device was given (--gpu or --memory)."
                : r->verdict == DNNMEM_VERDICT_DOES_NOT_FIT ? "No change found that fits."
                                                           : "It fits: nothing to change.");
    }
}

/* The tensors live at the peak and the assumptions. */
static void live_and_assumptions(FILE *f, const struct dnnmem_result *r)
{
    char b1[32];
    fprintf(f, "<h2>Live at the peak (%zu tensors; the largest of each kind)</h2>\n<table id=\"live\">"
               "<tr><th>kind</th><th>tensor</th><th>dtype</th><th>shape</th><th class=\"n\">bytes</th>"
               "<th>made by</th></tr>\n",
            r->n_live_total);
    for (size_t k = 0; k < r->n_live; k++) {
        const struct dnnmem_tensor_info *ti = &r->live[k];
        fprintf(f, "<tr><td>%s</td><td>", dnnmem_category_name(ti->category));
        html_escape(f, ti->name);
        fprintf(f, "</td><td>%s</td><td>", ti->dtype);
        for (int d = 0; d < ti->rank; d++)
            fprintf(f, "%s%lld", d ? "&times;" : "", (long long)ti->dims[d]);
        fprintf(f, "</td><td class=\"n\">%s</td><td>", dm_format_bytes(ti->allocated, b1));
        html_escape(f, ti->producer_node);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table>\n<h2>Assumptions</h2>\n<table id=\"assumptions\">\n");
    for (size_t k = 0; k < r->n_assumptions; k++) {
        fprintf(f, "<tr><td>");
        html_escape(f, r->assumptions[k].key);
        fprintf(f, "</td><td>");
        html_escape(f, r->assumptions[k].value);
        fprintf(f, "</td><td>%s</td></tr>\n", r->assumptions[k].source);
    }
    fprintf(f, "</table>\n");
}

/* Where the phase or the iteration changes, as [step, kind, label]: kind 1
 * a new iteration, 0 a new phase (at most MAX_BOUNDARIES). */
static void boundaries(FILE *f, const struct dnnmem_result *r)
{
    fprintf(f, "\"bounds\":[");
    size_t n = 0;
    for (size_t k = 1; k < r->n_timeline && n < MAX_BOUNDARIES; k++) {
        const struct dnnmem_timeline_point *a = &r->timeline[k - 1], *b = &r->timeline[k];
        bool it = a->iteration != b->iteration, ph = strcmp(a->phase, b->phase) != 0;
        if (!it && !ph)
            continue;
        fprintf(f, "%s[%zu,%d,", n++ ? "," : "", k, it);
        if (it)
            fprintf(f, "\"step %d\"]", b->iteration);
        else
            fprintf(f, "\"%s\"]", b->phase);
    }
    fprintf(f, "],");
}

/* The strings of the points (nodes, ops, phases), each once: an
 * open-addressing table of indices into `s`. */
struct strings {
    const char **s;
    size_t n, mask;
    size_t *slot; /* index + 1; 0: empty */
};

static size_t string_index(struct strings *st, const char *x)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *c = x; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    size_t i = (size_t)h & st->mask;
    for (; st->slot[i]; i = (i + 1) & st->mask)
        if (strcmp(st->s[st->slot[i] - 1], x) == 0)
            return st->slot[i] - 1;
    st->s[st->n] = x;
    st->slot[i] = ++st->n;
    return st->n - 1;
}

/* The points: [step, phase, iteration, node, op, bytes by series (drawing
 * order)...], strings as indices into "strings". False when out of memory. */
static bool points_json(FILE *f, const struct dnnmem_result *r, const size_t *pt, size_t np)
{
    size_t cap = 4;
    while (cap < 6 * np + 8)
        cap *= 2;
    struct strings st = {malloc((3 * np + 1) * sizeof *st.s), 0, cap - 1, calloc(cap, sizeof(size_t))};
    bool ok = st.s && st.slot;
    if (ok) {
        fprintf(f, "\"points\":[");
        for (size_t c = 0; c < np; c++) {
            const struct dnnmem_timeline_point *p = &r->timeline[pt[c]];
            fprintf(f, "%s[%zu,%zu,%d,%zu,%zu", c ? ",\n" : "", pt[c], string_index(&st, p->phase),
                    p->iteration, string_index(&st, p->node), string_index(&st, p->op));
            for (int i = 0; i < N_SERIES; i++)
                fprintf(f, ",%llu", (unsigned long long)value(r, p, order[i]));
            fprintf(f, "]");
        }
        fprintf(f, "],\"strings\":[");
        for (size_t k = 0; k < st.n; k++) {
            fprintf(f, "%s", k ? "," : "");
            js_string(f, st.s[k]);
        }
        fprintf(f, "]");
    }
    free(st.s);
    free(st.slot);
    return ok;
}

/* The data the script draws (the series, the peak, the capacity, the
 * boundaries and the points). False when out of memory. */
static bool chart_data(FILE *f, const struct dnnmem_result *r, const size_t *pt, size_t np)
{
    fprintf(f, "<script id=\"data\" type=\"application/json\">{\"series\":[");
    for (int i = 0; i < N_SERIES; i++)
        fprintf(f, "%s{\"name\":\"%s\",\"color\":\"%s\",\"used\":%s}", i ? "," : "",
                series_name[order[i]], series_color[order[i]],
                series_used(r, order[i]) ? "true" : "false");
    uint64_t top = 0;
    for (size_t c = 0; c < np; c++) {
        uint64_t t = r->timeline[pt[c]].reserved + r->context_bytes;
        top = t > top ? t : top;
    }
    size_t peak = peak_point(r);
    fprintf(f, "],\"steps\":%zu,\"peak\":%zu,\"capacity\":%llu,\"total\":%llu,\"top\":%llu,",
            r->n_timeline, peak, (unsigned long long)r->capacity_bytes,
            (unsigned long long)r->total_bytes, (unsigned long long)top);
    boundaries(f, r);
    bool ok = points_json(f, r, pt, np);
    fprintf(f, "}</script>\n");
    return ok;
}

/* The chart's script (src/report/report.js, made a C string by the Makefile). */
static const char report_js[] =
#include "report_js.h"
    ;

int dnnmem_report_html_page(const struct dnnmem_result *r, const dnnmem_model *m,
                            const struct dnnmem_page_info *pi, FILE *f)
{
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    size_t np = 0, *pt = points_of(r, &np);
    if (!pt)
        return -1;
    page_head(f, info.path);
    headline(f, r, info.path);
    meta(f, pi);
    chart(f, r);
    breakdown_table(f, r);
    modules_table(f, r);
    advice_list(f, r, pi);
    live_and_assumptions(f, r);
    bool ok = chart_data(f, r, pt, np);
    free(pt);
    if (!ok)
        return -1;
    fprintf(f, "<script>\n%s</script>\n</body></html>\n", report_js);
    return ferror(f) ? -1 : 0;
}

int dnnmem_report_html(const struct dnnmem_result *r, const dnnmem_model *m, FILE *f)
{
    return dnnmem_report_html_page(r, m, NULL, f);
}
