/* cluster_env.h - the training binary under a cluster's own launcher:
 * torchrun's and Slurm's variables become moec's (docs/parallelism.md). */
#ifndef MOEC_CLUSTER_ENV_H
#define MOEC_CLUSTER_ENV_H

#include <stddef.h>

/* Sets MOEC_RANK, MOEC_WORLD_SIZE, MOEC_LOCAL_RANK, MOEC_LOCAL_WORLD_SIZE,
 * MOEC_MASTER_ADDR and MOEC_MASTER_PORT from torchrun's RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or else Slurm's
 * SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (or
 * SLURM_TASKS_PER_NODE), the first host of SLURM_JOB_NODELIST and a port
 * from SLURM_JOB_ID, each only when the MOEC_ variable is unset (the MOEC_
 * variables win). Applies only to a run of more than one rank (a world
 * size above 1), so a one-task job step can still use --nproc. Writes what
 * it did into `said` (empty when nothing). Returns 1, or 0 with a message
 * when a variable is malformed. */
int cluster_env_apply(char *said, size_t saidlen, char *err, size_t errlen);

/* The first host of a Slurm node list ("gpu[03-05,9],cpu1" -> "gpu03") into out. 1, or 0 if malformed. */
int cluster_first_host(const char *list, char *out, size_t outlen);

#endif
