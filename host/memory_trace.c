/* memory_trace.c: a step's tensors as Chrome trace / Perfetto JSON
 * (memory_trace.h). Each tensor is a complete ("X") slice from its
 * allocation to its free, on one of a few tracks packed so that slices of
 * one track never overlap; a "live bytes" counter follows every event; an
 * instant event marks the peak. */
#include "memory_trace.h"
#include "executor.h"
#include "atomic_file.h"
#include "error.h"
#include "utf8.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S CLREMAT_MAX_SLOTS
#define NAME_STRIDE (CLREMAT_NAME_LEN + 32)

/* Name slots of a plan trace: per layer S slot names, the gradient, the
 * workspace. */
static char *name_at(char *names, int layer, int k) { return names + ((size_t)layer * (S + 2) + (size_t)k) * NAME_STRIDE; }

int clremat_trace_from_plan(const clremat_graph *g, const clremat_layer_cost *costs, const clremat_plan *plan,
                            clremat_trace_event **events, int *n, char **names)
{
    int nl = g->n_layers, cap = 0, k = 0;
    clremat_trace_event *ev = NULL;
    char *nm = calloc((size_t)nl * (S + 2), NAME_STRIDE);
    *events = NULL;
    *n = 0;
    *names = NULL;
    if (!nm)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "memory trace: out of host memory");
    for (int l = 0; l < nl; l++) /* the executor's names, its workspace kind for the plan's one */
        for (int kind = 0; kind < S + 2; kind++)
            clremat_tensor_name(name_at(nm, l, kind), NAME_STRIDE, g, costs, l, kind);
    for (int i = 0; i < plan->n_actions; i++) /* slots or input gradients, a free, the workspace twice */
        cap += S + 3 + (plan->actions[i].layer >= 0 ? g->layers[plan->actions[i].layer].n_inputs : 0);
    ev = malloc(sizeof *ev * (size_t)(cap + 1));
    if (!ev) {
        free(nm);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "memory trace: out of host memory");
    }
    for (int i = 0; i < plan->n_actions; i++) {
        const clremat_action *a = &plan->actions[i];
        const clremat_layer_cost *c = a->layer >= 0 ? &costs[a->layer] : NULL;
        size_t temp = 0;
        switch (a->kind) {
        case CLREMAT_ACT_FORWARD:
        case CLREMAT_ACT_RECOMPUTE:
        case CLREMAT_ACT_RECOMPUTE_ACT:
            for (int s = 0; s < c->n_slots; s++)
                if (a->alloc_slots >> s & 1u)
                    ev[k++] = (clremat_trace_event){name_at(nm, a->layer, s), (int64_t)c->slot_bytes[s], i};
            temp = a->kind == CLREMAT_ACT_RECOMPUTE_ACT ? 0 : c->fwd_temp_bytes;
            break;
        case CLREMAT_ACT_BACKWARD: {
            const clremat_layer *L = &g->layers[a->layer];
            for (int in = 0; in < L->n_inputs; in++)
                if (a->alloc_din >> in & 1u) {
                    int P = L->inputs[in];
                    ev[k++] = (clremat_trace_event){name_at(nm, P, S), (int64_t)costs[P].slot_bytes[0], i};
                }
            temp = c->bwd_temp_bytes;
            break;
        }
        case CLREMAT_ACT_FREE:
            ev[k++] = (clremat_trace_event){name_at(nm, a->layer, a->slot), -(int64_t)c->slot_bytes[a->slot], i};
            break;
        case CLREMAT_ACT_FREE_GRAD:
            ev[k++] = (clremat_trace_event){name_at(nm, a->layer, S), -(int64_t)c->slot_bytes[0], i};
            break;
        case CLREMAT_ACT_OFFLOAD: /* off the device until its FETCH */
            ev[k++] = (clremat_trace_event){name_at(nm, a->layer, a->slot), -(int64_t)c->slot_bytes[a->slot], i};
            break;
        case CLREMAT_ACT_FETCH:
            ev[k++] = (clremat_trace_event){name_at(nm, a->layer, a->slot), (int64_t)c->slot_bytes[a->slot], i};
            break;
        default:
            break;
        }
        if (temp > 0) {
            ev[k++] = (clremat_trace_event){name_at(nm, a->layer, S + 1), (int64_t)temp, i};
            ev[k++] = (clremat_trace_event){name_at(nm, a->layer, S + 1), -(int64_t)temp, i};
        }
    }
    *events = ev;
    *n = k;
    *names = nm;
    return CLREMAT_OK;
}

int clremat_trace_from_pool(const clremat_pool_event *timeline, size_t n_timeline, clremat_trace_event **events,
                            int *n)
{
    clremat_trace_event *ev = malloc(sizeof *ev * (n_timeline + 1));
    *events = NULL;
    *n = 0;
    if (!ev)
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "memory trace: out of host memory");
    for (size_t i = 0; i < n_timeline; i++)
        ev[i] = (clremat_trace_event){timeline[i].tag ? timeline[i].tag : "(untagged)", timeline[i].delta, -1};
    *events = ev;
    *n = (int)n_timeline;
    return CLREMAT_OK;
}

/* A JSON string: quotes, backslash and control characters escaped; bytes
 * that are not valid UTF-8 become U+FFFD, so the file always parses. */
static void json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    fputc('"', f);
    while (*p) {
        unsigned c = *p;
        int n = (int)clremat_utf8_seq(p);
        if (n == 0) {
            fputs("\\ufffd", f);
            p++;
        } else if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            p++;
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
            p++;
        } else {
            fwrite(p, 1, (size_t)n, f);
            p += n;
        }
    }
    fputc('"', f);
}

typedef struct open_slice {
    const char *name;
    int64_t bytes;
    int start, track;
} open_slice;

int clremat_trace_write(const char *path, const char *title, uint64_t fixed_bytes, const clremat_trace_event *events,
                        int n, const clremat_graph *g, const clremat_plan *plan, uint64_t *peak_out)
{
    clremat_afile a;
    open_slice *open = malloc(sizeof *open * (size_t)(n + 1));
    int *track_busy = calloc((size_t)n + 2, sizeof(int)); /* per track: 1 while a slice is open on it */
    int n_open = 0, n_tracks = 0, st, peak_at = 0;
    uint64_t live = fixed_bytes, peak = fixed_bytes;
    if (!open || !track_busy) {
        free(open);
        free(track_busy);
        return clremat_set_error(CLREMAT_ERR_INTERNAL, "memory trace: out of host memory");
    }
    if ((st = clremat_afile_open(&a, path)) != CLREMAT_OK)
        goto done;
    fputs("{\"displayTimeUnit\": \"ns\", \"otherData\": {\"clock\": \"one microsecond per allocation or free\", "
          "\"fixed_bytes\": ", a.f);
    fprintf(a.f, "%llu}, \"traceEvents\": [\n", (unsigned long long)fixed_bytes);
    fputs("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": ", a.f);
    json_str(a.f, title);
    fputs("}},\n", a.f);
    fputs("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": \"actions\"}},\n",
          a.f);
    fprintf(a.f, "{\"name\": \"fixed: parameters, gradients, optimizer state, batch\", \"cat\": \"fixed\", "
                 "\"ph\": \"X\", \"ts\": 0, \"dur\": %d, \"pid\": 1, \"tid\": 2, \"args\": {\"bytes\": %llu}},\n",
            n + 1, (unsigned long long)fixed_bytes);
    fprintf(a.f, "{\"name\": \"live bytes\", \"ph\": \"C\", \"ts\": 0, \"pid\": 1, \"args\": {\"live\": %llu}},\n",
            (unsigned long long)live);
    for (int i = 0; i < n; i++) {
        const clremat_trace_event *e = &events[i];
        int ts = i + 1;
        if (e->bytes >= 0) {
            int track = 0;
            while (track < n_tracks && track_busy[track])
                track++;
            if (track == n_tracks)
                n_tracks++;
            track_busy[track] = 1;
            open[n_open++] = (open_slice){e->name, e->bytes, ts, track};
            live += (uint64_t)e->bytes;
        } else {
            int k = n_open - 1;
            while (k >= 0 && (strcmp(open[k].name, e->name) != 0 || open[k].bytes != -e->bytes))
                k--;
            if (k < 0) {
                clremat_afile_abort(&a);
                st = clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                       "memory trace: event %d frees %lld bytes of '%s', which is not live", i,
                                       (long long)-e->bytes, e->name);
                goto done;
            }
            fputs("{\"name\": ", a.f);
            json_str(a.f, open[k].name);
            fprintf(a.f, ", \"cat\": \"tensor\", \"ph\": \"X\", \"ts\": %d, \"dur\": %d, \"pid\": 1, \"tid\": %d, "
                         "\"args\": {\"bytes\": %lld}},\n",
                    open[k].start, ts - open[k].start, 3 + open[k].track, (long long)open[k].bytes);
            track_busy[open[k].track] = 0;
            open[k] = open[--n_open];
            live -= (uint64_t)-e->bytes;
        }
        if (live > peak)
            peak = live, peak_at = ts;
        fprintf(a.f, "{\"name\": \"live bytes\", \"ph\": \"C\", \"ts\": %d, \"pid\": 1, \"args\": {\"live\": %llu}},\n",
                ts, (unsigned long long)live);
    }
    /* tensors still live at the end (a timeline cut short) end with it */
    for (int k = 0; k < n_open; k++) {
        fputs("{\"name\": ", a.f);
        json_str(a.f, open[k].name);
        fprintf(a.f, ", \"cat\": \"tensor\", \"ph\": \"X\", \"ts\": %d, \"dur\": %d, \"pid\": 1, \"tid\": %d, "
                     "\"args\": {\"bytes\": %lld, \"live_at_end\": true}},\n",
                open[k].start, n + 1 - open[k].start, 3 + open[k].track, (long long)open[k].bytes);
    }
    /* the plan's actions as slices of their own track */
    if (plan && g) {
        int i = 0;
        while (i < n) {
            int act = events[i].action, j = i;
            const clremat_action *x;
            char label[CLREMAT_NAME_LEN + 32];
            while (j < n && events[j].action == act)
                j++;
            if (act >= 0 && act < plan->n_actions) {
                x = &plan->actions[act];
                snprintf(label, sizeof label, "%s %s", clremat_action_name(x->kind),
                         x->layer >= 0 && x->layer < g->n_layers ? g->layers[x->layer].name : "");
                fputs("{\"name\": ", a.f);
                json_str(a.f, label);
                fprintf(a.f, ", \"cat\": \"action\", \"ph\": \"X\", \"ts\": %d, \"dur\": %d, \"pid\": 1, "
                             "\"tid\": 1, \"args\": {\"action\": %d}},\n",
                        i + 1, j - i, act);
            }
            i = j;
        }
    }
    for (int t = 0; t < n_tracks; t++)
        fprintf(a.f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": "
                     "{\"name\": \"tensors %d\"}},\n", 3 + t, t + 1);
    fprintf(a.f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 2, \"args\": {\"name\": \"fixed\"}},\n");
    fprintf(a.f, "{\"name\": \"peak\", \"ph\": \"i\", \"s\": \"g\", \"ts\": %d, \"pid\": 1, \"tid\": 1, "
                 "\"args\": {\"live_bytes\": %llu}}\n]}\n",
            peak_at, (unsigned long long)peak);
    st = clremat_afile_commit(&a);
    if (st == CLREMAT_OK && peak_out)
        *peak_out = peak;
done:
    free(open);
    free(track_busy);
    return st;
}
