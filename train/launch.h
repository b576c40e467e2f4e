/* launch.h - starting and joining the ranks of a multi-process run.
 *
 * `moec train --nproc N ...` calls launch_local(), which re-executes moec N
 * times as ranks 0..N-1 on this machine (like torchrun); each rank, and a
 * rank started by hand or by a cluster scheduler on another host, finds its
 * place with launch_env() and then joins with comm_tcp_create() or
 * comm_nccl_create(). */
#ifndef MOEC_LAUNCH_H
#define MOEC_LAUNCH_H

#include <stddef.h>

/* Runs /proc/self/exe nproc times with argv minus `--nproc N` / `--nproc=N`
 * and MOEC_RANK, MOEC_WORLD_SIZE, MOEC_LOCAL_RANK, MOEC_LOCAL_WORLD_SIZE,
 * MOEC_MASTER_ADDR=127.0.0.1 and MOEC_MASTER_PORT (a free port) set, and
 * waits for them. When one exits non-zero or by a signal, the others get
 * SIGTERM, then SIGKILL after MOEC_LAUNCH_GRACE seconds (default 5), and err
 * names the rank, its pid and how it died. Returns 0 when every rank exited
 * 0; else the first failure's exit status, or 128 + its signal (and 1 when
 * the ranks could not be started, with err saying why). Children die with
 * the launcher (PR_SET_PDEATHSIG). Call it before starting any thread. */
int launch_local(int nproc, int argc, char **argv, char *err, size_t errlen);

/* Reads MOEC_RANK, MOEC_WORLD_SIZE, MOEC_MASTER_ADDR and MOEC_MASTER_PORT.
 * Returns 1 with *addr malloc'd (the caller frees it); 0 with a message
 * naming the variable when one is missing or malformed (non-numeric, rank
 * outside [0, world), port outside 1..65535). */
int launch_env(int *rank, int *world, char **addr, int *port, char *err, size_t errlen);

#endif
