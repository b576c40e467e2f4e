/* prep.c - `moec prep`: FASTA and FASTA.gz inputs streamed into a token
 * shard directory that training binaries map instead of reading FASTA
 * (data/shards.h, docs/data.md). A moec command rather than a flag of the
 * training binary: the shards depend only on the alphabet, not on a model,
 * so one prep serves every model of that alphabet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/shards.h"
#include "../util/util.h"
#include "cli.h"

int cli_prep(int argc, char **argv)
{
    const char *out = NULL, *alpha = NULL, *clusters = NULL, *verify = NULL;
    int64_t shard_mb = 0;
    int force = 0, quiet = 0;
    const char **in = calloc((size_t)argc, sizeof *in);
    int nin = 0;
    if (!in)
        die("out of memory");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_usage_for("prep"), stdout);
            free(in);
            return 0;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--alphabet") == 0 || strcmp(a, "--clusters") == 0 ||
                   strcmp(a, "--shard-mb") == 0 || strcmp(a, "--verify") == 0) {
            if (!v) {
                free(in);
                return cli_usage_error("prep ", "%s needs a value", a);
            }
            i++;
            if (a[1] == 'o')
                out = v;
            else if (strcmp(a, "--alphabet") == 0)
                alpha = v;
            else if (strcmp(a, "--clusters") == 0)
                clusters = v;
            else if (strcmp(a, "--verify") == 0)
                verify = v;
            else if (!parse_i64_in(v, 1, (int64_t)1 << 20, &shard_mb)) {
                free(in);
                return cli_usage_error("prep ", "--shard-mb takes an integer in [1, 1048576], not '%s'", v);
            }
        } else if (strcmp(a, "--force") == 0) {
            force = 1;
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            free(in);
            static const char *const known[] = {"-o", "--alphabet", "--clusters", "--shard-mb", "--verify", "--force",
                                                "--quiet", "--help", NULL};
            return cli_unknown_option("prep ", a, known);
        } else {
            in[nin++] = a;
        }
    }
    char err[4096];
    if (verify) {
        free(in);
        if (!shards_verify(verify, err, sizeof err)) {
            fprintf(stderr, "moec prep: error: %s\n", err);
            return 1;
        }
        printf("%s: every file matches its hash in the index\n", verify);
        return 0;
    }
    int rc = 2;
    if (!out)
        rc = cli_usage_error("prep ", "give the shard directory to write with -o DIR%s", "");
    else if (nin == 0)
        rc = cli_usage_error("prep ", "no inputs: give FASTA files, directories, globs or '-' (standard input)%s", "");
    else if (!alpha || alphabet_lookup(alpha) < 0)
        rc = cli_usage_error("prep ", "--alphabet protein|dna is needed (the model's alphabet)%s", "");
    if (rc == 2 && out && nin && alpha && alphabet_lookup(alpha) >= 0) {
        char **files;
        int nfiles;
        if (!data_inputs_expand(in, nin, &files, &nfiles, err, sizeof err)) {
            fprintf(stderr, "moec prep: error: %s\n", err);
            free(in);
            return 1;
        }
        for (int i = 0; i < nfiles; i++) {
            if (shards_is_dir(files[i])) {
                fprintf(stderr, "moec prep: error: %s is a shard directory already: give FASTA inputs\n", files[i]);
                data_inputs_free(files, nfiles);
                free(in);
                return 1;
            }
        }
        PrepOptions o = {.out = out, .alphabet = alphabet_get((AlphabetKind)alphabet_lookup(alpha)),
                         .shard_bytes = shard_mb * ((int64_t)1 << 20), .clusters = clusters, .force = force,
                         .quiet = quiet};
        rc = shards_prep(files, nfiles, &o, err, sizeof err) ? 0 : 1;
        if (rc)
            fprintf(stderr, "moec prep: error: %s\n", err);
        data_inputs_free(files, nfiles);
    }
    free(in);
    return rc;
}
