/* fuzz_safetensors.c: fuzz target for safetensors files. The input is a
 * file's bytes, read from memory by clremat_st_read_mem (the same validation
 * as clremat_st_read). When it is accepted, every tensor's data must lie
 * inside the blob and its byte count must match dtype x shape: the harness
 * reads each tensor's bytes to let AddressSanitizer check it. */
#include "fuzz.h"
#include "safetensors.h"
#include <stdlib.h>
#include <string.h>

static volatile unsigned sink; /* keeps the reads of tensor bytes */

int fuzz_safetensors(const uint8_t *data, size_t size)
{
    clremat_st_file f;
    if (clremat_st_read_mem(data, size, "fuzz.safetensors", &f) != 0)
        return 0;
    for (size_t i = 0; i < f.n; i++) {
        const clremat_st_tensor *t = &f.tensors[i];
        const unsigned char *p = t->data, *lo = f.blob, *hi = lo + f.blob_len;
        size_t bytes = (size_t)t->elems * clremat_st_dtype_size(t->dtype);
        if (t->elems < 0 || (bytes && (p < lo || p + bytes > hi)) || clremat_st_find(&f, t->name) == NULL)
            abort(); /* accepted a tensor that lies outside the file */
        for (size_t b = 0; b < bytes; b++)
            sink += p[b];
    }
    clremat_st_free(&f);
    return 1;
}

#ifdef CLREMAT_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)fuzz_safetensors(data, size);
    return 0;
}
#endif
