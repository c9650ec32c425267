/* --tp on the command line (cli.h): joining the MPI job, and the part of a rank other than 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "pith/dist.h"

int cli_tp_arg(const char *cmd, int argc, char **argv, int *i, int *tp, int *pp, bool *no_ep) {
    const char *opt = argv[*i];
    if (!strcmp(opt, "--ep") || !strcmp(opt, "--no-ep") || !strcmp(opt, "--enable-expert-parallel")) {
        *no_ep = !strcmp(opt, "--no-ep");
        return 1;
    }
    bool is_tp = !strcmp(opt, "--tp") || !strcmp(opt, "--tensor-parallel-size");
    if (!is_tp && strcmp(opt, "--pp") != 0 && strcmp(opt, "--pipeline-parallel-size") != 0) return 0;
    const char *v = cli_value(cmd, argc, argv, i);
    long long n;
    if (!v || !cli_parse_int(cmd, opt, v, 1, 256, &n)) return -1;
    *(is_tp ? tp : pp) = (int)n;
    return 1;
}

bool cli_dist_begin(const char *cmd, int tp, int pp, pith_comm **comm) {
    *comm = NULL;
    tp = tp > 1 ? tp : 1;
    pp = pp > 1 ? pp : 1;
    if (tp * pp <= 1) return true;
    pith_err err = {{0}};
    if (pith_comm_mpi(NULL, NULL, comm, &err)) {
        fprintf(stderr, "pith %s: --tp %d --pp %d: %s\n", cmd, tp, pp, err.msg);
        return false;
    }
    int size = pith_comm_size(*comm);
    /* a rank that dies without the launcher noticing, or stops answering, ends the job within this */
    double timeout = 60;
    const char *t = getenv("PITH_TP_TIMEOUT");
    if (t && *t) {
        char *end;
        timeout = strtod(t, &end);
        if (*end || !(timeout > 0 && timeout < 1e6)) {
            fprintf(stderr, "pith %s: PITH_TP_TIMEOUT=%s: expected seconds (> 0)\n", cmd, t);
            pith_comm_free(*comm);
            *comm = NULL;
            return false;
        }
    }
    if (pith_comm_watchdog(*comm, timeout, &err)) {
        fprintf(stderr, "pith %s: --tp %d --pp %d: %s\n", cmd, tp, pp, err.msg);
        pith_comm_free(*comm);
        *comm = NULL;
        return false;
    }
    if (size != tp * pp) {
        if (pith_comm_rank(*comm) == 0)
            fprintf(stderr, "pith %s: --tp %d --pp %d in a job of %d ranks: start it with mpirun -np %d\n", cmd, tp, pp,
                    size, tp * pp);
        pith_comm_free(*comm);
        *comm = NULL;
        return false;
    }
    return true;
}

int cli_dist_worker(const char *cmd, pith_comm *comm, const char *model_path, const pith_model_options *mo) {
    /* Rank 0 decides when the job ends (a SIGTERM there drains its requests first, then releases the
     * others): a stop signal a launcher forwards to every rank must not end this one under it. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    pith_model_options quiet = *mo;
    quiet.progress = NULL, quiet.progress_user = NULL;
    pith_model *m;
    pith_err err = {{0}};
    int rank = pith_comm_rank(comm);
    if (pith_model_load(model_path, &quiet, &m, &err)) {
        fprintf(stderr, "pith %s (rank %d): %s\n", cmd, rank, err.msg);
        return cli_dist_end(comm, 1);
    }
    int rc = pith_dist_worker(m, comm, &err); /* frees m, and the models rank 0 reloads after it */
    if (rc) fprintf(stderr, "pith %s (rank %d): %s\n", cmd, rank, err.msg);
    return cli_dist_end(comm, rc ? 1 : 0);
}

int cli_dist_end(pith_comm *comm, int rc) {
    if (!comm) return rc;
    if (rc != 0 && rc != 130) {
        fflush(stdout);
        fflush(stderr);
        /* the others may be waiting in a collective for this rank: end the job rather than hang it */
        pith_comm_abort_job(comm, rc);
    }
    pith_comm_free(comm);
    return rc;
}

const char *cli_tp_help(bool wide) {
    return wide ? "      --tp N                tensor parallelism over N MPI ranks (the CPU backend, one model;\n"
                  "                            docs/distributed.md); default 1\n"
                  "      --pp M                M pipeline stages of --tp ranks each: start with mpirun -np N*M;\n"
                  "                            default 1\n"
                  "      --ep, --no-ep         with --tp, a mixture of experts split by expert (the default) or\n"
                  "                            by column (each rank a share of every expert)\n"
                : "      --tp N              tensor parallelism over N MPI ranks (the CPU backend, one model;\n"
                  "                          docs/distributed.md); default 1\n"
                  "      --pp M              M pipeline stages of --tp ranks each: start with mpirun -np N*M;\n"
                  "                          default 1\n"
                  "      --ep, --no-ep       with --tp, a mixture of experts split by expert (the default) or\n"
                  "                          by column (each rank a share of every expert)\n";
}
