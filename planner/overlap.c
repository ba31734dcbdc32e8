/* overlap.c: turns a sequential plan into one where each recomputation runs
 * on a second queue, overlapping the backward of the segment before it.
 *
 * In the sequential plan a recompute run R (RECOMPUTE and FREE actions)
 * follows the backward run B of the previous segment. The overlapped plan
 * keeps that order of actions, so allocations and frees happen exactly as in
 * the sequential plan and its predicted peak is the sequential one. Only the
 * queues change: B's first action carries `marker` (R waits for everything
 * enqueued before B), R's actions run on the recompute queue (`queue` 1),
 * and the first action after R carries `join` (the compute queue waits for
 * R). B's frees stay in place although B's kernels may still be using those
 * buffers when R allocates: the executor releases buffers inside the window
 * with a fence (an event after their last use) and the pool makes the
 * recompute queue wait for that fence when it hands such a buffer to R (see
 * clremat_pool_release_fenced), so memory is reused across queues safely
 * and costs nothing extra. */
#include "plan.h"
#include "error.h"
#include <stdlib.h>
#include <string.h>

static int is_free(clremat_action_kind k) { return k == CLREMAT_ACT_FREE || k == CLREMAT_ACT_FREE_GRAD; }

/* 1 if layer r's forward may rewrite a tensor B (acts[b0..r0)) reads: r has
 * live slots the recompute does not allocate (it rewrites them with the
 * same values) and B runs the backward of r or of a layer reading r. B
 * could read them while the rewrite is under way, so such a pair stays
 * sequential. */
static int rewrites_live(const clremat_plan_input *in, const clremat_action *acts, int b0, int r0,
                         const clremat_action *r)
{
    const clremat_graph *g = in->g;
    unsigned all = (1u << in->costs[r->layer].n_slots) - 1;
    if ((r->alloc_slots & all) == all)
        return 0;
    for (int i = b0; i < r0; i++) {
        const clremat_layer *L;
        if (acts[i].kind != CLREMAT_ACT_BACKWARD)
            continue;
        if (acts[i].layer == r->layer)
            return 1;
        L = &g->layers[acts[i].layer];
        for (int k = 0; k < L->n_inputs; k++)
            if (L->inputs[k] == r->layer)
                return 1;
    }
    return 0;
}

int clremat_plan_overlap(const clremat_plan_input *in, clremat_plan *plan)
{
    int n = plan->n_actions, moved = 0;
    clremat_action *a = plan->actions;

    for (int i = 0; i < n; i++)
        a[i].queue = a[i].marker = a[i].join = 0;
    for (int i = 0; i < n;) {
        int b0 = i, r0, r1, has_bwd = 0, ok;
        /* B: backward-phase actions up to the next recompute run */
        while (i < n && (a[i].kind == CLREMAT_ACT_BACKWARD || is_free(a[i].kind) ||
                         a[i].kind == CLREMAT_ACT_RECOMPUTE_ACT)) {
            has_bwd |= a[i].kind == CLREMAT_ACT_BACKWARD;
            i++;
        }
        r0 = i;
        while (i < n && (a[i].kind == CLREMAT_ACT_RECOMPUTE || a[i].kind == CLREMAT_ACT_FREE))
            i++;
        r1 = i;
        ok = r0 > b0 && r1 > r0 && a[r0].kind == CLREMAT_ACT_RECOMPUTE && has_bwd && r1 < n;
        for (int j = r0; ok && j < r1; j++)
            if (a[j].kind == CLREMAT_ACT_RECOMPUTE && rewrites_live(in, a, b0, r0, &a[j]))
                ok = 0;
        if (!ok) { /* not an overlappable (backward, recompute) pair: stays sequential */
            if (r1 == b0)
                i = b0 + 1;
            continue;
        }
        a[b0].marker = 1;
        for (int j = r0; j < r1; j++) /* R's frees too: their fences belong to the recompute queue */
            a[j].queue = 1;
        a[r1].join = 1;
        moved++;
    }
    plan->overlap = 1;
    plan->n_overlapped = moved;
    return CLREMAT_OK;
}
