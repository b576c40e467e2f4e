/* fuzz_fasta.c - libFuzzer target for the FASTA reader (data/data.c: plain
 * and gzip, both alphabets), then the split and the loader on what it read:
 * any file must be read or refused with a located message, never crash. */
#include <stdint.h>

#include "../../data/data.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    char err[1024];
    for (int k = 0; k < 2; k++) {
        const Alphabet *a = alphabet_get(k ? ALPHABET_DNA : ALPHABET_PROTEIN);
        FastaSet fs;
        fasta_set_init(&fs);
        if (fasta_read(path, a, &fs, err, sizeof err)) {
            DataLoader l;
            int32_t tok[2 * 16], tgt[2 * 16];
            if (data_loader_init(&l, &fs, a, DATA_SPLIT_TRAIN, 2, 16, 1, k ? OBJECTIVE_CAUSAL : OBJECTIVE_MASKED)) {
                data_loader_next(&l, tok, tgt);
                data_loader_free(&l);
            }
        }
        fasta_set_free(&fs);
    }
    return 0;
}
