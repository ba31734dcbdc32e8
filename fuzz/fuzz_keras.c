/* fuzz_keras.c: fuzz target for Keras model configurations. The input is
 * the text of a `model.to_json()` file (the config.json of a .keras
 * archive has the same form); it is written to a scratch file, read and
 * mapped by clremat_keras_read without weights (and with the loss mse
 * where it has no compile config); when that succeeds, the
 * clremat model text it wrote must be JSON (names and values escaped), and
 * is loaded and (up to 64 layers) planned. Errors are fine; crashes, leaks,
 * undefined behaviour and text that is not JSON are not. */
#include "fuzz.h"
#include "keras.h"
#include <stdlib.h>
#include <string.h>

int fuzz_keras(const uint8_t *data, size_t size)
{
    clremat_keras_model m;
    int accepted;
    const char *path = fuzz_scratch_file("model.json", data, size);
    /* a config without a compile config (a to_json file of an uncompiled
     * model) gets the loss the command's --loss would give it, so that its
     * layers are mapped too */
    if (clremat_keras_read(path, NULL, NULL, &m) != 0 &&
        (!strstr(clremat_last_error(), "no compile config") || clremat_keras_read(path, NULL, "mse", &m) != 0))
        return 0;
    accepted = fuzz_load_generated(m.json, path, "fuzz_keras");
    clremat_keras_free(&m);
    return accepted;
}

#ifdef CLREMAT_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)fuzz_keras(data, size);
    return 0;
}
#endif
