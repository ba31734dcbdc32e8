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

/** Model file text: loader, shape inference, cost model and planner.
 * 1: it loaded and planned in every mode tried. */
int fuzz_model(const uint8_t *data, size_t size);

/** A safetensors file's bytes: the reader and its validation. 1: accepted. */
int fuzz_safetensors(const uint8_t *data, size_t size);

/** A command line, one argument per line: the clremat option parsers.
 * 1: the global options and a subcommand's options parsed and its remat
 * modes and optimizer validated (the run would go on to open the model). */
int fuzz_cli(const uint8_t *data, size_t size);

#endif
