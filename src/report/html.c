/*
 * html.c: the memory timeline and the allocation events as CSV, and as one self-contained HTML page:
 * an SVG chart of memory by kind over the run (stacked, the CUDA context at
 * the bottom, the allocator's reserved-but-free memory on top), the device
 * capacity, the peak marked, a tooltip per step (what is live there, by
 * kind), and the tensors live at the peak. No network, no external script.
 */
#include "dnnmem-impl.h"

#include <string.h>

#define MAX_COLUMNS 2000 /* steps drawn; longer runs keep each bucket's highest step */

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

int dnnmem_report_html(const struct dnnmem_result *r, const dnnmem_model *m, FILE *f)
{
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    char b1[32], b2[32];
    /* columns: every step, or each bucket's highest */
    size_t n = r->n_timeline, cols = n < MAX_COLUMNS ? n : MAX_COLUMNS;
    size_t col_of[MAX_COLUMNS];
    for (size_t c = 0; c < cols; c++) {
        size_t lo = c * n / cols, hi = (c + 1) * n / cols, best = lo;
        for (size_t k = lo; k < hi; k++)
            if (r->timeline[k].allocated > r->timeline[best].allocated)
                best = k;
        col_of[c] = best;
    }
    uint64_t top = r->total_bytes > r->capacity_bytes ? r->total_bytes : r->capacity_bytes;
    for (size_t c = 0; c < cols; c++)
        if (r->timeline[col_of[c]].reserved + r->context_bytes > top)
            top = r->timeline[col_of[c]].reserved + r->context_bytes;
    if (!top)
        top = 1;
    const double W = 1000, H = 380, X0 = 70, Y0 = 20;

    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>dnnmem: ");
    html_escape(f, info.path);
    fprintf(f, "</title>\n<style>\n"
               "body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
               "h1{font-size:20px}table{border-collapse:collapse}"
               "td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd}"
               "td.n{text-align:right;font-variant-numeric:tabular-nums}"
               "#tip{position:absolute;display:none;background:#fff;border:1px solid #888;"
               "padding:6px 8px;font-size:12px;pointer-events:none;white-space:pre}"
               ".legend span{display:inline-block;margin-right:14px}"
               ".legend i{display:inline-block;width:12px;height:12px;margin-right:4px;"
               "vertical-align:-1px}\n</style></head>\n<body>\n");
    fprintf(f, "<h1>Device memory over the run: ");
    html_escape(f, info.path);
    fprintf(f, "</h1>\n<p>Peak <b>%s</b> (reserved %s + CUDA context %s), at %s, step %d%s",
            dm_format_bytes(r->total_bytes, b1), dm_format_bytes(r->peak_reserved, b2),
            dm_format_bytes(r->context_bytes, (char[32]){0}), r->peak_phase, r->peak_iteration,
            r->peak_node[0] ? ", node " : "");
    html_escape(f, r->peak_node);
    fprintf(f, ".");
    if (r->verdict != DNNMEM_VERDICT_NONE)
        fprintf(f, " Verdict: <b id=\"verdict\">%s</b> in %s.", dnnmem_verdict_name(r->verdict),
                dm_format_bytes(r->capacity_bytes, b1));
    fprintf(f, "</p>\n<div class=\"legend\">");
    for (int i = N_SERIES - 1; i >= 0; i--)
        fprintf(f, "<span><i style=\"background:%s\"></i>%s</span>", series_color[order[i]],
                series_name[order[i]]);
    fprintf(f, "</div>\n<svg id=\"chart\" width=\"%.0f\" height=\"%.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n",
            X0 + W + 20, Y0 + H + 40);
    /* stacked areas */
    double lower[MAX_COLUMNS], upper[MAX_COLUMNS];
    for (size_t c = 0; c < cols; c++)
        lower[c] = 0;
    for (int i = 0; i < N_SERIES; i++) {
        int s = order[i];
        for (size_t c = 0; c < cols; c++)
            upper[c] = lower[c] + (double)value(r, &r->timeline[col_of[c]], s);
        fprintf(f, "<path class=\"series\" data-series=\"%s\" fill=\"%s\" d=\"", series_name[s],
                series_color[s]);
        for (size_t c = 0; c < cols; c++)
            fprintf(f, "%s%.1f,%.1f", c ? " L" : "M", X0 + W * (double)c / (double)(cols > 1 ? cols - 1 : 1),
                    Y0 + H - H * upper[c] / (double)top);
        for (size_t c = cols; c-- > 0;)
            fprintf(f, " L%.1f,%.1f", X0 + W * (double)c / (double)(cols > 1 ? cols - 1 : 1),
                    Y0 + H - H * lower[c] / (double)top);
        fprintf(f, " Z\"/>\n");
        memcpy(lower, upper, cols * sizeof *lower);
    }
    /* axes, capacity, peak */
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>\n", X0,
            Y0 + H, X0 + W, Y0 + H);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>\n", X0, Y0,
            X0, Y0 + H);
    for (int k = 0; k <= 4; k++)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
                X0 - 4, Y0 + H - H * k / 4 + 4, dm_format_bytes(top * (uint64_t)k / 4, b1));
    if (r->capacity_bytes) {
        double y = Y0 + H - H * (double)r->capacity_bytes / (double)top;
        fprintf(f, "<line id=\"capacity\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" "
                   "stroke=\"#c00\" stroke-dasharray=\"6 4\"/>\n<text x=\"%.0f\" y=\"%.1f\" "
                   "font-size=\"11\" fill=\"#c00\">capacity %s</text>\n",
                X0, y, X0 + W, y, X0 + 4, y - 4, dm_format_bytes(r->capacity_bytes, b1));
    }
    size_t peak_col = 0;
    for (size_t c = 0; c < cols; c++)
        if (r->timeline[col_of[c]].allocated > r->timeline[col_of[peak_col]].allocated)
            peak_col = c;
    double px = X0 + W * (double)peak_col / (double)(cols > 1 ? cols - 1 : 1);
    fprintf(f, "<line id=\"peak\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#000\" "
               "stroke-dasharray=\"2 3\"/>\n<text x=\"%.1f\" y=\"%.0f\" font-size=\"11\">peak</text>\n",
            px, Y0, px, Y0 + H, px + 3, Y0 + 12);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">steps of the run (forward, loss, "
               "backward, optimizer; %zu in all)</text>\n</svg>\n<div id=\"tip\"></div>\n",
            X0, Y0 + H + 30, n);
    /* the tensors live at the peak */
    fprintf(f, "<h2>Live at the peak (%zu tensors; the largest of each kind)</h2>\n<table>"
               "<tr><th>kind</th><th>tensor</th><th>dtype</th><th>shape</th><th>bytes</th>"
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
    fprintf(f, "</table>\n<h2>Assumptions</h2>\n<table>\n");
    for (size_t k = 0; k < r->n_assumptions; k++) {
        fprintf(f, "<tr><td>");
        html_escape(f, r->assumptions[k].key);
        fprintf(f, "</td><td>");
        html_escape(f, r->assumptions[k].value);
        fprintf(f, "</td><td>%s</td></tr>\n", r->assumptions[k].source);
    }
    fprintf(f, "</table>\n");
    /* the data behind the tooltip: per column, its step and bytes by series */
    fprintf(f, "<script id=\"data\" type=\"application/json\">{\"series\":[");
    for (int s = 0; s < N_SERIES; s++)
        fprintf(f, "%s\"%s\"", s ? "," : "", series_name[s]);
    fprintf(f, "],\"x0\":%.0f,\"w\":%.0f,\"points\":[", X0, W);
    for (size_t c = 0; c < cols; c++) {
        const struct dnnmem_timeline_point *p = &r->timeline[col_of[c]];
        fprintf(f, "%s{\"step\":%zu,\"phase\":\"%s\",\"iteration\":%d,\"node\":", c ? "," : "",
                col_of[c], p->phase, p->iteration);
        js_string(f, p->node);
        fprintf(f, ",\"bytes\":[");
        for (int s = 0; s < N_SERIES; s++)
            fprintf(f, "%s%llu", s ? "," : "", (unsigned long long)value(r, p, s));
        fprintf(f, "]}");
    }
    fprintf(f, "]}</script>\n");
    fprintf(f,
            "<script>\n"
            "(function(){\n"
            "var d=JSON.parse(document.getElementById('data').textContent);\n"
            "var svg=document.getElementById('chart'),tip=document.getElementById('tip');\n"
            "function fmt(b){var u=['B','KiB','MiB','GiB','TiB'],i=0;"
            "while(b>=1024&&i<4){b/=1024;i++;}return (i?b.toFixed(2):b)+' '+u[i];}\n"
            "svg.addEventListener('mousemove',function(e){\n"
            " var r=svg.getBoundingClientRect(),x=e.clientX-r.left-d.x0;\n"
            " var n=d.points.length,i=Math.round(x/d.w*(n-1));\n"
            " if(i<0||i>=n){tip.style.display='none';return;}\n"
            " var p=d.points[i],t='step '+p.step+', '+p.phase+' (iteration '+p.iteration+')'+"
            "(p.node?'\\n'+p.node:'')+'\\n',sum=0;\n"
            " for(var k=d.series.length-1;k>=0;k--){if(p.bytes[k]){t+='\\n'+d.series[k]+': '"
            "+fmt(p.bytes[k]);sum+=p.bytes[k];}}\n"
            " tip.textContent=t+'\\n\\ntotal: '+fmt(sum);tip.style.display='block';\n"
            " tip.style.left=(e.pageX+14)+'px';tip.style.top=(e.pageY+14)+'px';});\n"
            "svg.addEventListener('mouseleave',function(){tip.style.display='none';});\n"
            "document.body.dataset.series=document.querySelectorAll('path.series').length;\n"
            "document.body.dataset.ready='1';\n"
            "})();\n</script>\n</body></html>\n");
    return ferror(f) ? -1 : 0;
}
