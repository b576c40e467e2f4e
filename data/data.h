/* data.h - training data: alphabets (tokenizers), a FASTA reader, the
 * train/validation split, and a loader that packs sequences into fixed rows.
 *
 * The pipeline is FASTA file(s) -> FastaSet (every sequence tokenized, in one
 * buffer, or memory maps of a shard directory: shards.h) -> split by a fixed
 * hash of each sequence's index -> per split, an
 * endless token stream BOS + sequence + EOS, shuffled per epoch -> rows of
 * `seq` tokens with causal or masked targets. Everything random is derived
 * from the seed with our own PRNG, so a run is reproducible on any libc and
 * the loader's position can be saved in a checkpoint and restored exactly. */
#ifndef MOEC_RUNTIME_DATA_H
#define MOEC_RUNTIME_DATA_H

#include <stddef.h>
#include <stdint.h>

/* ---- alphabets ---------------------------------------------------------- */

typedef enum { ALPHABET_PROTEIN, ALPHABET_DNA } AlphabetKind;

/* A token vocabulary and the mapping of FASTA characters onto it.
 *   protein: ESM-2's 33 tokens: <cls> <pad> <eos> <unk>, the 25 residue
 *            letters L A G V S E R T I D P K Q N F Y M H W C X B U Z O (ids
 *            4..28), . - <null_1> <mask>.
 *   dna:     <pad> <bos> <eos> <mask> A C G T N.
 * `unk` is the id that characters outside the alphabet become, and they are
 * counted: X for protein (ESM-2's <unk>, id 3, is in the vocabulary for
 * compatibility but the reader never produces it), N for DNA. */
typedef struct Alphabet {
    AlphabetKind kind;
    const char *name;            /* "protein", "dna" */
    int vocab;                   /* 33, 9 */
    int pad, bos, eos, mask, unk; /* bos is <cls> for protein */
    int random_first, random_count; /* ids a masked position may be replaced
                                     * by: the 20 standard amino acids, ACGT */
    const char *const *tokens;   /* [vocab] token names, by id */
    uint8_t map[256];            /* character -> id; 0 (a special token no
                                  * character maps to) when not in the alphabet */
} Alphabet;

const Alphabet *alphabet_get(AlphabetKind kind);
int alphabet_lookup(const char *name);            /* "protein"/"dna" -> kind, else -1 */
/* The id of one sequence character (either case; DNA U/u reads as T), or -1
 * when it is not in the alphabet (the reader then uses a->unk and counts it). */
int alphabet_encode(const Alphabet *a, int c);
int alphabet_token_id(const Alphabet *a, const char *token);  /* by name, or -1 */

/* ---- FASTA -------------------------------------------------------------- */

/* Token counts and statistics of the two splits, for the summary line and
 * the unigram entropy without a pass over the tokens: `moec prep` stores it
 * in the shard index (DATA_VAL_FRACTION); for a set read into memory it is
 * computed when asked (data_summary). */
typedef struct DataSummary {
    int64_t nseq[2], nresidues[2], nunknown[2];
    int64_t counts[2][64];       /* per split, residues per token id */
    int64_t flip;                /* the sequence moved to the other split so both
                                  * are non-empty, or -1 (data_split_flip) */
} DataSummary;

/* Every sequence read so far, tokenized without special tokens: sequence i is
 * tokens[offsets[i] .. offsets[i+1]). A set opened from a shard directory
 * (data/shards.h) is the same struct over read-only memory maps. */
typedef struct FastaSet {
    const Alphabet *alphabet;    /* fixed by the first fasta_read */
    uint8_t *tokens;
    int64_t ntokens, tokens_cap;
    int64_t *offsets;            /* [nseq + 1] */
    int64_t *unknown;            /* [nseq] unknown characters in each sequence (NULL for shards) */
    int64_t nseq, seq_cap;
    int64_t nunknown;            /* characters mapped to a->unk, all sequences */
    int64_t nempty;              /* records with no sequence, skipped */
    int64_t nstops;              /* trailing '*' dropped from protein records */
    int nfiles;
    /* with keep_names: each stored sequence's id (its header's first word,
     * at most FASTA_NAME_MAX bytes) followed by '\n', in order */
    int keep_names;
    char *names;
    int64_t names_len, names_cap;
    /* shard sets (data/shards.c): the index's checksum (0 for FASTA read
     * into memory), its summary, and the maps to release */
    uint64_t checksum;
    int has_summary;
    DataSummary summary;
    void *shards;
    /* clusters (shard sets prepped with --clusters): cluster_of[nseq]; the
     * members of cluster c are cluster_members[cluster_off[c] ..
     * cluster_off[c+1]). With clusters the split and the sampler work on
     * clusters: a cluster's members are all on one side, and an epoch draws
     * one member of each cluster (ESM-2's UniRef50/90 scheme). */
    const int64_t *cluster_of, *cluster_off, *cluster_members;
    int64_t nclusters;
} FastaSet;

#define FASTA_NAME_MAX 1000

void fasta_set_init(FastaSet *fs);
void fasta_set_free(FastaSet *fs);
static inline int64_t fasta_seq_len(const FastaSet *fs, int64_t i)
{
    return fs->offsets[i + 1] - fs->offsets[i];
}

/* Appends the records of one FASTA file, plain or gzip-compressed (zlib
 * detects which). Returns 1, or 0 with a message "path:LINE: error: ..." in
 * err (no line when the file cannot be opened) and fs exactly as it was
 * before the call. Empty records are skipped and counted in fs->nempty; a
 * file without any sequence is an error. Lines may be of any length. */
int fasta_read(const char *path, const Alphabet *a, FastaSet *fs, char *err, size_t errlen);

/* Streaming: like fasta_read, but whenever complete sequences hold more than
 * about `flush_bytes` tokens (and at the end of the file) calls
 * sink(ctx, fs), which consumes sequences [0, fs->nseq) (tokens, offsets,
 * unknown, names); the set is then emptied but for the record still being
 * read, so memory stays bounded whatever the file's size. sink returns 0 to
 * stop (its message in err). path "-" is standard input. On error fs is left
 * in an unspecified state: a streaming caller stops. */
typedef int (*FastaSink)(void *ctx, FastaSet *fs, char *err, size_t errlen);
int fasta_read_stream(const char *path, const Alphabet *a, FastaSet *fs, int64_t flush_bytes, FastaSink sink,
                      void *ctx, char *err, size_t errlen);

/* ---- split -------------------------------------------------------------- */

#define DATA_VAL_FRACTION 0.01
#define DATA_IGNORE_INDEX (-100)     /* a target that takes no part in the loss */

enum { DATA_SPLIT_TRAIN = 0, DATA_SPLIT_VAL = 1 };

/* Which split sequence i of n belongs to. The split does not depend on the
 * seed (seed sweeps compare the same validation set): sequence i goes to
 * validation when a fixed hash of i falls below val_fraction; a fraction of 0
 * puts everything in training, 1 everything in validation (--eval,
 * --val-data). With two or more sequences each split gets at least one:
 * `flip` (data_split_flip) is the sequence moved to the other side, or -1. */
int data_split_of(int64_t i, int64_t n, double val_fraction, int64_t flip);
/* The hash of sequence i in [0, 1) that data_split_of compares with the fraction. */
double data_split_u(int64_t i);
int64_t data_split_flip(int64_t n, double val_fraction);

/* A malloc'd array of fs->nseq bytes: data_split_of for each sequence (of
 * its cluster, when the set has clusters). */
uint8_t *data_split_assign(const FastaSet *fs, double val_fraction);

typedef struct DataSplitStats {
    int64_t nseq, nresidues, nunknown;
} DataSplitStats;

/* The summary of fs at val_fraction: the stored one (shard sets; fractions
 * 0, 1 and DATA_VAL_FRACTION) or counted now. */
void data_summary(const FastaSet *fs, double val_fraction, DataSummary *out);
void data_split_stats(const FastaSet *fs, double val_fraction, DataSplitStats stats[2]);

/* ---- loader ------------------------------------------------------------- */

typedef enum { OBJECTIVE_CAUSAL, OBJECTIVE_MASKED } Objective;

typedef struct DataOptions {
    double val_fraction;         /* DATA_VAL_FRACTION */
    int64_t max_len;             /* residues kept of a longer sequence (a random
                                  * window); <= 0 means seq - 2, so a cropped
                                  * sequence with BOS and EOS fills one row */
    double mask_prob;            /* MASKED: share of residue positions chosen, 0.15 */
    int one_per_row;             /* packing rows: each row holds one sequence (BOS, a window of at
                                  * most seq - 2 residues, EOS), then padding; else sequences are
                                  * packed back to back across rows */
} DataOptions;

#define DATA_OPTIONS_DEFAULT ((DataOptions){DATA_VAL_FRACTION, 0, 0.15, 0})

/* Everything that moves while batches are drawn. A plain struct of fixed-size
 * fields: write it into a checkpoint as is; data_loader_state_set puts a
 * loader built with the same data and settings back at exactly that point. */
typedef struct DataLoaderState {
    uint64_t rng[4];             /* xoshiro256** state for masking */
    int64_t epoch;               /* epochs begun (train; validation stays at 0) */
    int64_t pos;                 /* position in the epoch's order (of all units, both splits) */
    int64_t off;                 /* tokens of that sequence already emitted */
    int64_t carry;               /* CAUSAL: the previous row's last token, -1 none */
    int64_t rows;                /* rows produced since init or reset */
    uint64_t fingerprint;        /* the data and settings this state belongs to */
} DataLoaderState;

typedef struct DataLoader {
    const FastaSet *fs;
    const Alphabet *a;
    int split;                   /* DATA_SPLIT_TRAIN or DATA_SPLIT_VAL */
    Objective obj;
    int64_t batch, seq;
    uint64_t seed;
    DataOptions opt;
    int64_t nseqs;               /* sequences of this split */
    int64_t nunits;              /* what an epoch orders: sequences, or clusters */
    int64_t flip;                /* data_split_flip of the set */
    /* the epoch's order is a keyed bijection of [0, fs->nseq) (a Feistel
     * network with cycle walking), not an array: the loader's memory does
     * not grow with the data. Sequences of the other split are skipped. */
    int64_t perm_half;           /* bits of each Feistel half */
    int64_t cur_pos, cur_unit, cur_id; /* cache: the unit at position cur_pos and its sequence */
    int64_t cur_epoch;
    int32_t *row;                /* scratch: one row plus the causal extra token */
    int one_record;              /* stream_read stops at the end of a sequence (one_per_row) */
    DataLoaderState st;
} DataLoader;

/* Builds a loader over one split; batch rows of seq tokens per call. Returns 1,
 * or 0 (nothing to free) when the split has no sequences. fs must outlive
 * the loader and not be appended to meanwhile. Train and validation loaders
 * built with the same seed and options partition the set. The training
 * loader runs forever, reshuffling each epoch; the validation loader makes
 * one fixed pass (same order, crops and masks every time) and then yields
 * padding with DATA_IGNORE_INDEX targets until data_loader_reset. */
int data_loader_init(DataLoader *l, const FastaSet *fs, const Alphabet *a, int split, int64_t batch, int64_t seq,
                     uint64_t seed, Objective obj);
int data_loader_init_opts(DataLoader *l, const FastaSet *fs, const Alphabet *a, int split, int64_t batch,
                          int64_t seq, uint64_t seed, Objective obj, const DataOptions *opt);
void data_loader_free(DataLoader *l);

/* Fills tokens[batch*seq] and targets[batch*seq]. CAUSAL: a row is seq+1
 * consecutive stream tokens w, tokens = w[0..seq-1], targets = w[1..seq];
 * the next row starts at w[seq], so every stream token is a target once.
 * MASKED: a row is seq stream tokens; mask_prob of the residue positions get
 * their token as target and, as input, <mask> (80%), a random residue (10%)
 * or themselves (10%); all other targets are DATA_IGNORE_INDEX. Each batch has
 * at least one masked position when it has any residue. */
void data_loader_next(DataLoader *l, int32_t *tokens, int32_t *targets);

/* Rows in one pass over the split's stream (for validation, the last one
 * partly padding). A pass over the whole set: for tests and small data. */
int64_t data_loader_rows(const DataLoader *l);
/* A validation loader has emitted its pass's last token. */
int data_loader_done(const DataLoader *l);
/* Back to the start: first epoch, initial masking RNG. */
void data_loader_reset(DataLoader *l);

void data_loader_state_get(const DataLoader *l, DataLoaderState *st);
/* Returns 1, or 0 (loader unchanged) when st was taken from a loader over
 * other data or with other settings (seed, split, objective, seq, options). */
int data_loader_state_set(DataLoader *l, const DataLoaderState *st);

/* ---- statistics --------------------------------------------------------- */

/* Entropy in nats of the tokens that are targets in one split, the loss a
 * model that ignores context would reach. CAUSAL: residues, EOS and BOS (the
 * target after an EOS is the next sequence's BOS); MASKED: residues. Counted
 * over whole sequences, before cropping. 0 for an empty split. */
double data_unigram_entropy(const FastaSet *fs, double val_fraction, int split, Objective obj);

#endif
