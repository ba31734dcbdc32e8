/* cli_plan.c: `clremat plan MODEL`: the remat plan of a model at a batch
 * size, per layer and in total, as a table or JSON. Needs no device. */
#include "model_load.h"
#include "clock.h"
#include "atomic_file.h"
#include "cli.h"
#include "executor.h"
#include "memory_trace.h"
#include "report_svg.h"
#include "report_json.h"
#include "plan_run.h"
#include <stdlib.h>
#include <string.h>

/* Past this much work (points x layers) the sweep says on stderr what it is
 * doing and how long it took. */
#define PARETO_NOTE_WORK ((int64_t)200000)

/* --pareto: the front as a table or JSON, and optionally an SVG plot. */
static int print_pareto(const clremat_graph *gr, long long batch, int accumulate, int opt_states, int json,
                        int points, const char *svg)
{
    clremat_pareto_point *pts = NULL;
    clremat_pareto_mark *marks = NULL;
    int n = 0, nm = 0, st, rc = 0;
    int64_t layers = gr->n_layers > 0 ? gr->n_layers : 1;
    int note = (int64_t)points * layers > PARETO_NOTE_WORK && points <= CLREMAT_PARETO_MAX_WORK / layers;
    double t0 = clremat_now_s();
    if (note)
        fprintf(stderr, "pareto: planning %d budgets on %lld layers ...\n", points, (long long)layers);
    if ((st = clremat_pareto_run(gr, batch, accumulate, opt_states, points, &pts, &n, &marks, &nm))) {
        rc = json ? cli_json_error(st, clremat_last_error()) : cli_error("%s", clremat_last_error());
        goto done;
    }
    if (note)
        fprintf(stderr, "pareto: %d points on the front, %.1f s\n", n, clremat_now_s() - t0);
    if (json) {
        clremat_report_pareto_json(stdout, gr->name, batch, accumulate, pts, n, marks, nm);
    } else {
        printf("Pareto front of %s at batch %lld: predicted peak against recompute FLOPs\n\n", gr->name, batch);
        printf("%16s %16s %16s\n", "budget bytes", "peak bytes", "recompute FLOPs");
        for (int i = 0; i < n; i++)
            printf("%16llu %16llu %16.4g\n", (unsigned long long)pts[i].budget, (unsigned long long)pts[i].peak_bytes,
                   pts[i].recompute_cost);
        printf("\nKeras-style modes:\n");
        for (int i = 0; i < nm; i++)
            printf("%-40s %16llu %16.4g\n", marks[i].label, (unsigned long long)marks[i].peak_bytes,
                   marks[i].recompute_cost);
    }
    if (svg && clremat_pareto_svg(svg, gr->name, "FLOP", pts, n, marks, nm) != CLREMAT_OK)
        rc = cli_error("%s", clremat_last_error());
done:
    free(pts);
    free(marks);
    return rc;
}

/* The options given with --pareto that it would ignore (the sweep plans
 * every budget on the whole model itself), as "--a, --b" in buf; "" if none.
 * (--offload and --memory-trace with --pareto the parser refuses already.) */
static const char *pareto_ignored(const cli_plan_opts *o, char *buf, size_t len)
{
    const struct {
        int given;
        const char *name;
    } opts[] = {
        {o->remat_given, "--remat"}, {o->memory_limit != 0, "--memory-limit"}, {o->device != NULL, "--device"},
        {o->overlap, "--overlap"},   {o->actions, "--actions"},                 {o->gemm != NULL, "--gemm"},
    };
    size_t off = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (opts[i].given && off < len)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", opts[i].name);
    return buf;
}

int cli_plan(const cli_global *g, int argc, char **argv)
{
    char ignored[160];
    cli_plan_opts o;
    const char *remat, *optname;
    long long batch;
    int json, actions, st = cli_plan_parse(argc, argv, &o);
    clremat_graph *gr = NULL;
    clremat_policy pol;
    clremat_plan plan;
    clremat_layer_cost *costs = NULL;
    clremat_opt_config opt;
    clremat_ctx *ctx = NULL;
    clremat_plan_request rq;

    if (st != CLI_CONTINUE)
        return st;
    remat = o.remat;
    optname = o.optimizer;
    batch = o.batch;
    json = o.json;
    actions = o.actions;
    if (clremat_opt_defaults(optname, &opt) != 0)
        return cli_error("unknown optimizer '%s'; valid: sgd, adam, adamw", optname);
    if (o.svg && !o.pareto)
        return cli_error("plan: --svg FILE draws the Pareto front: it needs --pareto");
    if (!o.pareto && o.points_given)
        return cli_error("plan: --points N sets the Pareto sweep's budgets: it needs --pareto");
    if (o.pareto && *pareto_ignored(&o, ignored, sizeof ignored))
        return cli_error("plan: --pareto sweeps every budget on the whole model without a device: %s do%s not "
                         "apply to it",
                         ignored, strchr(ignored, ',') ? "" : "es");
    if (!o.pareto && o.device && !o.gemm) { /* the device's memory is auto's limit, unless one is given */
        clremat_policy p;
        if (clremat_policy_parse(o.remat, &p) == CLREMAT_OK && (p.kind != CLREMAT_POLICY_AUTO || o.memory_limit))
            return cli_error("plan: --device SEL gives the memory --remat auto plans for (without --memory-limit), "
                             "or with --gemm the device planned on: with --remat %s%s it is not used",
                             o.remat, o.memory_limit ? " and --memory-limit" : "");
    }
    if (o.pareto && g->device) { /* not used by the sweep, but a selection that matches nothing is refused */
        clremat_device_info dev;
        if (clremat_select_device(g->device, &dev) != CLREMAT_OK)
            return cli_error("%s", clremat_last_error());
    }
    if (o.svg && clremat_output_check(o.svg, "--svg")) /* before any work */
        return cli_error("%s", clremat_last_error());
    if (o.svg && clremat_same_file(o.svg, o.model_path))
        return cli_error("--svg %s: is the model file; refusing to overwrite it", o.svg);
    if (o.memory_trace && clremat_output_check(o.memory_trace, "--memory-trace")) /* before any work */
        return cli_error("%s", clremat_last_error());
    if (o.memory_trace && clremat_same_file(o.memory_trace, o.model_path))
        return cli_error("--memory-trace %s: is the model file; refusing to overwrite it", o.memory_trace);
    if ((st = clremat_model_load(o.model_path, &gr, NULL)) == CLREMAT_OK &&
        (st = clremat_model_set_precision(gr, o.precision)) != CLREMAT_OK) {
        clremat_graph_free(gr);
        gr = NULL;
    }
    if (st)
        return json ? cli_json_error(st, clremat_last_error()) : cli_error("%s", clremat_last_error());
    if (o.pareto) {
        opt.no_fused_update = o.no_fused_update;
        st = print_pareto(gr, batch, (int)o.accumulate, clremat_plan_opt_states(&opt, (int)o.accumulate, gr), json, o.points,
                          o.svg);
        clremat_graph_free(gr);
        return st;
    }
    opt.no_fused_update = o.no_fused_update;
    memset(&rq, 0, sizeof rq);
    rq.remat = remat;
    rq.batch = batch;
    rq.accumulate = o.accumulate;
    rq.opt = &opt;
    rq.device = o.device ? o.device : g->device;
    rq.memory_limit = o.memory_limit;
    rq.gemm = o.gemm;
    rq.overlap = o.overlap;
    rq.offload = o.offload;
    if ((st = clremat_plan_run(gr, &rq, &pol, &plan, &costs, &ctx))) {
        if (json)
            cli_json_error(st, clremat_last_error());
        else
            cli_error("%s", clremat_last_error());
        clremat_graph_free(gr);
        return 1;
    }
    if (json) {
        clremat_report_plan_json(stdout, gr, pol.text, batch, &plan, costs, ctx,
                                 clremat_trainer_fused(&opt, (int)o.accumulate, gr), actions);
    } else {
        if (plan.accumulate > 1)
            printf("model %s, remat %s, batch %lld as %d micro-batches of %lld (the plan is one micro-batch's)\n\n",
                   gr->name, pol.text, batch, plan.accumulate, batch / plan.accumulate);
        else
            printf("model %s, remat %s, batch %lld\n\n", gr->name, pol.text, batch);
        if (gr->precision != CLREMAT_PREC_FLOAT32) /* 16-bit slots; staging in the workspaces */
            printf("precision %s: activations and their gradients stored in 16 bits, float32 staging per launch\n\n",
                   clremat_precision_name(gr->precision));
        printf("%-28s %-18s %12s %12s %-9s %-9s %4s %12s\n", "layer", "block", "out bytes", "saved bytes", "output",
               "internal", "rec", "fwd FLOPs");
        for (int l = 0; l < gr->n_layers; l++) {
            const clremat_layer *L = &gr->layers[l];
            printf("%-28s %-18s %12zu %12llu %-9s %-9s %4d %12.4g\n", L->name,
                   L->block >= 0 ? gr->blocks[L->block].name : "-", costs[l].slot_bytes[0],
                   (unsigned long long)clremat_plan_saved_bytes(gr, costs, l), clremat_plan_out_state(&plan, l),
                   clremat_plan_internal_state(&plan, costs, l),
                   plan.recomputes[l], costs[l].fwd_flops);
        }
        printf("\npredicted peak        %llu bytes (%.2f MiB)\n", (unsigned long long)plan.peak_bytes,
               (double)plan.peak_bytes / 1048576.0);
        printf("fixed                 %llu bytes (parameters %llu, %s, optimizer state, batch)\n",
               (unsigned long long)plan.fixed_bytes, (unsigned long long)plan.param_bytes,
               clremat_trainer_fused(&opt, (int)o.accumulate, gr) ? "no gradients: the update is fused into the backward"
                                                               : "with gradients");
        if (plan.accumulate > 1)
            printf("accumulation buffer   %llu bytes (in the fixed bytes: gradients summed over %d micro-batches)\n",
                   (unsigned long long)plan.accum_bytes, plan.accumulate);
        printf("activations kept      %llu bytes after the forward pass\n", (unsigned long long)plan.kept_act_bytes);
        if (plan.n_offloads > 0)
            printf("offload               %d tensors, %llu bytes to the host and back per step; host peak %llu bytes\n",
                   plan.n_offloads, (unsigned long long)plan.offload_bytes, (unsigned long long)plan.host_peak_bytes);
        if (plan.overlap)
            printf("overlap               %d recompute runs on a second queue, overlapping backward\n",
                   plan.n_overlapped);
        printf("recompute             %.4g FLOPs = %.1f%% of the step's %.4g FLOPs (%d recompute actions)\n",
               plan.recompute_flops, plan.step_flops > 0 ? 100.0 * plan.recompute_flops / plan.step_flops : 0.0,
               plan.step_flops, plan.n_recompute_actions);
        for (int l = 0; l < gr->n_layers; l++)
            if (gr->layers[l].type == CLREMAT_ATTENTION)
                printf("attention %-11s %s%s\n", gr->layers[l].name, clremat_plan_attn_mode_name(&gr->layers[l], &plan, l),
                       gr->layers[l].attn_mode != CLREMAT_ATTN_AUTO ? ""
                       : pol.kind == CLREMAT_POLICY_BUDGET || pol.kind == CLREMAT_POLICY_AUTO
                           ? " (\"auto\": chosen by the plan)"
                           : " (\"auto\": plain under the fixed remat modes)");
        if (actions) {
            printf("\n%-5s %-22s %-28s %14s %14s\n", "#", "action", "layer", "peak bytes", "live after");
            for (int i = 0; i < plan.n_actions; i++) {
                const clremat_action *a = &plan.actions[i];
                printf("%-5d %-22s %-28s %14llu %14llu\n", i, clremat_action_name(a->kind),
                       a->layer >= 0 ? gr->layers[a->layer].name : "-", (unsigned long long)a->peak_during,
                       (unsigned long long)a->live_after);
            }
        }
    }
    st = 0;
    if (o.memory_trace) {
        clremat_trace_event *ev = NULL;
        char *names = NULL, title[512];
        int n = 0;
        snprintf(title, sizeof title, "%.200s, plan %.200s, batch %lld", gr->name, pol.text, batch);
        if (clremat_trace_from_plan(gr, costs, &plan, &ev, &n, &names) != CLREMAT_OK ||
            clremat_trace_write(o.memory_trace, title, plan.fixed_bytes, ev, n, gr, &plan, NULL) != CLREMAT_OK)
            st = cli_error("%s", clremat_last_error());
        free(ev);
        free(names);
    }
    clremat_plan_free(&plan);
    free(costs);
    clremat_ctx_destroy(ctx);
    clremat_graph_free(gr);
    return st;
}
