/* test_device_limits.c: the device's real limits, checked before anything
 * runs. A model with a tensor larger than the device's largest single
 * allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE) is refused at planning time,
 * naming the tensor, its bytes and the limit: no remat plan can split one
 * tensor. The limit is lowered on a real context so every device takes the
 * same path. A device test. */
#include "testutil.h"
#include "executor.h"
#include <string.h>

START_TEST(test_tensor_above_max_alloc_is_refused)
{
    clremat_ctx *ctx = NULL;
    clremat_graph *g = NULL;
    clremat_policy pol;
    clremat_plan plan;
    clremat_layer_cost *costs = NULL;
    char path[512];
    const char *mdir = getenv("CLREMAT_MODELS");
    size_t largest = 0, *wf = NULL, *wb = NULL;
    const char *largest_layer = NULL;
    uint64_t real_max;
    snprintf(path, sizeof path, "%s/transformer.json", mdir ? mdir : "models");
    ck_assert_int_eq(clremat_ctx_create(getenv("CLREMAT_TEST_DEVICE"), 0, &ctx), CLREMAT_OK);
    ck_assert_msg(clremat_graph_load(path, &g) == CLREMAT_OK, "%s", clremat_last_error());
    ck_assert_int_eq(clremat_policy_parse("full", &pol), CLREMAT_OK);
    real_max = ctx->info.max_alloc_bytes;
    /* at the device's own limit the model plans */
    ck_assert_msg(clremat_plan_for_ctx(ctx, g, 16, &pol, 2, 0, NULL, 0, &plan, &costs, &wf, &wb) == CLREMAT_OK, "%s",
                  clremat_last_error());
    /* the largest single tensor: an activation slot, a layer's workspace
     * or its GEMM workspace (a buffer of its own) */
    for (int l = 0; l < g->n_layers; l++) {
        size_t cand[CLREMAT_MAX_SLOTS + 3] = {0};
        for (int s = 0; s < costs[l].n_slots; s++)
            cand[s] = costs[l].slot_bytes[s];
        cand[CLREMAT_MAX_SLOTS] = costs[l].fwd_temp_bytes - wf[l];
        cand[CLREMAT_MAX_SLOTS + 1] = costs[l].bwd_temp_bytes - wb[l];
        cand[CLREMAT_MAX_SLOTS + 2] = wf[l] > wb[l] ? wf[l] : wb[l];
        for (int k = 0; k < CLREMAT_MAX_SLOTS + 3; k++)
            if (cand[k] > largest)
                largest = cand[k], largest_layer = g->layers[l].name;
    }
    ck_assert_uint_gt(largest, 1024);
    clremat_plan_free(&plan);
    free(costs);
    free(wf);
    free(wb);
    costs = NULL;
    /* one byte below the largest activation: refused, whatever the mode */
    ctx->info.max_alloc_bytes = largest - 1;
    ck_assert_int_eq(clremat_plan_for_ctx(ctx, g, 16, &pol, 2, 0, NULL, 0, &plan, &costs, NULL, NULL),
                     CLREMAT_ERR_TOO_LARGE);
    {
        const char *e = clremat_last_error();
        char num[64];
        ck_assert_msg(strstr(e, largest_layer) != NULL, "%s does not name %s", e, largest_layer);
        snprintf(num, sizeof num, "%zu bytes", largest);
        ck_assert_msg(strstr(e, num) != NULL, "%s does not say %s", e, num);
        snprintf(num, sizeof num, "%zu bytes)", largest - 1);
        ck_assert_msg(strstr(e, num) != NULL && strstr(e, "CL_DEVICE_MAX_MEM_ALLOC_SIZE"), "%s: no limit", e);
    }
    ck_assert_ptr_null(costs);
    ctx->info.max_alloc_bytes = real_max;
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("device_limits", 120, &tc);
    tcase_add_test(tc, test_tensor_above_max_alloc_is_refused);
    return test_run_device_suite(s);
}
