/* memory_trace.h: the live tensors of one training step over time, written
 * as Chrome trace / Perfetto JSON (open it in ui.perfetto.dev or
 * chrome://tracing): every tensor a slice named after its layer and role
 * with its bytes, a "live bytes" counter, the peak marked. From a plan
 * (`clremat plan --memory-trace`: the planner's prediction, no device) or
 * from the pool's measured allocations of a step (`clremat train
 * --memory-trace`). Time is logical: one microsecond per allocation or free
 * (docs/memory-trace.md). */
#ifndef CLREMAT_MEMORY_TRACE_H
#define CLREMAT_MEMORY_TRACE_H

#include "clremat.h"
#include "cost.h"
#include "graph.h"
#include "plan.h"

/** One allocation (bytes > 0) or free (bytes < 0) of a named tensor. */
typedef struct clremat_trace_event {
    const char *name;   /**< tensor name; a free names what its allocation named */
    int64_t bytes;      /**< + allocated, - freed */
    int action;         /**< index of the plan action it belongs to (-1: unknown) */
} clremat_trace_event;

/** The events of a plan's step, in the order the executor makes them: per
 * action, the slots and gradients it allocates, then its workspace, which
 * it frees at the action's end; FREE and FREE_GRAD actions free. Names are
 * "LAYER/SLOT", "LAYER (gradient)", "LAYER (workspace)" and point into
 * *names (malloc'ed; free it after the events). *events is malloc'ed. */
int clremat_trace_from_plan(const clremat_graph *g, const clremat_layer_cost *costs, const clremat_plan *plan,
                            clremat_trace_event **events, int *n, char **names);

/** The events of a pool timeline (clremat_pool_timeline) of one step: each
 * event's tag names the tensor. */
int clremat_trace_from_pool(const clremat_pool_event *timeline, size_t n_timeline, clremat_trace_event **events,
                            int *n);

/** Writes events as Chrome trace JSON to path (atomically). fixed_bytes is
 * what is live before the first event and after the last (parameters,
 * gradients, optimizer state, batch); it is one slice of its own. title
 * names the process ("regression.json, plan none"). With a plan, its
 * actions are slices of their own track. Fails with CLREMAT_ERR_IO naming
 * the path, or CLREMAT_ERR_INVALID_ARGUMENT when a free matches no live
 * tensor of its name. *peak_out (if not NULL) gets the highest live bytes. */
int clremat_trace_write(const char *path, const char *title, uint64_t fixed_bytes, const clremat_trace_event *events,
                        int n, const clremat_graph *g, const clremat_plan *plan, uint64_t *peak_out);

#endif /* CLREMAT_MEMORY_TRACE_H */
