/* Forwards to util/rows.h, where the vectorised row reductions now live (src/core/ may include no
 * sampler header; tests/test_layering.py).
 *
 * Kept only for model/qwen35_mtp.c, whose rewrite is under way; new code includes "util/rows.h".
 * Delete this file once nothing includes it. */
#ifndef PITH_SAMPLE_ROWS_H
#define PITH_SAMPLE_ROWS_H

#include "util/rows.h"

#endif
