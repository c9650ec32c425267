#include "cli/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void cli_progress_start(cli_progress *p, const char *what) {
    p->what = what;
    p->t0 = now_s();
    p->tty = isatty(STDERR_FILENO);
    p->drawn = false;
}

void cli_progress_update(void *user, double done) {
    cli_progress *p = user;
    if (!p->tty || now_s() - p->t0 < 1.0) return;
    enum { WIDTH = 30 };
    int fill = (int)(done * WIDTH + 0.5);
    fill = fill < 0 ? 0 : fill > WIDTH ? WIDTH : fill;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = 0;
    fprintf(stderr, "\r%s [%s] %3.0f%% %.1f s", p->what, bar, 100 * done, now_s() - p->t0);
    fflush(stderr);
    p->drawn = true;
}

void cli_progress_end(cli_progress *p) {
    if (p->drawn) fprintf(stderr, "\r\033[K");
    p->drawn = false;
}
