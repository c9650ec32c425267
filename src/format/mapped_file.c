#include "format/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/meminfo.h"

/* O_NONBLOCK keeps open() from hanging on a FIFO before fstat can refuse it (a stat() first would race, and
 * would not help: stat reports the FIFO, but a blocking open of it waits for a writer). With missing_ok, a
 * path that does not exist returns -2 and sets no error. */
static int open_regular(const char *path, struct stat *st, bool allow_empty, bool missing_ok, pith_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && missing_ok && (errno == ENOENT || errno == ENOTDIR)) return -2;
    if (fd < 0) return pith_errf(err, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return pith_errf(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return pith_errf(err, "%s: not a regular file", path);
    }
    if (st->st_size <= 0 && !allow_empty) {
        close(fd);
        return pith_errf(err, "%s: file is empty", path);
    }
    if ((uintmax_t)st->st_size >= (uintmax_t)SIZE_MAX) {
        close(fd);
        return pith_errf(err, "%s: file too large to map", path);
    }
    return fd;
}

void pith_prefault_file(const pith_mapped_file *m) {
    const uint8_t *base = m->base;
    size_t size = m->size;
    if (!base || !size) return;
    uint64_t avail = pith_mem_available();
    if (avail && size > avail / 2) return;
    (void)madvise((void *)base, size, MADV_WILLNEED);
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    volatile uint8_t sink = 0;
    uint8_t acc = 0;
    for (size_t off = 0; off < size; off += step) acc ^= base[off];
    acc ^= base[size - 1];
    sink = acc;
    (void)sink;
}

int pith_map_file(const char *path, pith_mapped_file *out, pith_err *err) {
    out->base = NULL;
    out->size = 0;
    struct stat st;
    int fd = open_regular(path, &st, false, false, err);
    if (fd < 0) return -1;
    size_t size = (size_t)st.st_size;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return pith_errf(err, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
    out->base = p;
    out->size = size;
    return 0;
}

void pith_unmap_file(pith_mapped_file *m) {
    if (m->base) munmap((void *)m->base, m->size);
    m->base = NULL;
    m->size = 0;
}

static int read_fd(int fd, const char *path, char *buf, size_t size, size_t *got_out, pith_err *err) {
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return pith_errf(err, "%s: read failed: %s", path, strerror(errno));
        if (r == 0) break;
        got += (size_t)r;
    }
    *got_out = got;
    return 0;
}

static int read_whole(const char *path, size_t max_bytes, bool missing_ok, char **out, size_t *len, pith_err *err) {
    *out = NULL;
    *len = 0;
    struct stat st;
    int fd = open_regular(path, &st, true, missing_ok, err);
    if (fd == -2) return 0;
    if (fd < 0) return -1;
    if ((uintmax_t)st.st_size > (uintmax_t)max_bytes) {
        close(fd);
        return pith_errf(err, "%s: file is %jd bytes, more than the %zu allowed", path, (intmax_t)st.st_size,
                         max_bytes);
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return pith_errf(err, "%s: out of memory", path);
    }
    int rc = read_fd(fd, path, buf, size, &got, err);
    close(fd);
    if (rc == 0 && got < size) rc = pith_errf(err, "%s: read failed: file shrank while reading", path);
    if (rc) {
        free(buf);
        return -1;
    }
    buf[size] = '\0';
    *out = buf;
    *len = size;
    return 0;
}

int pith_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len, pith_err *err) {
    return read_whole(path, max_bytes, false, out, len, err);
}

int pith_read_optional_file(const char *path, size_t max_bytes, char **out, size_t *len, pith_err *err) {
    return read_whole(path, max_bytes, true, out, len, err);
}

int pith_read_file_head(const char *path, void *buf, size_t cap, size_t *got, uint64_t *file_size, pith_err *err) {
    *got = 0;
    struct stat st;
    int fd = open_regular(path, &st, true, false, err);
    if (fd < 0) return -1;
    if (file_size) *file_size = (uint64_t)st.st_size;
    int rc = read_fd(fd, path, buf, cap, got, err);
    close(fd);
    return rc;
}
