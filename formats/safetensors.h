/* safetensors.h - reading and writing checkpoints in the Hugging Face
 * safetensors format, so that trained weights can be exchanged with other
 * tools and a crashed run never leaves a half-written checkpoint behind.
 *
 * Layout: an 8-byte little-endian header size N, N bytes of UTF-8 JSON
 * (tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} plus an
 * optional "__metadata__" object of strings), then the raw little-endian
 * tensor data. The reader validates every field and every byte of the data
 * area; a file it accepts can be used without further checks.
 *
 * Success is 1, failure 0 (like checked_mul_i64); failures caused by the
 * file or the file system come back as a message in err that names the
 * file. Misuse of the writer (see st_writer_add) is a bug and dies. */
#ifndef MOEC_SAFETENSORS_H
#define MOEC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* The fixed-size dtypes of the format. Sub-byte types (F4, F6_*) are not
 * supported: their tensors are not a whole number of bytes per element. */
typedef enum StDType {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_DTYPE_COUNT
} StDType;

const char *st_dtype_name(StDType t);   /* "F32"; the spelling in the file */
size_t st_dtype_size(StDType t);        /* bytes per element */
int st_dtype_parse(const char *name, StDType *out);   /* case-sensitive */

/* Headers larger than this are refused as corrupt (the limit of the
 * reference implementation). */
#define ST_MAX_HEADER 100000000u

/* ---- writing */

typedef struct StWriterTensor StWriterTensor;
typedef struct StMeta {
    char *key;
    char *value;
} StMeta;

typedef struct SafeTensorsWriter {
    StWriterTensor *tensors;   /* in the order added, which is file order */
    int ntensors, cap;
    StMeta *meta;              /* in the order first set */
    int nmeta, metacap;
} SafeTensorsWriter;

void st_writer_init(SafeTensorsWriter *w);
void st_writer_free(SafeTensorsWriter *w);

/* Adds a tensor. The name and shape are copied; the data is only
 * referenced (a checkpoint can be as large as memory) and must stay valid
 * and unchanged until st_writer_save returns. rank 0 is a scalar (shape may
 * be NULL); data may be NULL when nbytes is 0. Preconditions, checked with
 * die(): nbytes == product(shape) * st_dtype_size(dtype), dims >= 0, name
 * valid UTF-8 and not "__metadata__", dtype in range. Duplicate names die
 * in st_writer_save. */
void st_writer_add(SafeTensorsWriter *w, const char *name, StDType dtype, int rank,
                   const int64_t *shape, const void *data, size_t nbytes);

/* Sets "__metadata__"[key] = value (both copied, valid UTF-8); setting a
 * key again replaces its value. */
void st_writer_set_metadata(SafeTensorsWriter *w, const char *key, const char *value);

/* Writes the file atomically: everything goes to "<path>.tmp.<pid>", which
 * is flushed and fsynced, renamed over path, and then the directory is
 * fsynced. On failure the temporary file is removed, an existing file at
 * path is left as it was, and err says why. The one exception is a failed
 * fsync of the directory after the rename: path then already holds the new
 * file, but it is reported as a failure because it may not survive a
 * crash. Two threads of one process must not save the same path at once. */
int st_writer_save(const SafeTensorsWriter *w, const char *path, char *err, size_t errlen);

/* ---- reading */

typedef struct SafeTensor {
    const char *name;
    StDType dtype;
    int rank;
    const int64_t *shape;   /* rank dims; NULL for a scalar */
    const void *data;       /* never NULL, even for an empty tensor */
    size_t nbytes;
    uint64_t offset;        /* begin in the data area */
} SafeTensor;

/* All fields are read-only. tensors[0 .. ntensors) is in file order (by
 * data offset); the data area is 64-byte aligned, so a tensor's data is
 * aligned as far as its offset is - use memcpy for typed access unless you
 * know the offsets. */
typedef struct SafeTensors {
    SafeTensor *tensors;
    int ntensors;
    StMeta *meta;           /* in header order */
    int nmeta;
    /* private */
    int *by_name;           /* indices into tensors, sorted by name */
    int64_t *dims;
    void *data_area;
} SafeTensors;

/* Reads and validates the whole file. On failure *out is left empty (and
 * st_free on it is harmless) and err names the file and the problem. */
int st_read(const char *path, SafeTensors *out, char *err, size_t errlen);
void st_free(SafeTensors *st);

const SafeTensor *st_find(const SafeTensors *st, const char *name);   /* NULL if absent */
const char *st_metadata(const SafeTensors *st, const char *key);      /* NULL if absent */

#endif
