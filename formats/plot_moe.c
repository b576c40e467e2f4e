/* plot_moe.c - the panels `moec plot` adds below the loss curves when the
 * metrics carry them (train/moe_metrics.c): the language-model loss and the
 * auxiliary loss apart (each on its own scale), and per MoE layer a heatmap
 * of the expert load over the logged steps: a row per expert, a column per
 * log line, the colour the expert's share of the routed tokens times the
 * number of experts (white 1: balanced; red above: overloaded, up to dark
 * red at E (it took everything); blue below: underused, dark blue at 0).
 * Lines that do not parse, or have no "step", are skipped here: the loss
 * reader (plot.c) has already reported bad input. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

enum { PW = 900, PANEL_H = 170, HEAT_ROW = 14, ML = 78, MR = 26, MAXL = 64, MAXE = 64 };

typedef struct MoeRec {
    double step, lm, aux;
    int has_lm, nl;
    int experts[MAXL];
    float load[MAXL][MAXE];
} MoeRec;

typedef struct MoeData {
    MoeRec *r;
    size_t n, cap;
    int nl;
    char node[MAXL][96];
} MoeData;

static void load(MoeData *d, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
        const cJSON *lm = cJSON_GetObjectItemCaseSensitive(o, "lm_loss");
        const cJSON *aux = cJSON_GetObjectItemCaseSensitive(o, "aux_loss");
        const cJSON *moe = cJSON_GetObjectItemCaseSensitive(o, "moe");
        if (o && cJSON_IsNumber(st) && (cJSON_IsNumber(lm) || cJSON_IsArray(moe))) {
            if (d->n == d->cap) {
                size_t nc = d->cap ? d->cap * 2 : 64;
                MoeRec *nr = realloc(d->r, nc * sizeof *nr);
                if (!nr) {
                    cJSON_Delete(o);
                    break;
                }
                d->r = nr;
                d->cap = nc;
            }
            MoeRec *r = &d->r[d->n++];
            memset(r, 0, sizeof *r);
            r->step = st->valuedouble;
            r->has_lm = cJSON_IsNumber(lm) && cJSON_IsNumber(aux);
            r->lm = r->has_lm ? lm->valuedouble : NAN;
            r->aux = r->has_lm ? aux->valuedouble : NAN;
            const cJSON *layer;
            cJSON_ArrayForEach(layer, moe)
            {
                if (r->nl >= MAXL)
                    break;
                const cJSON *ld = cJSON_GetObjectItemCaseSensitive(layer, "load");
                const cJSON *nd = cJSON_GetObjectItemCaseSensitive(layer, "node");
                int e = 0;
                const cJSON *x;
                cJSON_ArrayForEach(x, ld)
                {
                    if (e < MAXE)
                        r->load[r->nl][e++] = cJSON_IsNumber(x) ? (float)x->valuedouble : NAN;
                }
                r->experts[r->nl] = e;
                if (cJSON_IsString(nd) && !d->node[r->nl][0])
                    snprintf(d->node[r->nl], sizeof d->node[0], "%s", nd->valuestring);
                r->nl++;
            }
            if (r->nl > d->nl)
                d->nl = r->nl;
        }
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
}

static void xml(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

/* a small line chart of one series in [y0, y0 + PANEL_H) */
static void line_panel(FILE *f, const MoeData *d, int which, double y0, double smin, double smax, const char *label,
                       const char *color)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < d->n; i++) {
        double v = which ? d->r[i].aux : d->r[i].lm;
        if (isfinite(v)) {
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    }
    double top = y0 + 28, bot = y0 + PANEL_H - 24, x0 = ML, x1 = PW - MR;
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">", ML, y0 + 18);
    xml(f, label);
    if (isfinite(lo))
        fprintf(f, " (from %.4g to %.4g)", lo, hi);
    fputs("</text>\n", f);
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", ML, top,
            PW - ML - MR, bot - top);
    if (!isfinite(lo))
        return;
    if (hi - lo < 1e-12) {
        lo -= 0.5;
        hi += 0.5;
    }
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#444\">%.4g</text>\n", ML - 6, top + 4, hi);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#444\">%.4g</text>\n", ML - 6, bot + 4, lo);
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"", color);
    for (size_t i = 0; i < d->n; i++) {
        double v = which ? d->r[i].aux : d->r[i].lm;
        if (!isfinite(v))
            continue;
        double x = smax > smin ? x0 + (x1 - x0) * (d->r[i].step - smin) / (smax - smin) : (x0 + x1) / 2;
        double y = bot - (bot - top) * (v - lo) / (hi - lo);
        fprintf(f, "%.1f,%.1f ", x, y);
    }
    fputs("\"/>\n", f);
}

static void heat_color(double r, char out[8])
{
    /* r = load x E: 0 -> dark blue, 1 -> white, >= 2 -> dark red (log scale above 1) */
    double t;
    int R, G, B;
    if (!isfinite(r)) {
        snprintf(out, 8, "#cccccc");
        return;
    }
    if (r < 1) {
        t = r;  /* 0..1 */
        R = (int)(40 + 215 * t);
        G = (int)(80 + 175 * t);
        B = (int)(170 + 85 * t);
    } else {
        t = log2(r) > 1 ? 1 : log2(r);
        R = (int)(255 - 75 * t);
        G = (int)(255 - 225 * t);
        B = (int)(255 - 225 * t);
    }
    snprintf(out, 8, "#%02x%02x%02x", R, G, B);
}

int plot_moe_panels_height(const char *jsonl_path, void **state)
{
    MoeData *d = calloc(1, sizeof *d);
    *state = d;
    if (!d)
        return 0;
    load(d, jsonl_path);
    int h = 0, any_lm = 0;
    for (size_t i = 0; i < d->n; i++)
        any_lm |= d->r[i].has_lm;
    if (any_lm)
        h += 2 * PANEL_H;
    for (int l = 0; l < d->nl; l++) {
        int E = 0;
        for (size_t i = 0; i < d->n; i++)
            E = l < d->r[i].nl && d->r[i].experts[l] > E ? d->r[i].experts[l] : E;
        h += 44 + E * HEAT_ROW;
    }
    if (d->nl)
        h += 30;
    return h;
}

void plot_moe_panels(FILE *f, void *state, double y0)
{
    MoeData *d = state;
    if (!d)
        return;
    if (!f) {
        free(d->r);
        free(d);
        return;
    }
    double smin = INFINITY, smax = -INFINITY;
    int any_lm = 0;
    for (size_t i = 0; i < d->n; i++) {
        smin = d->r[i].step < smin ? d->r[i].step : smin;
        smax = d->r[i].step > smax ? d->r[i].step : smax;
        any_lm |= d->r[i].has_lm;
    }
    double y = y0;
    if (any_lm) {
        line_panel(f, d, 0, y, smin, smax, "language-model loss (lm_loss, without the auxiliary terms)", "#1f77b4");
        y += PANEL_H;
        line_panel(f, d, 1, y, smin, smax, "auxiliary loss the objective adds (aux_loss)", "#2ca02c");
        y += PANEL_H;
    }
    for (int l = 0; l < d->nl; l++) {
        int E = 0;
        for (size_t i = 0; i < d->n; i++)
            E = l < d->r[i].nl && d->r[i].experts[l] > E ? d->r[i].experts[l] : E;
        char title[200];
        snprintf(title, sizeof title, "expert load, MoE layer %d (%s): steps %.0f to %.0f", l, d->node[l], smin, smax);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">", ML, y + 20);
        xml(f, title);
        fputs("</text>\n", f);
        double top = y + 30, cw = d->n ? (double)(PW - ML - MR) / (double)d->n : 0;
        for (int e = 0; e < E; e++) {
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\" fill=\"#444\">expert %d</text>\n",
                    ML - 6, top + e * HEAT_ROW + 10, e);
            for (size_t i = 0; i < d->n; i++) {
                const MoeRec *r = &d->r[i];
                double v = l < r->nl && e < r->experts[l] ? (double)r->load[l][e] * r->experts[l] : NAN;
                char c[8];
                heat_color(v, c);
                fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>\n",
                        ML + cw * (double)i, top + e * HEAT_ROW, cw + 0.3, HEAT_ROW, c);
            }
        }
        y = top + E * HEAT_ROW + 14;
    }
    if (d->nl)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"#444\">colour: the expert's share of the routed "
                "tokens x experts; white 1 (balanced), red above (dark at 2x and more), blue below (dark at 0)</text>\n",
                ML, y + 12);
    free(d->r);
    free(d);
}
