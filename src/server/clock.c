/* The server's clock: monotonic seconds for deadlines, and bounded waits on condition variables. Apart
 * from server.c so that the handlers and the fuzz targets built from them do not pull in the server's
 * lifecycle. */
#include <time.h>

#include "server/server_internal.h"

double server_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void server_cond_wait(pthread_cond_t *c, pthread_mutex_t *m, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* pthread_cond_timedwait's default clock */
    long ns = ts.tv_nsec + (long)(seconds * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(c, m, &ts);
}
