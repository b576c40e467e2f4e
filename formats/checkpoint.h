/* checkpoint.h - moec's checkpoint format, one reader and one writer.
 *
 * A checkpoint is a safetensors file (formats/safetensors.h) whose
 * metadata says "format": "moec-checkpoint-1", with the model's name, the
 * hash of its source (model_hash: a checkpoint is refused by a binary of
 * another model), the optimizer step, and whatever else the writer adds.
 * Its tensors are whole (an expert-parallel run gathers its shards):
 *   param.NAME    the parameter, f32
 *   adam_m.NAME   AdamW's first moment, f32    (training checkpoints)
 *   adam_v.NAME   AdamW's second moment, f32
 *   state.*       the training loop's own state (raw bytes)
 * The training binary (train/) writes and resumes them; `moec import-hf`
 * writes the param. tensors of a converted model, `moec export-hf` reads
 * them (formats/hf.c). */
#ifndef MOEC_CHECKPOINT_H
#define MOEC_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

#define CKPT_FORMAT "moec-checkpoint-1"

typedef enum CkptKind { CKPT_PARAM, CKPT_ADAM_M, CKPT_ADAM_V, CKPT_KIND_COUNT } CkptKind;
extern const char *const ckpt_prefix[CKPT_KIND_COUNT];   /* "param.", "adam_m.", "adam_v." */

typedef struct CkptWriter {
    SafeTensorsWriter st;
    char **names;        /* the tensor names it made, freed with it */
    int nnames, capnames;
} CkptWriter;

/* Starts a checkpoint of model `model` (its source hashes to model_hash) at
 * optimizer step `step`. */
void ckpt_writer_init(CkptWriter *w, const char *model, uint64_t model_hash, int64_t step);
/* Adds KIND.name, f32 of the given shape; data must live until the save. */
void ckpt_writer_add(CkptWriter *w, CkptKind kind, const char *name, int rank, const int64_t *shape,
                     const float *data);
void ckpt_writer_meta(CkptWriter *w, const char *key, const char *value);
/* Written to a temporary file and renamed (formats/safetensors.c). 1, or 0 with a message. */
int ckpt_writer_save(CkptWriter *w, const char *path, char *err, size_t errlen);
void ckpt_writer_free(CkptWriter *w);

typedef struct Ckpt {
    SafeTensors st;
    const char *model;      /* its metadata (NULL when absent) */
    const char *model_hash;
    int64_t step;           /* -1 when absent or not a number */
} Ckpt;

/* Reads path and checks it is a moec checkpoint. 1, or 0 with a message
 * "PATH: what is wrong" (as st_read's). */
int ckpt_open(Ckpt *c, const char *path, char *err, size_t errlen);
void ckpt_close(Ckpt *c);
/* KIND.name if it is f32 of exactly this shape: the tensor; else NULL with
 * why in err ("missing", "of another dtype or shape: ..."). */
const SafeTensor *ckpt_tensor(const Ckpt *c, CkptKind kind, const char *name, int rank, const int64_t *shape,
                              char *err, size_t errlen);
/* The model hash as it is written: 16 hex digits. */
void ckpt_hash_text(uint64_t hash, char out[17]);

#endif
