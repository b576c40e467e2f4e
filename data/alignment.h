/* alignment.h - multiple sequence alignments and column conservation, for
 * comparing a model's variant scores with evolution (`TRAIN score
 * --conservation`). Independent of any model: the columns are read from the
 * alignment alone.
 *
 * Formats: CLUSTAL (`.aln`, the first line starts with "CLUSTAL", blocks of
 * `NAME ALIGNED-RESIDUES [COUNT]` lines, consensus lines starting with a blank
 * or one of `*:.`) and aligned FASTA (the first non-empty line starts with
 * '>'); either gzip-compressed or not. Gaps are '-' and '.'. */
#ifndef MOEC_DATA_ALIGNMENT_H
#define MOEC_DATA_ALIGNMENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct Alignment {
    int64_t nseq, ncol;
    char **names;   /* [nseq], in file order */
    char **rows;    /* [nseq], each ncol characters, upper case, NUL-terminated */
} Alignment;

/* 1, or 0 with "PATH:LINE: error: ..." in err (rows of unequal length, a
 * repeated name in one block, no sequences, an unknown format). */
int alignment_read(const char *path, Alignment *a, char *err, size_t errlen);
void alignment_free(Alignment *a);
/* The row named `name`, or -1. */
int64_t alignment_find(const Alignment *a, const char *name);
static inline int alignment_is_gap(char c) { return c == '-' || c == '.'; }

/* Per column (out[ncol]): 1 - H / ln 20, H the Shannon entropy (natural log)
 * of the residue letters in the column, gaps left out; NAN for a column
 * where fewer than `min_occupancy` (a fraction) of the sequences have a
 * residue. Equal compositions give bit-equal values (the counts are summed in
 * a fixed order), so rank ties are real ties. Returns the number of columns
 * with a value. */
int64_t alignment_conservation(const Alignment *a, double min_occupancy, double *out);

#endif
