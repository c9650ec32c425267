/* A progress bar on stderr for model loads: drawn only when stderr is a terminal and the load has taken
 * longer than a second, so quick loads and redirected output stay quiet. */
#ifndef PITH_CLI_PROGRESS_H
#define PITH_CLI_PROGRESS_H

#include <stdbool.h>

typedef struct cli_progress {
    const char *what;  /* "loading model" */
    double t0;
    bool tty;
    bool drawn;
} cli_progress;

void cli_progress_start(cli_progress *p, const char *what);
/* A pith_model_options.progress callback (user: the cli_progress). */
void cli_progress_update(void *user, double done);
/* Clears the bar if one was drawn. */
void cli_progress_end(cli_progress *p);

#endif
