/* fuzz_hf_config.c - libFuzzer target for `moec import-hf`'s config.json
 * reader (formats/hf.c: JSON, duplicate keys, every field's checks) and, for
 * small configs it accepts, the model text it makes, lowered: a config must
 * be imported or refused with a message, never crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../formats/hf_internal.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    HfConfig c = {0};
    int64_t seq = 0;
    if (!hf_read_config(path, &seq, &c))
        return 0;
    /* lowering is linear in the layers and experts: small configs only, to keep each input fast */
    if (c.layers > 4 || c.experts > 16 || c.hidden > 4096 || c.vocab > 1 << 16)
        return 0;
    TrainOpts t = {seq ? seq : 16, 2, 10, 3e-4, "bf16", 0};
    char *text = hf_model_text(&c, "fuzz", &t);
    Compilation comp = {0};
    hf_lower_text(&comp, "fuzz.moe", text, strlen(text));
    compilation_free(&comp);
    free(text);
    return 0;
}
