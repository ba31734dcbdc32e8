/* conv_geom.c: output sizes, Keras padding, settings checks and shape and
 * parameter inference of the convolutional layers (see conv_geom.h). */
#include "conv_geom.h"
#include <stdio.h>
#include <string.h>

#define MAX_ELEMS ((int64_t)1 << 31)

int clremat_is_conv_type(clremat_layer_type t)
{
    return t == CLREMAT_CONV2D || t == CLREMAT_MAX_POOL2D || t == CLREMAT_AVG_POOL2D ||
           t == CLREMAT_GLOBAL_AVG_POOL2D || t == CLREMAT_ZERO_PAD2D;
}

/* One axis; 0 when the window fits, else -1. */
static int axis_of(clremat_conv_axis *a, int64_t in, int k, int s, int d, int same)
{
    int64_t span = (int64_t)(k - 1) * d + 1;
    memset(a, 0, sizeof *a);
    a->in = in;
    a->k = k;
    a->stride = s;
    a->dil = d;
    if (same) {
        int64_t total;
        a->out = (in + s - 1) / s;
        total = (a->out - 1) * s + span - in;
        if (total < 0)
            total = 0;
        a->pad_before = total / 2;
    } else {
        if (in < span)
            return -1;
        a->out = (in - span) / s + 1;
        a->pad_before = 0;
    }
    return a->out >= 1 ? 0 : -1;
}

/* The type's model-file name (local: graph.c calls this file, not the reverse). */
static const char *tname(const clremat_layer *L)
{
    switch (L->type) {
    case CLREMAT_CONV2D: return "conv2d";
    case CLREMAT_MAX_POOL2D: return "max_pool2d";
    case CLREMAT_AVG_POOL2D: return "avg_pool2d";
    case CLREMAT_GLOBAL_AVG_POOL2D: return "global_avg_pool2d";
    case CLREMAT_ZERO_PAD2D: return "zero_pad2d";
    default: return "convolutional";
    }
}

int clremat_conv_geom_of(const clremat_layer *L, clremat_conv_geom *geo, char *why, size_t len)
{
    const clremat_shape *in = &L->in_shape[0];
    const int is_conv = L->type == CLREMAT_CONV2D;
    memset(geo, 0, sizeof *geo);
    if (in->rank != 3) {
        snprintf(why, len, "input has rank %d but a %s layer needs [H, W, C] (channels last)", in->rank,
                 tname(L));
        return -1;
    }
    if (L->ksize[0] < 1 || L->ksize[1] < 1 || L->strides[0] < 1 || L->strides[1] < 1 ||
        (is_conv && (L->dilation[0] < 1 || L->dilation[1] < 1))) {
        snprintf(why, len, "window %dx%d, strides %dx%d, dilation %dx%d must all be positive", L->ksize[0],
                 L->ksize[1], L->strides[0], L->strides[1], L->dilation[0], L->dilation[1]);
        return -1;
    }
    if (axis_of(&geo->h, in->dims[0], L->ksize[0], L->strides[0], is_conv ? L->dilation[0] : 1, L->pad_same) ||
        axis_of(&geo->w, in->dims[1], L->ksize[1], L->strides[1], is_conv ? L->dilation[1] : 1, L->pad_same)) {
        snprintf(why, len, "input [%lld, %lld, %lld] is smaller than the %dx%d window (dilation %dx%d) with "
                 "padding \"valid\"", (long long)in->dims[0], (long long)in->dims[1], (long long)in->dims[2],
                 L->ksize[0], L->ksize[1], is_conv ? L->dilation[0] : 1, is_conv ? L->dilation[1] : 1);
        return -1;
    }
    geo->cin = in->dims[2];
    geo->cout = geo->cin;
    geo->groups = 1;
    geo->cg = geo->cin;
    geo->fg = geo->cin;
    if (is_conv) {
        int64_t filters = L->depth_multiplier > 0 ? geo->cin * L->depth_multiplier : L->filters;
        int64_t groups = L->depth_multiplier > 0 ? geo->cin : (L->groups > 0 ? L->groups : 1);
        if (geo->cin % groups != 0 || filters % groups != 0 || filters < 1) {
            snprintf(why, len, "input has %lld channels and %lld filters; both must be divisible by groups = %lld",
                     (long long)geo->cin, (long long)filters, (long long)groups);
            return -1;
        }
        geo->cout = filters;
        geo->groups = groups;
        geo->cg = geo->cin / groups;
        geo->fg = filters / groups;
    }
    return 0;
}

int clremat_conv_check_settings(const clremat_layer *L, char *why, size_t len)
{
    switch (L->type) {
    case CLREMAT_CONV2D:
        if (L->depth_multiplier < 0 || (L->depth_multiplier == 0 && (L->filters < 1 || L->filters >= MAX_ELEMS))) {
            snprintf(why, len, "filters must be positive (or depth_multiplier given), got filters %lld, "
                     "depth_multiplier %d", (long long)L->filters, L->depth_multiplier);
            return -1;
        }
        if (L->groups < 1 || (L->depth_multiplier > 0 && (L->groups != 1 || L->filters != 0))) {
            snprintf(why, len, "groups must be >= 1, and depth_multiplier replaces both filters and groups "
                     "(got filters %lld, groups %d, depth_multiplier %d)", (long long)L->filters, L->groups,
                     L->depth_multiplier);
            return -1;
        }
        if (L->dilation[0] < 1 || L->dilation[1] < 1 ||
            ((L->dilation[0] > 1 || L->dilation[1] > 1) && (L->strides[0] > 1 || L->strides[1] > 1))) {
            snprintf(why, len, "dilation_rate [%d, %d] must be >= 1, and above 1 only with strides 1 (as in "
                     "Keras)", L->dilation[0], L->dilation[1]);
            return -1;
        }
        /* fall through */
    case CLREMAT_MAX_POOL2D:
    case CLREMAT_AVG_POOL2D:
        if (L->ksize[0] < 1 || L->ksize[1] < 1 || L->ksize[0] > 1024 || L->ksize[1] > 1024 || L->strides[0] < 1 ||
            L->strides[1] < 1 || L->strides[0] > 1024 || L->strides[1] > 1024) {
            snprintf(why, len, "window [%d, %d] and strides [%d, %d] must be 1 .. 1024", L->ksize[0], L->ksize[1],
                     L->strides[0], L->strides[1]);
            return -1;
        }
        break;
    case CLREMAT_ZERO_PAD2D:
        for (int i = 0; i < 4; i++)
            if (L->zpad[i] < 0 || L->zpad[i] > 65536) {
                snprintf(why, len, "padding [%d, %d, %d, %d] must be 0 .. 65536", L->zpad[0], L->zpad[1],
                         L->zpad[2], L->zpad[3]);
                return -1;
            }
        break;
    default:
        break;
    }
    return 0;
}

static void set_param(clremat_layer *L, const char *name, int rank, const int64_t *dims, int init)
{
    clremat_param *p = &L->params[L->n_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->shape.rank = rank;
    p->elems = 1;
    for (int i = 0; i < rank; i++) {
        p->shape.dims[i] = dims[i];
        p->elems *= dims[i];
    }
    p->init = init;
}

int clremat_conv_infer(clremat_layer *L, char *why, size_t len)
{
    const clremat_shape *in = &L->in_shape[0];
    clremat_conv_geom geo;
    L->n_params = 0;
    if (in->rank != 3) {
        snprintf(why, len, "input has rank %d but a %s layer needs [H, W, C] (channels last)", in->rank,
                 tname(L));
        return -1;
    }
    L->out_shape = *in;
    switch (L->type) {
    case CLREMAT_GLOBAL_AVG_POOL2D:
        L->out_shape.rank = 1;
        L->out_shape.dims[0] = in->dims[2];
        L->out_shape.dims[1] = L->out_shape.dims[2] = 0;
        return 0;
    case CLREMAT_ZERO_PAD2D:
        L->out_shape.dims[0] = in->dims[0] + L->zpad[0] + L->zpad[1];
        L->out_shape.dims[1] = in->dims[1] + L->zpad[2] + L->zpad[3];
        return 0;
    default:
        break;
    }
    if (clremat_conv_geom_of(L, &geo, why, len))
        return -1;
    L->out_shape.dims[0] = geo.h.out;
    L->out_shape.dims[1] = geo.w.out;
    L->out_shape.dims[2] = geo.cout;
    if (L->type == CLREMAT_CONV2D) {
        int64_t kd[4] = {L->ksize[0], L->ksize[1], geo.cg, geo.cout};
        if ((int64_t)L->ksize[0] * L->ksize[1] * geo.cg * geo.cout >= MAX_ELEMS ||
            geo.h.out * geo.w.out * (int64_t)L->ksize[0] * L->ksize[1] * geo.cin >= MAX_ELEMS) {
            snprintf(why, len, "kernel or im2col matrix of [%lld, %lld, %lld] is too large", (long long)in->dims[0],
                     (long long)in->dims[1], (long long)in->dims[2]);
            return -1;
        }
        set_param(L, "kernel", 4, kd, L->act == CLREMAT_ACT_RELU ? CLREMAT_INIT_HE_NORMAL : CLREMAT_INIT_GLOROT_UNIFORM);
        if (L->use_bias)
            set_param(L, "bias", 1, &kd[3], CLREMAT_INIT_ZEROS);
    }
    return 0;
}
