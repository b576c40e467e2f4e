/* fuzz_safetensors.c - libFuzzer target for the safetensors reader and the
 * moec checkpoint checks on top of it (formats/safetensors.c, checkpoint.c):
 * any file must be read or refused with a message, never crash or leak. */
#include <stdint.h>
#include <string.h>

#include "../../formats/checkpoint.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    char err[1024];
    Ckpt c;
    if (ckpt_open(&c, path, err, sizeof err)) {
        int64_t shape[2] = {4, 4};
        ckpt_tensor(&c, CKPT_PARAM, "embed", 2, shape, err, sizeof err);
        volatile float sink = 0;
        for (int i = 0; i < c.st.ntensors; i++) {
            const SafeTensor *t = &c.st.tensors[i];
            if (t->nbytes >= 4) {
                float f;
                memcpy(&f, t->data, 4);
                sink += f;
            }
            (void)st_find(&c.st, t->name);
        }
        (void)sink;
        ckpt_close(&c);
    } else {
        SafeTensors st;
        if (st_read(path, &st, err, sizeof err))
            st_free(&st);
    }
    return 0;
}
