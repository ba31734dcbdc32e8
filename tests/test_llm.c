/* test_llm.c: small language models end to end on a device (issue 13):
 *  - "trainable": false (a layer, a block): the frozen parameters are
 *    bitwise unchanged after training, the others change; the plan's fixed
 *    bytes drop by exactly (1 + optimizer states) x the frozen bytes, and
 *    the measured peak equals the predicted one;
 *  - tied embeddings: one parameter; after an SGD step the table equals the
 *    untied twin's table plus its output kernel's change (the two uses'
 *    gradients summed);
 *  - LoRA: only lora_a and lora_b change; the fixed bytes count gradients
 *    and state for them alone; losses and parameters bitwise identical
 *    across remat modes, predicted == measured;
 *  - LoRA fine-tuning of llama_tiny from a saved base (models/llama_tiny.json
 *    trained, saved; models/llama_tiny_lora.json loads it, trains, saves):
 *    every base tensor of the saved file is byte-identical to the base's;
 *  - llama_tiny on the "language" task: the validation loss falls well below
 *    the unigram entropy of the data within a few hundred steps.
 * The two llama_tiny tests are left out with CLREMAT_TEST_REDUCED (slow
 * implementations). Skips (77) without a device. */
#include "testutil.h"
#include "testmodel.h"
#include "data.h"
#include "executor.h"
#include "safetensors.h"
#include "train.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT 900
#define BATCH 4

/* A one-block Llama-style decoder (T 16, width 32, vocab 64); %s slots: the
 * embedding's extra fields, the block's, the up projection's, the head's. */
static const char *const small_fmt =
    "{\"name\": \"small\", \"input\": {\"shape\": [16], \"dtype\": \"int32\"}, \"layers\": ["
    "{\"name\": \"embed\", \"type\": \"embedding\", \"vocab\": 64, \"dim\": 32%s},"
    "{\"block\": \"decoder_block\"%s, \"layers\": ["
    "  {\"name\": \"n1\", \"type\": \"rmsnorm\"},"
    "  {\"name\": \"attn\", \"type\": \"attention\", \"heads\": 4, \"kv_heads\": 2, \"causal\": true,"
    "   \"use_bias\": false, \"rope\": {\"theta\": 10000}},"
    "  {\"name\": \"r1\", \"type\": \"add\", \"inputs\": [\"attn\", \"@block_input\"]},"
    "  {\"name\": \"n2\", \"type\": \"rmsnorm\"},"
    "  {\"name\": \"gate\", \"type\": \"dense\", \"units\": 48, \"use_bias\": false, \"activation\": \"silu\"},"
    "  {\"name\": \"up\", \"type\": \"dense\", \"units\": 48, \"use_bias\": false, \"inputs\": [\"n2\"]%s},"
    "  {\"name\": \"mul\", \"type\": \"multiply\", \"inputs\": [\"gate\", \"up\"]},"
    "  {\"name\": \"down\", \"type\": \"dense\", \"units\": 32, \"use_bias\": false},"
    "  {\"name\": \"r2\", \"type\": \"add\", \"inputs\": [\"down\", \"r1\"]}]},"
    "{\"name\": \"norm\", \"type\": \"rmsnorm\"},"
    "{\"name\": \"head\", \"type\": \"dense\", \"units\": 64, \"use_bias\": false%s},"
    "{\"name\": \"loss\", \"type\": \"softmax_cross_entropy\"}]}";

static clremat_graph *small_model(const char *emb, const char *block, const char *up, const char *head)
{
    char json[4096];
    clremat_graph *g = NULL;
    snprintf(json, sizeof json, small_fmt, emb, block, up, head);
    ck_assert_msg(clremat_graph_load_string(json, "small", &g) == CLREMAT_OK, "%s", clremat_last_error());
    return g;
}

typedef struct run_out {
    float loss[3];
    float *init, *params;           /* parameters before and after */
    uint64_t fixed, predicted, measured, param_bytes;
    int fused;                      /* the optimizer update ran inside the backward */
} run_out;

/* Runs steps training steps of g (mode, optimizer opt_name with lr) on
 * the language task; fills out. init (may be NULL) sets the parameters
 * first. */
static void run(clremat_ctx *ctx, clremat_graph *g, const char *mode, const char *opt_name, double lr, int steps,
                const float *init, run_out *out)
{
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    clremat_dataset d;
    float *x, *y;
    ck_assert_int_eq(clremat_data_synthetic(g, "language", 5, 64, 0, &d), CLREMAT_OK);
    x = malloc(sizeof(float) * (size_t)(BATCH * d.train.x_elems));
    y = malloc(sizeof(float) * (size_t)(BATCH * d.train.y_elems));
    ck_assert_int_eq(clremat_policy_parse(mode, &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults(opt_name, &opt), 0);
    opt.lr = (float)lr;
    if (!strcmp(opt_name, "sgd"))
        opt.momentum = 0.0f;
    clremat_pool_trim(ctx->pool);
    ck_assert_msg(clremat_trainer_new(ctx, g, BATCH, &pol, &opt, 3, &t) == CLREMAT_OK, "%s: %s", mode,
                  clremat_ctx_last_error(ctx));
    out->param_bytes = t->plan.param_bytes;
    out->init = malloc(t->plan.param_bytes);
    out->params = malloc(t->plan.param_bytes);
    if (init)
        ck_assert_int_eq(clremat_trainer_set_params(t, init), CLREMAT_OK);
    ck_assert_int_eq(clremat_trainer_get_params(t, out->init), CLREMAT_OK);
    clremat_pool_reset_peaks(ctx->pool);
    for (int s = 0; s < steps; s++) {
        float correct;
        clremat_data_batch(&d.train, 5, s, BATCH, x, y);
        ck_assert_msg(clremat_trainer_step(t, x, y, &out->loss[s % 3], &correct) == CLREMAT_OK, "%s step %d: %s",
                      mode, s, clremat_ctx_last_error(ctx));
        ck_assert(isfinite(out->loss[s % 3]));
    }
    out->fixed = t->plan.fixed_bytes;
    out->fused = t->fused;
    out->predicted = t->plan.peak_bytes;
    out->measured = clremat_pool_get_stats(ctx->pool).live_peak;
    ck_assert_int_eq(clremat_trainer_get_params(t, out->params), CLREMAT_OK);
    ck_assert_msg(steps == 0 || out->measured == out->predicted, "%s %s: measured peak %llu, predicted %llu",
                  g->name, mode, (unsigned long long)out->measured, (unsigned long long)out->predicted);
    /* fixed: every parameter, a gradient and two Adam moments (one SGD
     * buffer) per trained float, the input batch and labels, the scratch;
     * with the fused update (the default) no gradient for a trained
     * parameter of one layer (all but a tied embedding table) */
    uint64_t fused_grads = 0;
    for (int l = 0; t->fused && l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++)
            if (!g->layers[l].params[p].frozen &&
                !(g->layers[l].type == CLREMAT_EMBEDDING && p == 0 && clremat_graph_tied_user(g, l) >= 0))
                fused_grads += (uint64_t)g->layers[l].params[p].elems * sizeof(float);
    ck_assert_uint_eq(out->fixed, out->param_bytes +
                                      (uint64_t)clremat_graph_trainable_elems(g) * sizeof(float) *
                                          (strcmp(opt_name, "adam") ? 2 : 3) -
                                      fused_grads + 2 * BATCH * 16 * sizeof(float) + CLREMAT_SCRATCH_BYTES);
    clremat_trainer_free(t);
    clremat_data_free(&d);
    free(x);
    free(y);
}

static void run_free(run_out *r)
{
    free(r->init);
    free(r->params);
}

/* Offset (in floats) of parameter p of layer l in the get_params layout. */
static size_t param_off(const clremat_graph *g, int l, int p)
{
    size_t off = 0;
    for (int i = 0; i < g->n_layers; i++)
        for (int q = 0; q < g->layers[i].n_params; q++) {
            if (i == l && q == p)
                return off;
            off += (size_t)g->layers[i].params[q].elems;
        }
    ck_abort_msg("no parameter %d of layer %d", p, l);
    return 0;
}

/* Checks every parameter: frozen ones bitwise unchanged, trained ones changed. */
static void check_frozen(const clremat_graph *g, const run_out *r, int64_t *frozen_elems)
{
    *frozen_elems = 0;
    for (int l = 0; l < g->n_layers; l++)
        for (int p = 0; p < g->layers[l].n_params; p++) {
            const clremat_param *pr = &g->layers[l].params[p];
            size_t off = param_off(g, l, p), n = (size_t)pr->elems * sizeof(float);
            int same = memcmp(r->init + off, r->params + off, n) == 0;
            if (pr->frozen)
                *frozen_elems += pr->elems;
            ck_assert_msg(same == pr->frozen, "%s/%s: %s after training but %s", g->layers[l].name, pr->name,
                          same ? "unchanged" : "changed", pr->frozen ? "frozen" : "trained");
        }
}

START_TEST(test_trainable_false)
{
    clremat_ctx *ctx;
    clremat_graph *all = small_model("", "", "", ""), *fr;
    run_out a, b, c;
    int64_t frozen, dummy;
    TEST_OPEN_CTX(ctx, 0);
    /* the embedding and the whole block frozen; the final norm and head trained */
    fr = small_model(", \"trainable\": false", ", \"trainable\": false", "", "");
    run(ctx, all, "none", "adam", 1e-2, 3, NULL, &a);
    run(ctx, fr, "none", "adam", 1e-2, 3, NULL, &b);
    run(ctx, fr, "full", "adam", 1e-2, 3, NULL, &c);
    check_frozen(all, &a, &dummy);
    ck_assert_int_eq(dummy, 0);
    check_frozen(fr, &b, &frozen);
    ck_assert_int_gt(frozen, 0);
    ck_assert_int_eq(frozen + clremat_graph_trainable_elems(fr), clremat_graph_param_elems(fr));
    /* no two Adam moments for each frozen float, and no gradient (which
     * the fused update does not keep for a trained one either) */
    ck_assert_int_eq(a.fused, b.fused);
    ck_assert_uint_eq(a.fixed - b.fixed, (uint64_t)frozen * sizeof(float) * (a.fused ? 2 : 3));
    ck_assert_uint_eq(b.param_bytes, a.param_bytes);
    /* remat changes nothing: the same losses and parameters */
    ck_assert(memcmp(b.loss, c.loss, sizeof b.loss) == 0);
    ck_assert(memcmp(b.params, c.params, b.param_bytes) == 0);
    ck_assert_uint_lt(c.measured, b.measured);
    fprintf(stderr, "trainable false: fixed %llu bytes, all trained %llu (%lld frozen floats)\n",
            (unsigned long long)b.fixed, (unsigned long long)a.fixed, (long long)frozen);
    run_free(&a);
    run_free(&b);
    run_free(&c);
    clremat_graph_free(all);
    clremat_graph_free(fr);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_tied_embeddings)
{
    clremat_ctx *ctx;
    clremat_graph *tied = small_model("", "", "", ", \"tie\": \"embed\""), *untied = small_model("", "", "", "");
    run_out t, u, z;
    const int V = 64, D = 32, emb = 0, head = untied->n_layers - 2;
    size_t toff = param_off(untied, emb, 0), koff = param_off(untied, head, 0);
    float *init;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(tied->layers[head].n_params, 0);
    ck_assert_int_eq(clremat_graph_param_elems(untied) - clremat_graph_param_elems(tied), V * D);
    /* the untied twin starts where the tied model does, with kernel = table^T
     * (the head's kernel is the last parameter: the rest lie at the same offsets) */
    ck_assert_uint_eq(koff, (size_t)clremat_graph_param_elems(tied));
    run(ctx, untied, "none", "sgd", 0.5, 0, NULL, &z);
    init = z.init;
    free(z.params);
    run(ctx, tied, "none", "sgd", 0.5, 0, NULL, &z);
    memcpy(init, z.init, sizeof(float) * koff);
    for (int v = 0; v < V; v++)
        for (int d = 0; d < D; d++)
            init[koff + (size_t)d * V + v] = z.init[toff + (size_t)v * D + d];
    run_free(&z);
    run(ctx, tied, "none", "sgd", 0.5, 1, NULL, &t);
    run(ctx, untied, "none", "sgd", 0.5, 1, init, &u);
    ck_assert_msg(fabsf(t.loss[0] - u.loss[0]) <= 1e-5f, "loss %g vs untied %g", t.loss[0], u.loss[0]);
    for (int v = 0; v < V; v++)
        for (int d = 0; d < D; d++) {
            size_t ti = toff + (size_t)v * D + d, ki = koff + (size_t)d * V + v;
            /* table' = table - lr (g_embed + g_head^T) = untied table' + (untied kernel' - kernel)^T */
            double want = (double)u.params[ti] + ((double)u.params[ki] - (double)u.init[ki]);
            ck_assert_msg(fabs(t.params[ti] - want) <= 1e-5 * (1 + fabs(want)), "table[%d][%d]: %.8g, want %.8g",
                          v, d, (double)t.params[ti], want);
        }
    /* the tied head's gradient reached the table: it moved more than by the embedding's part alone */
    {
        double moved = 0;
        for (int i = 0; i < V * D; i++)
            moved += fabs((double)u.params[koff + (size_t)i] - (double)u.init[koff + (size_t)i]);
        ck_assert_msg(moved > 0, "the head's gradient is zero");
    }
    run_free(&t);
    run_free(&u);
    free(init);
    clremat_graph_free(tied);
    clremat_graph_free(untied);
    clremat_ctx_destroy(ctx);
}
END_TEST

START_TEST(test_lora)
{
    clremat_ctx *ctx;
    clremat_graph *g;
    run_out a, b, c;
    int64_t frozen;
    const char *modes[] = {"full", "list_of_layers:decoder_block"};
    TEST_OPEN_CTX(ctx, 0);
    /* a frozen model with adapters on the up projection and the head */
    g = small_model(", \"trainable\": false", ", \"trainable\": false",
                    ", \"lora\": {\"rank\": 4, \"alpha\": 8}",
                    ", \"trainable\": false, \"lora\": {\"rank\": 2}");
    run(ctx, g, "none", "adam", 1e-2, 3, NULL, &a);
    check_frozen(g, &a, &frozen);
    ck_assert_int_eq(clremat_graph_trainable_elems(g), 32 * 4 + 4 * 48 + 32 * 2 + 2 * 64 + 32); /* + final norm */
    for (int i = 0; i < 2; i++) {
        run(ctx, g, modes[i], "adam", 1e-2, 3, NULL, i ? &c : &b);
        ck_assert(memcmp(a.loss, (i ? &c : &b)->loss, sizeof a.loss) == 0);
        ck_assert(memcmp(a.params, (i ? &c : &b)->params, a.param_bytes) == 0);
    }
    ck_assert_uint_lt(b.measured, a.measured);
    run_free(&a);
    run_free(&b);
    run_free(&c);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* Every tensor named LAYER/PARAM of a safetensors file, compared by bytes. */
static void check_same_tensor(const clremat_st_file *a, const clremat_st_file *b, const char *name)
{
    const clremat_st_tensor *x = clremat_st_find(a, name), *y = clremat_st_find(b, name);
    ck_assert_msg(x && y, "tensor %s missing", name);
    ck_assert_int_eq(x->elems, y->elems);
    ck_assert_msg(memcmp(x->data, y->data, sizeof(float) * (size_t)x->elems) == 0, "%s changed", name);
}

START_TEST(test_lora_finetune_llama_tiny)
{
    clremat_ctx *ctx;
    clremat_graph *base = test_load_model("llama_tiny.json"), *lora = test_load_model("llama_tiny_lora.json");
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    clremat_dataset d;
    clremat_st_file fb, fl;
    char pb[256], pl[256];
    float *x, *y, loss, correct;
    int n_lora = 0, n_checked = 0;
    TEST_OPEN_CTX(ctx, 0);
    snprintf(pb, sizeof pb, "/tmp/clremat-llm-base-%ld.safetensors", (long)getpid());
    snprintf(pl, sizeof pl, "/tmp/clremat-llm-lora-%ld.safetensors", (long)getpid());
    ck_assert_int_eq(clremat_data_synthetic(base, "language", 2, 16, 0, &d), CLREMAT_OK);
    x = malloc(sizeof(float) * (size_t)(2 * d.train.x_elems));
    y = malloc(sizeof(float) * (size_t)(2 * d.train.y_elems));
    ck_assert_int_eq(clremat_policy_parse("none", &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    /* the base: two steps, saved */
    ck_assert_int_eq(clremat_trainer_new(ctx, base, 2, &pol, &opt, 1, &t), CLREMAT_OK);
    for (int s = 0; s < 2; s++) {
        clremat_data_batch(&d.train, 2, s, 2, x, y);
        ck_assert_int_eq(clremat_trainer_step(t, x, y, &loss, &correct), CLREMAT_OK);
    }
    ck_assert_int_eq(clremat_weights_save(t, pb), CLREMAT_OK);
    clremat_trainer_free(t);
    /* the fine-tune: the base's weights (adapters as initialized), three steps, saved */
    ck_assert_int_eq(clremat_trainer_new(ctx, lora, 2, &pol, &opt, 1, &t), CLREMAT_OK);
    ck_assert_msg(clremat_weights_load_opt(t, pb, 0) == CLREMAT_OK, "%s", clremat_last_error());
    for (int s = 0; s < 3; s++) {
        clremat_data_batch(&d.train, 2, 10 + s, 2, x, y);
        ck_assert_int_eq(clremat_trainer_step(t, x, y, &loss, &correct), CLREMAT_OK);
        ck_assert(isfinite(loss));
    }
    ck_assert_int_eq(clremat_weights_save(t, pl), CLREMAT_OK);
    clremat_trainer_free(t);
    ck_assert_int_eq(clremat_st_read(pb, &fb), CLREMAT_OK);
    ck_assert_int_eq(clremat_st_read(pl, &fl), CLREMAT_OK);
    for (int l = 0; l < lora->n_layers; l++)
        for (int p = 0; p < lora->layers[l].n_params; p++) {
            char name[200];
            const clremat_param *pr = &lora->layers[l].params[p];
            snprintf(name, sizeof name, "%s/%s", lora->layers[l].name, pr->name);
            if (!strncmp(pr->name, "lora_", 5)) {
                const clremat_st_tensor *tt = clremat_st_find(&fl, name);
                float mx = 0;
                ck_assert_ptr_nonnull(tt);
                ck_assert_ptr_null(clremat_st_find(&fb, name));
                for (int64_t i = 0; i < tt->elems; i++)
                    mx = fmaxf(mx, fabsf(((const float *)tt->data)[i]));
                ck_assert_msg(mx > 0, "%s is all zero after training", name); /* lora_b starts at zero */
                n_lora++;
                continue;
            }
            ck_assert_msg(pr->frozen, "%s is trained in the LoRA model", name);
            check_same_tensor(&fb, &fl, name);
            n_checked++;
        }
    ck_assert_int_eq(n_lora, 2 * 3 * 4); /* lora_a and lora_b of the three MLP projections of 4 blocks */
    {
        /* every weight tensor of the base (not its optimizer state) was compared */
        int n_weights = 0;
        for (size_t i = 0; i < fb.n; i++)
            n_weights += strncmp(fb.tensors[i].name, "@optimizer/", 11) != 0;
        ck_assert_int_eq(n_checked, n_weights);
    }
    fprintf(stderr, "llama_tiny LoRA fine-tune: %d base tensors byte-identical, %d adapter tensors trained\n",
            n_checked, n_lora);
    clremat_st_free(&fb);
    clremat_st_free(&fl);
    unlink(pb);
    unlink(pl);
    free(x);
    free(y);
    clremat_data_free(&d);
    clremat_graph_free(base);
    clremat_graph_free(lora);
    clremat_ctx_destroy(ctx);
}
END_TEST

/* llama_tiny learns the language task: after LEARN_STEPS steps the
 * validation loss is below half the unigram entropy of the training
 * labels (the loss of the best model that ignores the context). */
#define LEARN_STEPS 120
#define LEARN_BATCH 8
START_TEST(test_llama_tiny_learns)
{
    clremat_ctx *ctx;
    clremat_graph *g = test_load_model("llama_tiny.json");
    clremat_policy pol;
    clremat_opt_config opt;
    clremat_trainer *t;
    clremat_dataset d;
    double count[64] = {0}, n = 0, H = 0, val = 0;
    float *x, *y, loss, first = 0, correct;
    int64_t nv = 0;
    TEST_OPEN_CTX(ctx, 0);
    ck_assert_int_eq(clremat_data_synthetic(g, "language", 1, 2048, 64, &d), CLREMAT_OK);
    for (int64_t i = 0; i < d.train.n * d.train.y_elems; i++, n++)
        count[(int)d.train.y[i]]++;
    for (int v = 0; v < 64; v++)
        if (count[v] > 0)
            H -= count[v] / n * log(count[v] / n);
    x = malloc(sizeof(float) * (size_t)(LEARN_BATCH * d.train.x_elems));
    y = malloc(sizeof(float) * (size_t)(LEARN_BATCH * d.train.y_elems));
    ck_assert_int_eq(clremat_policy_parse("none", &pol), CLREMAT_OK);
    ck_assert_int_eq(clremat_opt_defaults("adam", &opt), 0);
    opt.lr = 3e-3f;
    ck_assert_int_eq(clremat_trainer_new(ctx, g, LEARN_BATCH, &pol, &opt, 1, &t), CLREMAT_OK);
    for (int s = 0; s < LEARN_STEPS; s++) {
        clremat_data_batch(&d.train, 1, s, LEARN_BATCH, x, y);
        ck_assert_int_eq(clremat_trainer_step(t, x, y, &loss, &correct), CLREMAT_OK);
        if (s == 0)
            first = loss;
    }
    for (int64_t b = 0; b + LEARN_BATCH <= d.val.n; b += LEARN_BATCH, nv++) {
        ck_assert_int_eq(clremat_trainer_eval(t, d.val.x + b * d.val.x_elems, d.val.y + b * d.val.y_elems, &loss,
                                              &correct), CLREMAT_OK);
        val += loss;
    }
    val /= (double)nv;
    fprintf(stderr, "llama_tiny on 'language': first loss %.3f, validation loss %.3f after %d steps; unigram "
            "entropy %.3f nats\n", (double)first, val, LEARN_STEPS, H);
    ck_assert_msg(H > 3.0, "unigram entropy %.3f: the language is too predictable for this test", H);
    ck_assert_msg(val < 0.5 * H, "validation loss %.3f not below half the unigram entropy %.3f", val, H);
    clremat_trainer_free(t);
    free(x);
    free(y);
    clremat_data_free(&d);
    clremat_graph_free(g);
    clremat_ctx_destroy(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("llm");
    TCase *tc;
    if (!test_have_device())
        return TEST_SKIP;
    tc = tcase_create("llm");
    tcase_set_timeout(tc, TIMEOUT);
    tcase_add_test(tc, test_trainable_false);
    tcase_add_test(tc, test_tied_embeddings);
    tcase_add_test(tc, test_lora);
    if (!test_reduced()) { /* llama_tiny: about 100 times too slow on slow implementations */
        tcase_add_test(tc, test_lora_finetune_llama_tiny);
        tcase_add_test(tc, test_llama_tiny_learns);
    }
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
