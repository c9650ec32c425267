/* Lockstep tensor parallelism (pith/dist.h): rank 0's model, which runs each op on every rank. */
#ifndef PITH_DIST_LOCKSTEP_H
#define PITH_DIST_LOCKSTEP_H

#include "pith/dist.h"

/* Wraps rank 0's shard (taking it over, its file included) into the model the engine drives: its hp is
 * the file's (the whole vocabulary), its memory spec the shard's (every rank's pools are alike). On
 * failure the shard is freed. */
int pith_dist_leader(pith_model *shard, pith_comm *c, pith_model **out, pith_err *err);

#endif
