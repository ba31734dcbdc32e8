/* cli_plan.c: `clremat plan MODEL`: the remat plan of a model at a batch
 * size, per layer and in total, as a table or JSON. Needs no device. */
#include "model_load.h"
#include "atomic_file.h"
#include "cli.h"
#include "executor.h"
#include "memory_trace.h"
#include "report_svg.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bytes a layer's backward reads (its saved tensors). */
static uint64_t saved_bytes(const clremat_graph *g, const clremat_layer_cost *c, int l)
{
    uint64_t b = 0;
    for (int i = 0; i < g->layers[l].n_inputs; i++)
        if ((c[l].bwd_needs_inputs >> i & 1u) && g->layers[l].inputs[i] >= 0)
            b += c[g->layers[l].inputs[i]].slot_bytes[0];
    for (int s = 0; s < c[l].n_slots; s++)
        if (c[l].bwd_needs_slots >> s & 1u)
            b += c[l].slot_bytes[s];
    return b;
}

/* "kept", "discarded" for the output; internals "kept", "discarded", "-" */
static const char *out_state(const clremat_plan *p, int l)
{
    return p->kept[l * CLREMAT_MAX_SLOTS] ? "kept" : "discarded";
}

static const char *internal_state(const clremat_plan *p, const clremat_layer_cost *c, int l)
{
    int any = 0, all = 1;
    for (int s = 1; s < c[l].n_slots; s++) {
        any = 1;
        if (!p->kept[l * CLREMAT_MAX_SLOTS + s])
            all = 0;
    }
    return !any ? "-" : all ? "kept" : "discarded";
}

/* The sweep plans every point on the whole model: its work grows as points
 * x layers (about 4 us per layer and point on the CI machine, after a setup
 * that does not depend on the points). Past this product --points is
 * refused with the largest count the model allows; past PARETO_NOTE_WORK
 * the sweep says on stderr what it is doing and how long it took. */
#define PARETO_MAX_WORK ((int64_t)10000000)
#define PARETO_NOTE_WORK ((int64_t)200000)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The planner's opt_states argument for opt and accumulate micro-batches
 * per step: its state count, with the fused update where it applies (clremat_trainer_fused). */
static int plan_opt_states(const clremat_opt_config *opt, int accumulate, const clremat_graph *g)
{
    return clremat_opt_state_count(opt->kind) |
           (clremat_trainer_fused(opt, accumulate, g) ? CLREMAT_PLAN_FUSED_UPDATE : 0);
}

/* --pareto: the front as a table or JSON, and optionally an SVG plot. */
static int print_pareto(const clremat_graph *gr, long long batch, int accumulate, int opt_states, int json,
                        int points, const char *svg)
{
    clremat_plan_input in;
    clremat_pareto_point *pts = NULL;
    clremat_pareto_mark *marks = NULL;
    int n = 0, nm = 0, st, rc = 0;
    int64_t layers = gr->n_layers > 0 ? gr->n_layers : 1, max_points = PARETO_MAX_WORK / layers;
    int note = (int64_t)points * layers > PARETO_NOTE_WORK;
    double t0 = now_s();
    if (max_points < 2)
        max_points = 2;
    if (points > max_points)
        return cli_error("--points %d is too many for model '%s' (%lld layers): at most %lld (points x layers may "
                         "not exceed %lld)",
                         points, gr->name, (long long)layers, (long long)max_points, (long long)PARETO_MAX_WORK);
    /* with accumulation the plans are per micro-batch */
    if ((st = clremat_plan_input_for(NULL, gr, batch / accumulate, opt_states, NULL, &in, NULL, NULL)))
        return json ? cli_json_error(st, clremat_last_error()) : cli_error("%s", clremat_last_error());
    in.accumulate = accumulate;
    if (note)
        fprintf(stderr, "pareto: planning %d budgets on %lld layers ...\n", points, (long long)layers);
    if ((st = clremat_plan_pareto(&in, points, &pts, &n)) || (st = clremat_pareto_marks(&in, &marks, &nm))) {
        rc = json ? cli_json_error(st, clremat_last_error()) : cli_error("%s", clremat_last_error());
        goto done;
    }
    if (note)
        fprintf(stderr, "pareto: %d points on the front, %.1f s\n", n, now_s() - t0);
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, gr->name);
        printf(", \"batch\": %lld, \"accumulate\": %d, \"micro_batch\": %lld, \"front\": [", batch, accumulate,
               batch / accumulate);
        for (int i = 0; i < n; i++)
            printf("%s\n  {\"budget_bytes\": %llu, \"peak_bytes\": %llu, \"recompute_flops\": %.9g}", i ? "," : "",
                   (unsigned long long)pts[i].budget, (unsigned long long)pts[i].peak_bytes, pts[i].recompute_cost);
        printf("\n ], \"modes\": [");
        for (int i = 0; i < nm; i++) {
            printf("%s\n  {\"remat\": ", i ? "," : "");
            cli_json_string(stdout, marks[i].label);
            printf(", \"peak_bytes\": %llu, \"recompute_flops\": %.9g}", (unsigned long long)marks[i].peak_bytes,
                   marks[i].recompute_cost);
        }
        printf("\n ]}\n");
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
    free((void *)in.costs);
    return rc;
}

/* The mode attention layer l runs in under plan: memory_efficient when the
 * model file says so or the plan switched an "auto" layer, else plain. */
static const char *attn_mode_name(const clremat_layer *L, const clremat_plan *plan, int l)
{
    if (L->attn_mode == CLREMAT_ATTN_MEMORY_EFFICIENT || (L->attn_mode == CLREMAT_ATTN_AUTO && plan->variant &&
                                                          plan->variant[l]))
        return "memory_efficient";
    return "plain";
}

int cli_plan(const cli_global *g, int argc, char **argv)
{
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
    uint64_t limit;

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
        st = print_pareto(gr, batch, (int)o.accumulate, plan_opt_states(&opt, (int)o.accumulate, gr), json, o.points,
                          o.svg);
        clremat_graph_free(gr);
        return st;
    }
    limit = o.memory_limit;
    if ((st = clremat_policy_parse(remat, &pol)) == CLREMAT_OK && pol.kind == CLREMAT_POLICY_AUTO && !limit) {
        clremat_device_info dev; /* auto plans for the device's memory */
        if ((st = clremat_select_device(o.device ? o.device : g->device, &dev)) == CLREMAT_OK)
            limit = dev.global_mem_bytes;
    }
    if (st == CLREMAT_OK && o.gemm) { /* plan for a device's GEMM path (its workspace included) */
        clremat_gemm_path gp;
        if ((st = clremat_gemm_path_parse(o.gemm, &gp)) == CLREMAT_OK &&
            (st = clremat_ctx_create(o.device ? o.device : g->device, 0, &ctx)) == CLREMAT_OK)
            clremat_ctx_set_gemm(ctx, gp);
    }
    opt.no_fused_update = o.no_fused_update;
    /* with --accumulate K the plan is one micro-batch's (its peak is what the device holds) */
    if (st || (st = clremat_plan_for_offload(ctx, gr, batch / o.accumulate, (int)o.accumulate, &pol,
                                             plan_opt_states(&opt, (int)o.accumulate, gr), limit, NULL, o.overlap,
                                             o.offload, &plan, &costs, NULL, NULL))) {
        if (json)
            cli_json_error(st, clremat_last_error());
        else
            cli_error("%s", clremat_last_error());
        clremat_ctx_destroy(ctx);
        clremat_graph_free(gr);
        return 1;
    }
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, gr->name);
        printf(", \"remat\": ");
        cli_json_string(stdout, pol.text);
        printf(", \"precision\": ");
        cli_json_string(stdout, clremat_precision_name(gr->precision));
        printf(", \"batch\": %lld, \"accumulate\": %d, \"micro_batch\": %lld, \"gemm\": ", batch, plan.accumulate,
               batch / plan.accumulate);
        if (ctx)
            cli_json_string(stdout, clremat_gemm_path_name(clremat_ctx_gemm(ctx)));
        else
            printf("null");
        printf(", \"overlap\": %s, \"layers\": [", plan.overlap ? "true" : "false");
        for (int l = 0; l < gr->n_layers; l++) {
            const clremat_layer *L = &gr->layers[l];
            printf("%s\n  {\"name\": ", l ? "," : "");
            cli_json_string(stdout, L->name);
            printf(", \"type\": \"%s\", \"block\": ", clremat_layer_type_name(L->type));
            if (L->block >= 0)
                cli_json_string(stdout, gr->blocks[L->block].name);
            else
                printf("null");
            if (L->type == CLREMAT_ATTENTION)
                printf(", \"attention\": \"%s\", \"attention_chosen\": %s", attn_mode_name(L, &plan, l),
                       L->attn_mode == CLREMAT_ATTN_AUTO ? "true" : "false");
            printf(", \"output_bytes\": %zu, \"saved_bytes\": %llu, \"output\": \"%s\", \"internals\": \"%s\", "
                   "\"wrapped\": %s, \"recomputes\": %d, \"forward_flops\": %.9g}",
                   costs[l].slot_bytes[0], (unsigned long long)saved_bytes(gr, costs, l), out_state(&plan, l),
                   internal_state(&plan, costs, l), plan.wrapped_layer[l] || plan.act_discard[l] ? "true" : "false",
                   plan.recomputes[l], costs[l].fwd_flops);
        }
        printf("\n ],\n \"memory\": {\"predicted_peak_bytes\": %llu, \"fixed_bytes\": %llu, \"param_bytes\": %llu, "
               "\"kept_activation_bytes\": %llu, \"fused_update\": %s, \"accumulation_bytes\": %llu, "
               "\"predicted_host_peak_bytes\": %llu, \"offload_bytes\": %llu, \"offloads\": %d},\n",
               (unsigned long long)plan.peak_bytes, (unsigned long long)plan.fixed_bytes,
               (unsigned long long)plan.param_bytes, (unsigned long long)plan.kept_act_bytes,
               clremat_trainer_fused(&opt, (int)o.accumulate, gr) ? "true" : "false",
               (unsigned long long)plan.accum_bytes, (unsigned long long)plan.host_peak_bytes,
               (unsigned long long)plan.offload_bytes, plan.n_offloads);
        printf(" \"flops\": {\"step\": %.9g, \"recompute\": %.9g, \"recompute_share\": %.9g}, \"recompute_actions\": %d",
               plan.step_flops, plan.recompute_flops,
               plan.step_flops > 0 ? plan.recompute_flops / plan.step_flops : 0.0, plan.n_recompute_actions);
        /* the names before plan and train shared them: aliases for one release */
        printf(",\n \"predicted_peak_bytes\": %llu, \"fixed_bytes\": %llu, \"param_bytes\": %llu, "
               "\"kept_activation_bytes\": %llu, \"step_flops\": %.9g, \"recompute_flops\": %.9g, "
               "\"recompute_share\": %.9g",
               (unsigned long long)plan.peak_bytes, (unsigned long long)plan.fixed_bytes,
               (unsigned long long)plan.param_bytes, (unsigned long long)plan.kept_act_bytes, plan.step_flops,
               plan.recompute_flops, plan.step_flops > 0 ? plan.recompute_flops / plan.step_flops : 0.0);
        if (actions) {
            printf(",\n \"actions\": [");
            for (int i = 0; i < plan.n_actions; i++) {
                const clremat_action *a = &plan.actions[i];
                printf("%s\n  {\"action\": \"%s\", \"layer\": ", i ? "," : "", clremat_action_name(a->kind));
                if (a->layer >= 0)
                    cli_json_string(stdout, gr->layers[a->layer].name);
                else
                    printf("null");
                printf(", \"peak_bytes\": %llu, \"live_bytes_after\": %llu, \"host_bytes_after\": %llu}",
                       (unsigned long long)a->peak_during, (unsigned long long)a->live_after,
                       (unsigned long long)a->host_after);
            }
            printf("\n ]");
        }
        printf("}\n");
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
                   (unsigned long long)saved_bytes(gr, costs, l), out_state(&plan, l), internal_state(&plan, costs, l),
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
                printf("attention %-11s %s%s\n", gr->layers[l].name, attn_mode_name(&gr->layers[l], &plan, l),
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
