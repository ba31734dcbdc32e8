/* fuzz.h: the fuzz targets. Each takes one input of any bytes and must not
 * crash, leak or hit undefined behaviour whatever it is. The same functions
 * are driven by libFuzzer (make fuzz: fuzz/fuzz_*.c with CLREMAT_LIBFUZZER)
 * and by the corpus replay in make check (tests/test_fuzz_replay.c). */
#ifndef CLREMAT_FUZZ_H
#define CLREMAT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/** Model file text: loader, shape inference, cost model and planner. */
int fuzz_model(const uint8_t *data, size_t size);

/** A safetensors file's bytes: the reader and its validation. */
int fuzz_safetensors(const uint8_t *data, size_t size);

/** A command line, one argument per line: the clremat option parsers. */
int fuzz_cli(const uint8_t *data, size_t size);

#endif
