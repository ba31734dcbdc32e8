/* test_batch_limit.c: the largest batch a model may run at (no device
 * buffer over CLREMAT_MAX_TENSOR_ELEMS elements, since kernels index with
 * 32-bit ints): clremat_max_batch and clremat_batch_check, at float32 on a
 * model whose largest tensor is known by construction, and at every
 * precision as a property of the layers' costs: at the limit every buffer
 * fits, one sample more and one does not. A 16-bit slot holds as many
 * elements as its float32 twin in half the bytes, so counting its bytes as
 * floats would let a batch through whose slot overflows. */
#include "testutil.h"
#include "graph.h"
#include "layers.h"
#include <string.h>

/* One dense layer of UNITS outputs (prime, so no rounding can hide an
 * off-by-one) regressed with mean squared error: per sample, the largest
 * tensor is the layer's output (UNITS elements; the labels are as large). */
#define UNITS 1000003
#define EXPECTED_MAX (CLREMAT_MAX_TENSOR_ELEMS / UNITS)

static clremat_graph *model(const char *precision)
{
    char json[1024];
    clremat_graph *g = NULL;
    snprintf(json, sizeof json,
             "{\"name\": \"wide\", \"precision\": \"%s\", \"input\": {\"shape\": [3]}, \"layers\": ["
             "{\"name\": \"wide_out\", \"type\": \"dense\", \"units\": %d},"
             "{\"name\": \"loss\", \"type\": \"mse\"}]}",
             precision, UNITS);
    ck_assert_msg(clremat_graph_load_string(json, "wide.json", &g) == CLREMAT_OK, "%s", clremat_last_error());
    return g;
}

/* 1 when at batch every buffer of a step holds at most
 * CLREMAT_MAX_TENSOR_ELEMS elements: the input, the labels, each layer's
 * slots (2-byte elements where the cost marks the slot 16-bit) and its
 * forward and backward workspaces (float32). */
static int buffers_fit(const clremat_graph *g, int64_t batch)
{
    const int64_t max = CLREMAT_MAX_TENSOR_ELEMS;
    if (batch * clremat_shape_elems(&g->io.input) > max || batch * clremat_shape_elems(&g->io.labels) > max)
        return 0;
    for (int l = 0; l < g->n_layers; l++) {
        clremat_layer_cost c;
        ck_assert_int_eq(clremat_layer_cost_of(g, l, batch, &c), CLREMAT_OK);
        for (int s = 0; s < c.n_slots; s++)
            if ((int64_t)(c.slot_bytes[s] / (c.slot16 >> s & 1u ? 2 : 4)) > max)
                return 0;
        if ((int64_t)(c.fwd_temp_bytes / 4) > max || (int64_t)(c.bwd_temp_bytes / 4) > max)
            return 0;
    }
    return 1;
}

static void check_limit(const char *precision)
{
    clremat_graph *g = model(precision);
    int who = -2;
    char want[64];
    const int64_t max = clremat_max_batch(g, &who);
    ck_assert_msg(buffers_fit(g, max), "%s: a buffer overflows at the largest batch %lld", precision,
                  (long long)max);
    ck_assert_msg(!buffers_fit(g, max + 1), "%s: batch %lld + 1 still fits: the limit is loose", precision,
                  (long long)max);
    if (!strcmp(precision, "float32"))
        ck_assert_int_eq(max, EXPECTED_MAX);
    else
        ck_assert_int_le(max, EXPECTED_MAX);
    ck_assert_msg(who >= -1, "%s: no bounding tensor named", precision);
    ck_assert_int_eq(clremat_batch_check(g, max), CLREMAT_OK);
    ck_assert_int_eq(clremat_batch_check(g, max + 1), CLREMAT_ERR_TOO_LARGE);
    snprintf(want, sizeof want, "the largest is %lld", (long long)max);
    ck_assert_msg(strstr(clremat_last_error(), want), "%s: %s", precision, clremat_last_error());
    ck_assert_int_eq(clremat_batch_check(g, 0), CLREMAT_ERR_INVALID_ARGUMENT);
    clremat_graph_free(g);
}

START_TEST(test_limit_float32) { check_limit("float32"); }
END_TEST

START_TEST(test_limit_mixed_float16) { check_limit("mixed_float16"); }
END_TEST

START_TEST(test_limit_mixed_bfloat16) { check_limit("mixed_bfloat16"); }
END_TEST

int main(void)
{
    TCase *tc;
    Suite *s = test_suite("batch_limit", 0, &tc);
    tcase_add_test(tc, test_limit_float32);
    tcase_add_test(tc, test_limit_mixed_float16);
    tcase_add_test(tc, test_limit_mixed_bfloat16);
    return test_run_suite(s);
}
