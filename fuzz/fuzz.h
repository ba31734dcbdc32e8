/* fuzz.h: the fuzz targets. Each takes one input of any bytes and must not
 * crash, leak or hit undefined behaviour whatever it is. The same functions
 * are driven by libFuzzer (make fuzz: fuzz/fuzz_*.c with CLREMAT_LIBFUZZER,
 * whose entry point ignores the result) and by the corpus replay in make
 * check (tests/test_fuzz_replay.c, which checks it). Each returns 1 when the
 * input was accepted and 0 when it was refused, so the replay can hold
 * known inputs to their outcome. */
#ifndef CLREMAT_FUZZ_H
#define CLREMAT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include "graph.h"

/** Model file text: loader, shape inference, cost model and planner.
 * 1: it loaded and planned in every mode tried. */
int fuzz_model(const uint8_t *data, size_t size);

/** A safetensors file's bytes: the reader and its validation. 1: accepted. */
int fuzz_safetensors(const uint8_t *data, size_t size);

/** A command line, one argument per line: the clremat option parsers.
 * 1: the global options and a subcommand's options parsed and its remat
 * modes and optimizer validated (the run would go on to open the model). */
int fuzz_cli(const uint8_t *data, size_t size);

/** A Keras `model.to_json()` text (a .keras archive's config.json): the
 * Keras importer without weights, then the loader and planner on what it
 * mapped. 1: mapped, loaded and planned in every mode tried. */
int fuzz_keras(const uint8_t *data, size_t size);

/** A Hugging Face config.json: the Llama import, then the loader and
 * planner on the model it wrote. 1: imported, loaded and planned. */
int fuzz_hf(const uint8_t *data, size_t size);

/* ---- shared by the targets (fuzz_util.c) ---- */

/** Plans g at batch 2 in the remat modes none, full, activations and
 * larger_than:64; aborts on a planner invariant (CLREMAT_ERR_INTERNAL).
 * 1: every mode planned; 0: one was refused, or g has over 64 layers
 * (skipped: slow under the sanitizers, and nothing new). */
int fuzz_plan_graph(clremat_graph *g);

/** A model text written by an importer (from source): aborts (naming
 * target) when it is not JSON, else loads it with
 * clremat_graph_load_generated and plans it with fuzz_plan_graph.
 * 1: loaded and planned. */
int fuzz_load_generated(const char *text, const char *source, const char *target);

/** Writes data to NAME in this process's scratch folder (made once under
 * $TMPDIR or /tmp, removed at exit), replacing the previous scratch file,
 * and returns its path; aborts when it cannot be written. For the code
 * under test that reads a path. */
const char *fuzz_scratch_file(const char *name, const uint8_t *data, size_t size);

#endif
