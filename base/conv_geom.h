/* conv_geom.h: geometry of the convolutional layers (conv2d, max_pool2d,
 * avg_pool2d, global_avg_pool2d, zero_pad2d) over per-sample NHWC shapes
 * [H, W, C]: output sizes and padding with Keras's rules, the checks of
 * their settings and their shape/parameter inference. Pure C: the graph,
 * the cost model and the launchers share it. */
#ifndef CLREMAT_CONV_GEOM_H
#define CLREMAT_CONV_GEOM_H

#include "graph.h"

/** One spatial axis of a window op: output size and the padding before it
 * (Keras: "valid" no padding; "same" out = ceil(in / stride), total padding
 * max((out - 1) * stride + (k - 1) * dil + 1 - in, 0) with the odd one after). */
typedef struct clremat_conv_axis {
    int64_t in, out;
    int k, stride, dil;
    int64_t pad_before;
} clremat_conv_axis;

/** Geometry of a conv/pool layer from its settings and input shape. */
typedef struct clremat_conv_geom {
    clremat_conv_axis h, w;
    int64_t cin, cout;          /**< channels in and out */
    int64_t groups, cg, fg;     /**< groups, input channels and filters per group (conv2d) */
} clremat_conv_geom;

/** 1 when t is one of the convolutional layer types above. */
int clremat_is_conv_type(clremat_layer_type t);

/** Fills the geometry of a conv2d / max_pool2d / avg_pool2d layer from its
 * settings and in_shape[0]; 0 on success, else -1 with the reason in why
 * (the input shape and the setting that does not fit). */
int clremat_conv_geom_of(const clremat_layer *L, clremat_conv_geom *geo, char *why, size_t len);

/** Checks the settings of a convolutional layer that do not depend on
 * shapes; 0 when valid, else -1 with the reason in why. */
int clremat_conv_check_settings(const clremat_layer *L, char *why, size_t len);

/** Infers the output shape and parameters of a convolutional layer from
 * in_shape[0]; 0 on success, else -1 with the reason in why. */
int clremat_conv_infer(clremat_layer *L, char *why, size_t len);

#endif
