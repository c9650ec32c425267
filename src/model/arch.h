/* Forwards to format/arch.h, where the architecture descriptor interface now lives (src/format/ may
 * include nothing from src/model/; tests/test_layering.py).
 *
 * Kept only for qwen35.h, whose rewrite is under way; new code includes "format/arch.h".
 * Delete this file once nothing includes it. */
#ifndef PITH_MODEL_ARCH_H
#define PITH_MODEL_ARCH_H

#include "format/arch.h"

#endif
