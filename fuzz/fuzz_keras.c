/* fuzz_keras.c: fuzz target for Keras model configurations. The input is
 * the text of a `model.to_json()` file (the config.json of a .keras
 * archive has the same form); it is written to a scratch file, read and
 * mapped by clremat_keras_read without weights (and with the loss mse
 * where its compile config names none); when that succeeds, the
 * clremat model text it wrote must be JSON (names and values escaped), and
 * is loaded and (up to 64 layers) planned. Errors are fine; crashes, leaks,
 * undefined behaviour and text that is not JSON are not. */
#include "fuzz.h"
#include "keras.h"
#include <jansson.h>

int fuzz_keras(const uint8_t *data, size_t size)
{
    clremat_keras_model m;
    int accepted;
    const char *path = fuzz_scratch_file("model.json", data, size);
    /* a config whose compile config names no loss (a to_json file of an
     * uncompiled model) gets the loss the command's --loss would give it,
     * so that its layers are mapped too */
    json_t *doc = json_loadb((const char *)data, size, 0, NULL);
    const char *loss = doc && !json_object_get(json_object_get(doc, "compile_config"), "loss") ? "mse" : NULL;
    json_decref(doc);
    if (clremat_keras_read(path, NULL, loss, &m) != 0)
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
