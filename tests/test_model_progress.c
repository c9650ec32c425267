/* Model loading reports its progress (pith_model_options.progress): called at least once per layer,
 * non-decreasing, within (0, 1], ending at exactly 1; and a load without a callback is unchanged. Runs on
 * the committed default model (no shared assets needed). */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "pith/model.h"

typedef struct seen {
    int calls;
    double last;
    bool decreased, out_of_range;
} seen;

static void on_progress(void *user, double done) {
    seen *s = user;
    if (done < s->last) s->decreased = true;
    if (!(done > 0 && done <= 1)) s->out_of_range = true;
    s->last = done;
    s->calls++;
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/assets/default.gguf", src ? src : ".");
    seen s = {0};
    pith_model_options o = {.n_threads = 1, .progress = on_progress, .progress_user = &s};
    pith_model *m = NULL;
    pith_err err;
    if (pith_model_load(path, &o, &m, &err)) {
        printf("SKIP: %s\n", err.msg);
        return CHECK_SKIP;
    }
    CHECKF(s.calls >= m->hp.n_layers, "%d calls for %d layers", s.calls, m->hp.n_layers);
    CHECK(!s.decreased && !s.out_of_range && s.last == 1.0);
    pith_model_free(m);
    pith_model_options plain = {.n_threads = 1};
    CHECK(pith_model_load(path, &plain, &m, &err) == 0);
    pith_model_free(m);
    return check_summary("test_model_progress");
}
