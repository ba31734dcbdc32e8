/* fuzz_hf.c: fuzz target for Hugging Face config.json files. The input is
 * the file's text; it is written to a scratch file and turned into a
 * clremat model by clremat_hf_model_json (sequences of 8 tokens); when that
 * succeeds, the model text must be JSON and is loaded and (up to 64
 * layers) planned. Errors are fine; crashes, leaks, undefined behaviour
 * and text that is not JSON are not. */
#include "fuzz.h"
#include "hf_llama.h"
#include <stdlib.h>

int fuzz_hf(const uint8_t *data, size_t size)
{
    char *text = NULL;
    int accepted;
    const char *path = fuzz_scratch_file("config.json", data, size);
    if (clremat_hf_model_json(path, 8, &text) != 0)
        return 0;
    accepted = fuzz_load_generated(text, path, "fuzz_hf");
    free(text);
    return accepted;
}

#ifdef CLREMAT_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)fuzz_hf(data, size);
    return 0;
}
#endif
