/* cli_plan.c: `clremat plan MODEL`: the remat plan of a model at a batch
 * size, per layer and in total, as a table or JSON. Needs no device. */
#include "cli.h"
#include "executor.h"
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

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

int cli_plan(const cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"remat", required_argument, NULL, 'r'}, {"batch", required_argument, NULL, 'b'},
        {"optimizer", required_argument, NULL, 'o'}, {"json", no_argument, NULL, 'j'},
        {"actions", no_argument, NULL, 'a'}, {"device", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'}, {"gemm", required_argument, NULL, 'G'}, {NULL, 0, NULL, 0}};
    const char *remat = "none", *optname = "adam", *device = NULL, *gemm = NULL;
    clremat_ctx *ctx = NULL;
    long long batch = 32;
    int json = 0, actions = 0, c, st;
    clremat_graph *gr = NULL;
    clremat_policy pol;
    clremat_plan plan;
    clremat_layer_cost *costs = NULL;
    clremat_opt_config opt;
    char *end;
    (void)g;

    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'r': remat = optarg; break;
        case 'b':
            batch = strtoll(optarg, &end, 10);
            if (end == optarg || *end || batch < 1)
                return cli_error("--batch takes a positive integer, got '%s'", optarg), 2;
            break;
        case 'o': optname = optarg; break;
        case 'j': json = 1; break;
        case 'a': actions = 1; break;
        case 'd': device = optarg; break; /* used with --gemm */
        case 'G': gemm = optarg; break;
        case 'h':
            printf("usage: clremat plan MODEL [--remat MODE] [--batch N] [--optimizer NAME] [--json] [--actions]\n"
                   "                          [--gemm native|clblast|auto [--device SEL]]\n"
                   "Without --gemm no device is opened and the plan is the native GEMM path's (no GEMM\n"
                   "workspace); with --gemm the device is opened and the path's workspace is included.\n"
                   "Prints, per layer, output and saved bytes, whether tensors are kept or discarded after\n"
                   "the forward pass, recomputations and forward FLOPs; then the predicted peak of live\n"
                   "device bytes, activation bytes kept, and recompute FLOPs as a share of the step.\n"
                   "--actions also lists the step's actions with predicted live bytes.\n");
            return 0;
        default: return 2;
        }
    }
    if (optind + 1 != argc)
        return cli_error("plan: expected one MODEL argument"), 2;
    if (clremat_opt_defaults(optname, &opt) != 0)
        return cli_error("unknown optimizer '%s'; valid: sgd, adam, adamw", optname);
    if ((st = clremat_graph_load(argv[optind], &gr)))
        return cli_error("%s", clremat_last_error());
    if (gemm) { /* h6: plan for a device's GEMM path (its workspace included) */
        clremat_gemm_path gp;
        if ((st = clremat_gemm_path_parse(gemm, &gp)) || (st = clremat_ctx_create(device, 0, &ctx))) {
            cli_error("%s", clremat_last_error());
            clremat_graph_free(gr);
            return 1;
        }
        clremat_ctx_set_gemm(ctx, gp);
    }
    if ((st = clremat_policy_parse(remat, &pol)) ||
        (st = ctx ? clremat_plan_for_ctx(ctx, gr, batch, &pol, clremat_opt_state_count(opt.kind), &plan, &costs,
                                         NULL, NULL)
                  : clremat_plan_for(gr, batch, &pol, clremat_opt_state_count(opt.kind), &plan, &costs))) {
        cli_error("%s", ctx ? clremat_ctx_last_error(ctx) : clremat_last_error());
        clremat_ctx_destroy(ctx);
        clremat_graph_free(gr);
        return 1;
    }
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, gr->name);
        printf(", \"remat\": ");
        cli_json_string(stdout, pol.text);
        printf(", \"batch\": %lld, \"gemm\": ", batch);
        if (ctx)
            cli_json_string(stdout, clremat_gemm_path_name(clremat_ctx_gemm(ctx)));
        else
            printf("null");
        printf(", \"layers\": [");
        for (int l = 0; l < gr->n_layers; l++) {
            const clremat_layer *L = &gr->layers[l];
            printf("%s\n  {\"name\": ", l ? "," : "");
            cli_json_string(stdout, L->name);
            printf(", \"type\": \"%s\", \"block\": ", clremat_layer_type_name(L->type));
            if (L->block >= 0)
                cli_json_string(stdout, gr->blocks[L->block].name);
            else
                printf("null");
            printf(", \"output_bytes\": %zu, \"saved_bytes\": %llu, \"output\": \"%s\", \"internals\": \"%s\", "
                   "\"wrapped\": %s, \"recomputes\": %d, \"forward_flops\": %.6g}",
                   costs[l].slot_bytes[0], (unsigned long long)saved_bytes(gr, costs, l), out_state(&plan, l),
                   internal_state(&plan, costs, l), plan.wrapped_layer[l] || plan.act_discard[l] ? "true" : "false",
                   plan.recomputes[l], costs[l].fwd_flops);
        }
        printf("\n ], \"predicted_peak_bytes\": %llu, \"fixed_bytes\": %llu, \"param_bytes\": %llu, "
               "\"kept_activation_bytes\": %llu, \"step_flops\": %.6g, \"recompute_flops\": %.6g, "
               "\"recompute_share\": %.6g, \"recompute_actions\": %d",
               (unsigned long long)plan.peak_bytes, (unsigned long long)plan.fixed_bytes,
               (unsigned long long)plan.param_bytes, (unsigned long long)plan.kept_act_bytes, plan.step_flops,
               plan.recompute_flops, plan.step_flops > 0 ? plan.recompute_flops / plan.step_flops : 0.0,
               plan.n_recompute_actions);
        if (actions) {
            printf(",\n \"actions\": [");
            for (int i = 0; i < plan.n_actions; i++) {
                const clremat_action *a = &plan.actions[i];
                printf("%s\n  {\"action\": \"%s\", \"layer\": ", i ? "," : "", clremat_action_name(a->kind));
                if (a->layer >= 0)
                    cli_json_string(stdout, gr->layers[a->layer].name);
                else
                    printf("null");
                printf(", \"peak_bytes\": %llu, \"live_bytes_after\": %llu}", (unsigned long long)a->peak_during,
                       (unsigned long long)a->live_after);
            }
            printf("\n ]");
        }
        printf("}\n");
    } else {
        printf("model %s, remat %s, batch %lld", gr->name, pol.text, batch);
        if (ctx)
            printf(", gemm %s on %s", clremat_gemm_path_name(clremat_ctx_gemm(ctx)), clremat_ctx_device(ctx)->name);
        printf("\n\n");
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
        printf("fixed                 %llu bytes (parameters %llu, with gradients, optimizer state, batch)\n",
               (unsigned long long)plan.fixed_bytes, (unsigned long long)plan.param_bytes);
        printf("activations kept      %llu bytes after the forward pass\n", (unsigned long long)plan.kept_act_bytes);
        printf("recompute             %.4g FLOPs = %.1f%% of the step's %.4g FLOPs (%d recompute actions)\n",
               plan.recompute_flops, plan.step_flops > 0 ? 100.0 * plan.recompute_flops / plan.step_flops : 0.0,
               plan.step_flops, plan.n_recompute_actions);
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
    clremat_plan_free(&plan);
    free(costs);
    clremat_graph_free(gr);
    clremat_ctx_destroy(ctx);
    return 0;
}
