/* Engine tests that step an engine to completion with the integrity check after every step. Include
 * after check.h. */
#ifndef PITH_TEST_ENGINE_RUN_H
#define PITH_TEST_ENGINE_RUN_H

#include "check.h"
#include "core/engine_internal.h"
#include "pith/engine.h"

/* Steps e until it has no work, checking each step and engine_check after it (stops at the first
 * integrity failure). */
static void run(pith_engine *e) {
    pith_err err;
    while (pith_engine_has_work(e)) {
        CHECKF(pith_engine_step(e, &err) == 0, "%s", err.msg);
        int rc = engine_check(e, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) break;
    }
}

#endif
