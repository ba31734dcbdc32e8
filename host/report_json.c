/* report_json.c: the --json reports of devices, plan, pareto, train, compare
 * and fit (docs/json-output.md), written to any FILE: the command prints
 * them on stdout, the embedding API (host/api.c) into a string, so both give
 * the same bytes. Moved here from tools/cli_*.c unchanged but for the FILE. */
#include "report_json.h"
#include "json_out.h"
#include <math.h>

/* Bytes a layer's backward reads (its saved tensors). */
uint64_t clremat_plan_saved_bytes(const clremat_graph *g, const clremat_layer_cost *c, int l)
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
const char *clremat_plan_out_state(const clremat_plan *p, int l)
{
    return p->kept[l * CLREMAT_MAX_SLOTS] ? "kept" : "discarded";
}

const char *clremat_plan_internal_state(const clremat_plan *p, const clremat_layer_cost *c, int l)
{
    int any = 0, all = 1;
    for (int s = 1; s < c[l].n_slots; s++) {
        any = 1;
        if (!p->kept[l * CLREMAT_MAX_SLOTS + s])
            all = 0;
    }
    return !any ? "-" : all ? "kept" : "discarded";
}

/* The mode attention layer l runs in under plan: memory_efficient when the
 * model file says so or the plan switched an "auto" layer, else plain. */
const char *clremat_plan_attn_mode_name(const clremat_layer *L, const clremat_plan *plan, int l)
{
    if (L->attn_mode == CLREMAT_ATTN_MEMORY_EFFICIENT || (L->attn_mode == CLREMAT_ATTN_AUTO && plan->variant &&
                                                          plan->variant[l]))
        return "memory_efficient";
    return "plain";
}


void clremat_report_plan_json(FILE *f, const clremat_graph *gr, const char *remat, long long batch,
                              const clremat_plan *plan, const clremat_layer_cost *costs, clremat_ctx *ctx, int fused,
                              int actions)
{
    fprintf(f, "{\"model\": ");
    clremat_json_string(f, gr->name);
    fprintf(f, ", \"remat\": ");
    clremat_json_string(f, remat);
    fprintf(f, ", \"precision\": ");
    clremat_json_string(f, clremat_precision_name(gr->precision));
    fprintf(f, ", \"batch\": %lld, \"accumulate\": %d, \"micro_batch\": %lld, \"gemm\": ", batch, plan->accumulate,
           batch / plan->accumulate);
    if (ctx)
        clremat_json_string(f, clremat_gemm_path_name(clremat_ctx_gemm(ctx)));
    else
        fprintf(f, "null");
    fprintf(f, ", \"overlap\": %s, \"layers\": [", plan->overlap ? "true" : "false");
    for (int l = 0; l < gr->n_layers; l++) {
        const clremat_layer *L = &gr->layers[l];
        fprintf(f, "%s\n  {\"name\": ", l ? "," : "");
        clremat_json_string(f, L->name);
        fprintf(f, ", \"type\": \"%s\", \"block\": ", clremat_layer_type_name(L->type));
        if (L->block >= 0)
            clremat_json_string(f, gr->blocks[L->block].name);
        else
            fprintf(f, "null");
        if (L->type == CLREMAT_ATTENTION)
            fprintf(f, ", \"attention\": \"%s\", \"attention_chosen\": %s", clremat_plan_attn_mode_name(L, plan, l),
                   L->attn_mode == CLREMAT_ATTN_AUTO ? "true" : "false");
        fprintf(f, ", \"output_bytes\": %zu, \"saved_bytes\": %llu, \"output\": \"%s\", \"internals\": \"%s\", "
               "\"wrapped\": %s, \"recomputes\": %d, \"forward_flops\": %.9g}",
               costs[l].slot_bytes[0], (unsigned long long)clremat_plan_saved_bytes(gr, costs, l),
               clremat_plan_out_state(plan, l), clremat_plan_internal_state(plan, costs, l),
               plan->wrapped_layer[l] || plan->act_discard[l] ? "true" : "false",
               plan->recomputes[l], costs[l].fwd_flops);
    }
    fprintf(f, "\n ],\n \"memory\": {\"predicted_peak_bytes\": %llu, \"fixed_bytes\": %llu, \"param_bytes\": %llu, "
           "\"kept_activation_bytes\": %llu, \"fused_update\": %s, \"accumulation_bytes\": %llu, "
           "\"predicted_host_peak_bytes\": %llu, \"offload_bytes\": %llu, \"offloads\": %d},\n",
           (unsigned long long)plan->peak_bytes, (unsigned long long)plan->fixed_bytes,
           (unsigned long long)plan->param_bytes, (unsigned long long)plan->kept_act_bytes,
           fused ? "true" : "false",
           (unsigned long long)plan->accum_bytes, (unsigned long long)plan->host_peak_bytes,
           (unsigned long long)plan->offload_bytes, plan->n_offloads);
    fprintf(f, " \"flops\": {\"step\": %.9g, \"recompute\": %.9g, \"recompute_share\": %.9g}, \"recompute_actions\": %d",
           plan->step_flops, plan->recompute_flops,
           plan->step_flops > 0 ? plan->recompute_flops / plan->step_flops : 0.0, plan->n_recompute_actions);
    /* the names before plan and train shared them: aliases for one release */
    fprintf(f, ",\n \"predicted_peak_bytes\": %llu, \"fixed_bytes\": %llu, \"param_bytes\": %llu, "
           "\"kept_activation_bytes\": %llu, \"step_flops\": %.9g, \"recompute_flops\": %.9g, "
           "\"recompute_share\": %.9g",
           (unsigned long long)plan->peak_bytes, (unsigned long long)plan->fixed_bytes,
           (unsigned long long)plan->param_bytes, (unsigned long long)plan->kept_act_bytes, plan->step_flops,
           plan->recompute_flops, plan->step_flops > 0 ? plan->recompute_flops / plan->step_flops : 0.0);
    if (actions) {
        fprintf(f, ",\n \"actions\": [");
        for (int i = 0; i < plan->n_actions; i++) {
            const clremat_action *a = &plan->actions[i];
            fprintf(f, "%s\n  {\"action\": \"%s\", \"layer\": ", i ? "," : "", clremat_action_name(a->kind));
            if (a->layer >= 0)
                clremat_json_string(f, gr->layers[a->layer].name);
            else
                fprintf(f, "null");
            fprintf(f, ", \"peak_bytes\": %llu, \"live_bytes_after\": %llu, \"host_bytes_after\": %llu}",
                   (unsigned long long)a->peak_during, (unsigned long long)a->live_after,
                   (unsigned long long)a->host_after);
        }
        fprintf(f, "\n ]");
    }
    fprintf(f, "}\n");
}

void clremat_report_pareto_json(FILE *f, const char *name, long long batch, int accumulate,
                                const clremat_pareto_point *pts, int n, const clremat_pareto_mark *marks, int nm)
{
    fprintf(f, "{\"model\": ");
    clremat_json_string(f, name);
    fprintf(f, ", \"batch\": %lld, \"accumulate\": %d, \"micro_batch\": %lld, \"front\": [", batch, accumulate,
           batch / accumulate);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\n  {\"budget_bytes\": %llu, \"peak_bytes\": %llu, \"recompute_flops\": %.9g}", i ? "," : "",
               (unsigned long long)pts[i].budget, (unsigned long long)pts[i].peak_bytes, pts[i].recompute_cost);
    fprintf(f, "\n ], \"modes\": [");
    for (int i = 0; i < nm; i++) {
        fprintf(f, "%s\n  {\"remat\": ", i ? "," : "");
        clremat_json_string(f, marks[i].label);
        fprintf(f, ", \"peak_bytes\": %llu, \"recompute_flops\": %.9g}", (unsigned long long)marks[i].peak_bytes,
               marks[i].recompute_cost);
    }
    fprintf(f, "\n ]}\n");
}

void clremat_report_devices_json(FILE *f, const clremat_device_info *d, size_t n)
{
    fprintf(f, "{\"devices\": [");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s\n  {\"id\": \"%u:%u\", \"platform\": ", i ? "," : "", d[i].platform_index, d[i].device_index);
        clremat_json_string(f, d[i].platform);
        fprintf(f, ", \"name\": ");
        clremat_json_string(f, d[i].name);
        fprintf(f, ", \"vendor\": ");
        clremat_json_string(f, d[i].vendor);
        fprintf(f, ", \"type\": \"%s\", \"driver_version\": ", d[i].type);
        clremat_json_string(f, d[i].driver_version);
        fprintf(f, ", \"device_version\": ");
        clremat_json_string(f, d[i].device_version);
        fprintf(f, ", \"opencl_c_version\": ");
        clremat_json_string(f, d[i].opencl_c_version);
        fprintf(f, ", \"compute_units\": %u, \"global_mem_bytes\": %llu, \"max_alloc_bytes\": %llu, "
               "\"out_of_order_queues\": %s, \"profiling\": %s, \"free_mem_bytes\": ",
               d[i].compute_units, (unsigned long long)d[i].global_mem_bytes,
               (unsigned long long)d[i].max_alloc_bytes, d[i].out_of_order ? "true" : "false",
               d[i].profiling ? "true" : "false");
        if (d[i].free_mem_bytes)
            fprintf(f, "%llu}", (unsigned long long)d[i].free_mem_bytes);
        else
            fprintf(f, "null}");
    }
    fprintf(f, "%s]}\n", n ? "\n" : "");
}


void clremat_report_train_json(FILE *f, const clremat_train_config *cfg, const clremat_train_result *r,
                               void (*extra)(FILE *f, int json, void *user), void *user)
{
    fprintf(f, "{\"model\": ");
    clremat_json_string(f, cfg->model_path);
    fprintf(f, ", \"model_name\": ");
    clremat_json_string(f, r->g ? r->g->name : "");
    fprintf(f, ", \"device\": ");
    clremat_json_string(f, r->device);
    fprintf(f, ", \"platform\": ");
    clremat_json_string(f, r->platform);
    fprintf(f, ", \"remat\": ");
    clremat_json_string(f, r->remat);
    fprintf(f, ", \"gemm\": ");
    clremat_json_string(f, r->gemm);
    fprintf(f, ", \"host_unified_memory\": %s", r->host_unified ? "true" : "false");
    fprintf(f, ", \"batch\": %lld, \"accumulate\": %d, \"micro_batch\": %lld, \"steps\": %lld, \"start_step\": %lld, "
           "\"warmup\": %lld, \"seed\": %llu, ",
           (long long)cfg->batch, r->accumulate > 1 ? r->accumulate : 1,
           (long long)(r->micro_batch ? r->micro_batch : cfg->batch), (long long)r->steps_run, (long long)r->start_step,
           (long long)r->warmup_excluded,
           (unsigned long long)cfg->seed);
    clremat_json_optimizer(f, &r->opt);
    fprintf(f, ",\n \"losses\": [");
    for (int64_t i = 0; i < r->steps_run; i++)
        clremat_json_member(f, i ? ", " : "", r->losses[i]);
    clremat_json_member(f, "],\n \"final_loss\": ", r->final_loss);
    clremat_json_member(f, ", \"val_loss\": ", r->val_loss);
    clremat_json_member(f, ", \"val_accuracy\": ", r->val_accuracy);
    clremat_json_member(f, ",\n \"step_time_ms\": {\"median\": ", r->median_ms);
    clremat_json_member(f, ", \"p10\": ", r->p10_ms);
    clremat_json_member(f, ", \"p90\": ", r->p90_ms);
    clremat_json_member(f, ", \"min\": ", r->min_ms);
    clremat_json_member(f, ", \"max\": ", r->max_ms);
    fprintf(f, "},\n \"memory\": {\"predicted_peak_bytes\": %llu, \"measured_peak_bytes\": %llu, "
           "\"reserved_peak_bytes\": %llu, \"fixed_bytes\": %llu, \"param_bytes\": %llu, "
           "\"kept_activation_bytes\": %llu, \"accumulation_bytes\": %llu, \"predicted_host_peak_bytes\": %llu, "
           "\"measured_host_peak_bytes\": %llu, \"offload_bytes\": %llu, \"offloads\": %d, "
           "\"buffers_created_after_first_step\": %llu, \"fused_update\": %s},\n",
           (unsigned long long)r->predicted_peak, (unsigned long long)r->measured_peak,
           (unsigned long long)r->reserved_peak, (unsigned long long)r->fixed_bytes,
           (unsigned long long)r->param_bytes, (unsigned long long)r->kept_act_bytes,
           (unsigned long long)r->accum_bytes, (unsigned long long)r->predicted_host_peak,
           (unsigned long long)r->measured_host_peak, (unsigned long long)r->offload_bytes, r->n_offloads,
           (unsigned long long)r->buffers_created_after_first_step, r->fused_update ? "true" : "false");
    fprintf(f, " \"precision\": ");
    clremat_json_string(f, clremat_precision_name(r->precision) ? clremat_precision_name(r->precision) : "float32");
    clremat_json_member(f, ", \"loss_scale\": ", r->loss_scale);
    fprintf(f, ", \"skipped_steps\": %lld,\n", (long long)r->skipped_steps);
    fprintf(f, " \"flops\": {\"step\": %.9g, \"recompute\": %.9g, \"recompute_share\": ", r->step_flops,
           r->recompute_flops);
    clremat_json_num(f, r->step_flops > 0 ? r->recompute_flops / r->step_flops : 0);
    fprintf(f, "}, \"recompute_actions\": %d,\n \"replanned\": ", r->n_recompute_actions);
    if (r->replans) {
        fprintf(f, "{\"count\": %d, \"step\": %lld, \"from_peak_bytes\": %llu, \"to_peak_bytes\": %llu, \"reason\": ",
               r->replans, (long long)r->replan_step, (unsigned long long)r->replan_from_peak,
               (unsigned long long)r->replan_to_peak);
        clremat_json_string(f, r->replan_reason);
        fprintf(f, "}");
    } else
        fprintf(f, "null");
    fprintf(f, ",\n \"stopped\": ");
    if (r->stopped_nonfinite || r->message[0])
        clremat_json_string(f, r->message);
    else
        fprintf(f, "null");
    if (extra)
        extra(f, 1, user);
    fprintf(f, "}\n");
}


const char *clremat_compare_status_word(const clremat_compare_run *r)
{
    if (r->status == CLREMAT_OK)
        return "ok";
    if (r->status == CLREMAT_ERR_OUT_OF_MEMORY)
        return "does_not_fit";
    return "error";
}

void clremat_report_compare_json(FILE *f, const clremat_compare_config *cfg, const clremat_compare_run *runs, int n)
{
    fprintf(f, "{\"model\": ");
    clremat_json_string(f, cfg->model_path);
    fprintf(f, ", \"batch\": %lld, \"accumulate\": %lld, \"micro_batch\": %lld, \"steps\": %lld, \"warmup\": %lld, "
            "\"seed\": %llu, ",
            (long long)cfg->batch, (long long)(cfg->accumulate > 1 ? cfg->accumulate : 1),
            (long long)(cfg->batch / (cfg->accumulate > 1 ? cfg->accumulate : 1)), (long long)cfg->steps,
            (long long)cfg->warmup, (unsigned long long)cfg->seed);
    {   /* the optimizer every run used (the parser checked it) */
        clremat_opt_config o;
        clremat_opt_config v = {CLREMAT_OPT_SGD, (float)cfg->lr, (float)cfg->momentum, (float)cfg->beta1,
                                (float)cfg->beta2, (float)cfg->epsilon, (float)cfg->weight_decay, 0};
        if (clremat_opt_defaults(cfg->optimizer ? cfg->optimizer : "adam", &o) == 0 &&
            clremat_opt_apply(&o, cfg->opt_set | (cfg->lr > 0 ? CLREMAT_OPT_SET_LR : 0u), &v) == CLREMAT_OK) {
            clremat_json_optimizer(f, &o);
            fputs(", ", f);
        }
    }
    fputs("\"runs\": [", f);
    for (int i = 0; i < n; i++) {
        const clremat_compare_run *r = &runs[i];
        fprintf(f, "%s\n  {\"device\": ", i ? "," : "");
        clremat_json_string(f, r->device);
        fprintf(f, ", \"device_id\": \"%s\", \"platform\": ", r->device_id);
        clremat_json_string(f, r->platform);
        fprintf(f, ", \"remat\": ");
        clremat_json_string(f, r->mode);
        fprintf(f, ", \"status\": \"%s\", \"error\": ", clremat_compare_status_word(r));
        if (r->status)
            clremat_json_string(f, r->error);
        else
            fputs("null", f);
        fprintf(f, ",\n   \"limit_bytes\": %llu, \"predicted_peak_bytes\": %llu, \"measured_peak_bytes\": ",
                (unsigned long long)r->limit, (unsigned long long)r->predicted_peak);
        if (r->status == CLREMAT_OK)
            fprintf(f, "%llu", (unsigned long long)r->measured_peak);
        else
            fputs("null", f);
        fprintf(f, ", \"fits\": %s,\n   \"step_time_ms\": {\"median\": ", r->fits ? "true" : "false");
        clremat_json_num(f, r->median_ms);
        clremat_json_member(f, ", \"p10\": ", r->p10_ms);
        clremat_json_member(f, ", \"p90\": ", r->p90_ms);
        clremat_json_member(f, "}, \"overhead_vs_none\": ", r->overhead);
        fprintf(f, ", \"recompute_flops\": %.9g, \"recompute_share\": ", r->recompute_flops);
        clremat_json_num(f, r->step_flops > 0 ? r->recompute_flops / r->step_flops : NAN);
        clremat_json_member(f, ",\n   \"final_loss\": ", r->status == CLREMAT_OK ? r->final_loss : NAN);
        clremat_json_member(f, ", \"val_loss\": ", r->status == CLREMAT_OK ? r->val_loss : NAN);
        clremat_json_member(f, ", \"val_accuracy\": ", r->status == CLREMAT_OK ? r->val_accuracy : NAN);
        fprintf(f, ",\n   \"numerics\": {\"finite\": %s, \"bitwise_equal_to_none\": %s, \"max_loss_diff_across_devices\": ",
                r->finite ? "true" : "false",
                r->bitwise_none < 0 ? "null" : r->bitwise_none ? "true" : "false");
        clremat_json_num(f, r->max_device_diff);
        fputs("},\n   \"losses\": [", f);
        for (int64_t k = 0; k < r->n_losses; k++)
            clremat_json_member(f, k ? ", " : "", r->losses[k]);
        fputs("]}", f);
    }
    fputs("\n]}\n", f);
}


void clremat_report_fit_json(FILE *f, const clremat_graph *gr, const clremat_opt_config *opt,
                             const clremat_fit_request *rq, const clremat_fit_row *rows, int from_cache)
{
    const clremat_fit_calibration *cal = rq->cal;
    fprintf(f, "{\"model\": ");
    clremat_json_string(f, gr->name);
    fprintf(f, ", \"batch\": %lld, ", (long long)rq->batch);
    clremat_json_optimizer(f, opt);
    fprintf(f, ", \"device\": ");
    if (cal)
        clremat_json_string(f, cal->device);
    else
        fprintf(f, "null");
    fprintf(f, ", \"calibration\": ");
    if (cal) {
        fprintf(f, "{\"batch\": %lld, \"remat\": ", (long long)cal->batch);
        clremat_json_string(f, cal->remat);
        clremat_json_member(f, ", \"measured_step_ms\": ", cal->step_ms);
        clremat_json_member(f, ", \"device_scale\": ", cal->device_scale);
        clremat_json_member(f, ", \"update_ms\": ", cal->update_ms);
        clremat_json_member(f, ", \"overhead_ms\": ", cal->overhead_ms);
        clremat_json_member(f, ", \"offload_ms_per_byte\": ", cal->offload_ms_per_byte);
        fprintf(f, ", \"from_cache\": %s, \"layer_times\": \"%s\"", from_cache ? "true" : "false",
                cal->times_from_flops ? "flops" : "device");
        fprintf(f, "}, \"step_time_note\": null");
    } else {
        fprintf(f, "null, \"step_time_note\": \"" CLREMAT_FIT_NO_TIME_NOTE "\"");
    }
    fprintf(f, ", \"max_batch_cap\": %lld, \"sizes\": [", (long long)rq->max_batch_cap);
    for (int s = 0; s < rq->n_sizes; s++) {
        int fastest = -1;
        fprintf(f, "%s\n  {\"memory_bytes\": %llu, \"configs\": [", s ? "," : "", (unsigned long long)rq->sizes[s]);
        for (int c = 0; c < rq->n_configs; c++) {
            const clremat_fit_row *r = &rows[s * rq->n_configs + c];
            if (r->fastest)
                fastest = c;
            fprintf(f, "%s\n   {\"label\": ", c ? "," : "");
            clremat_json_string(f, rq->configs[c].label);
            fprintf(f, ", \"remat\": ");
            clremat_json_string(f, rq->configs[c].policy.text);
            fprintf(f, ", \"accumulate\": %d, \"offload\": %s", rq->configs[c].accumulate > 1 ? rq->configs[c].accumulate : 1,
                   rq->configs[c].offload ? "true" : "false");
            fprintf(f, ", \"planned\": %s, \"peak_bytes\": ", r->planned ? "true" : "false");
            if (r->planned)
                fprintf(f, "%llu", (unsigned long long)r->peak_bytes);
            else
                fprintf(f, "null");
            fprintf(f, ", \"fits\": %s", r->fits ? "true" : "false");
            clremat_json_member(f, ", \"recompute_flops\": ", r->planned ? r->recompute_flops : NAN);
            clremat_json_member(f, ", \"recompute_share\": ", r->planned ? r->recompute_share : NAN);
            clremat_json_member(f, ", \"predicted_step_ms\": ", r->step_ms);
            fprintf(f, ", \"fastest\": %s, \"largest_batch\": %lld, \"largest_batch_capped\": %s, "
                   "\"largest_batch_peak_bytes\": ",
                   r->fastest ? "true" : "false", (long long)r->max_batch, r->max_batch_capped ? "true" : "false");
            if (r->max_batch > 0)
                fprintf(f, "%llu", (unsigned long long)r->max_batch_peak);
            else
                fprintf(f, "null");
            clremat_json_member(f, ", \"largest_batch_step_ms\": ", r->max_batch_step_ms);
            fprintf(f, ", \"note\": ");
            if (r->note[0])
                clremat_json_string(f, r->note);
            else
                fprintf(f, "null");
            fprintf(f, "}");
        }
        fprintf(f, "\n  ], \"fastest\": ");
        if (fastest >= 0)
            clremat_json_string(f, rq->configs[fastest].label);
        else
            fprintf(f, "null");
        fprintf(f, "}");
    }
    fprintf(f, "\n ]}\n");
}
