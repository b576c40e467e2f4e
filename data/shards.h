/* shards.h - token shard directories: what `moec prep` writes from FASTA
 * and what the training binary maps into memory instead of reading FASTA.
 *
 * A shard directory DIR holds
 *   index.json          the index: format, alphabet, counts, the files with
 *                       their sizes and hashes, the split's statistics, the
 *                       inputs, and a checksum of the index itself
 *   tokens-NNNNN.bin    the token ids of every sequence, concatenated, one
 *                       byte each, cut into files of exactly shard_bytes (a
 *                       multiple of 64 KiB; the last file shorter): mapped
 *                       side by side they are one array
 *   offsets.bin         int64 little-endian [sequences + 1]: sequence i is
 *                       tokens [offsets[i], offsets[i+1])
 *   ids.txt             each sequence's id (its header's first word), one a line
 *   clusters.bin        (with --clusters) int64 [sequences]: each sequence's
 *                       cluster, numbered from 0 in order of first appearance
 * Nothing is read into memory when training: the files are mapped read-only,
 * so every rank on a host shares the page cache, and pages already used are
 * dropped from the process's resident set as the loader moves on. See
 * docs/data.md. */
#ifndef MOEC_DATA_SHARDS_H
#define MOEC_DATA_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

#define SHARDS_FORMAT "moec-shards-1"
#define SHARDS_INDEX "index.json"
#define SHARDS_ALIGN (64 * 1024)                 /* shard_bytes is a multiple of this */
#define SHARDS_DEFAULT_BYTES ((int64_t)1 << 30)  /* 1 GiB */

/* ---- inputs ------------------------------------------------------------- */

/* Expands data arguments into a malloc'd list (data_inputs_free): "-"
 * (standard input), a file, a directory (a shard directory stays as it is;
 * otherwise its FASTA files, sorted by name: *.fa, *.fasta, *.faa, *.fna,
 * *.ffn, *.fas, *.seq, each also .gz; other files are skipped), or a glob
 * pattern (when no file has that name). 0 with a message when an argument
 * names nothing. */
int data_inputs_expand(const char *const *args, int n, char ***out, int *nout, char *err, size_t errlen);
void data_inputs_free(char **v, int n);

/* Whether path is a directory with an index.json. */
int shards_is_dir(const char *path);

/* Opens the training data the arguments name as one set: one shard
 * directory (mapped), or FASTA files read into memory. A mix of the two, or
 * two shard directories, is refused. Returns 1, or 0 with a message. */
int data_open(const char *const *args, int n, const Alphabet *a, FastaSet *fs, char *err, size_t errlen);

/* ---- reading ------------------------------------------------------------ */

/* Maps DIR into fs (which fasta_set_free releases). Checks the index's
 * checksum and format, the alphabet (want, unless NULL), and every file's
 * size against the index, so a truncated or missing shard, an edited index
 * or a shard set of the other alphabet is refused with a message; the
 * contents are not read (shards_verify does that). */
int shards_open(const char *dir, const Alphabet *want, FastaSet *fs, char *err, size_t errlen);
void shards_unmap(FastaSet *fs);
/* Reads every file and compares its hash with the index's: 1, or 0 with a message. */
int shards_verify(const char *dir, char *err, size_t errlen);

/* The loader found sequence id's index entry or tokens impossible: the
 * files changed under a running job. Prints a message and exits 1. */
_Noreturn void shards_damaged(const FastaSet *fs, int64_t id);
/* The loader did `units` more units of work (a sequence read, or 4 KiB of
 * one): every few hundred the maps' pages leave this process's resident set
 * (they stay in the page cache, shared by the ranks). Thread-safe. */
void shards_release(const FastaSet *fs, int64_t units);

/* The cluster of each sequence (NULL without clusters) and their count. */
const int64_t *shards_clusters(const FastaSet *fs, int64_t *nclusters);

/* ---- writing ------------------------------------------------------------ */

typedef struct PrepOptions {
    const char *out;             /* the shard directory to create */
    const Alphabet *alphabet;
    int64_t shard_bytes;         /* <= 0: SHARDS_DEFAULT_BYTES */
    const char *clusters;        /* a two-column cluster TSV (representative, member), or NULL */
    int force;                   /* replace an existing out */
    int quiet;
} PrepOptions;

/* Streams the inputs (paths as data_inputs_expand returns them) into
 * o->out. Memory stays bounded whatever the input's size (with clusters:
 * a table of the TSV's ids). Everything is written into o->out + ".partial"
 * and renamed to o->out at the end, so an interrupted prep leaves no shard
 * set behind and a new prep starts over. Prints one summary line (unless
 * quiet). Returns 1, or 0 with a message. */
int shards_prep(char *const *inputs, int n, const PrepOptions *o, char *err, size_t errlen);

#endif
