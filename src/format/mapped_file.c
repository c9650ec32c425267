#include "format/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/meminfo.h"

/* O_NONBLOCK keeps open() from hanging on a FIFO before fstat can refuse it. */
static int open_regular(const char *path, struct stat *st, pith_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
    if (st->st_size <= 0) {
        close(fd);
        return pith_errf(err, "%s: file is empty", path);
    }
    if ((uintmax_t)st->st_size > (uintmax_t)SIZE_MAX) {
        close(fd);
        return pith_errf(err, "%s: file too large to map", path);
    }
    return fd;
}

/* Reads every page in now (the kernel reads ahead after WILLNEED), so that the time a load reports
 * includes the disk reads a mapping otherwise defers to the first requests that touch the weights.
 * Not for a file larger than half of MemAvailable: its pages could not all stay (a mixture of experts
 * bigger than the memory runs with its experts read on demand, model/moe.h), and reading it through
 * would only push its own first pages back out. */
static void prefault(const uint8_t *base, size_t size) {
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
    int fd = open_regular(path, &st, err);
    if (fd < 0) return -1;
    size_t size = (size_t)st.st_size;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return pith_errf(err, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
    prefault(p, size);
    out->base = p;
    out->size = size;
    return 0;
}

void pith_unmap_file(pith_mapped_file *m) {
    if (m->base) munmap((void *)m->base, m->size);
    m->base = NULL;
    m->size = 0;
}

int pith_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len, pith_err *err) {
    *out = NULL;
    *len = 0;
    struct stat st;
    int fd = open_regular(path, &st, err);
    if (fd < 0) return -1;
    if ((uintmax_t)st.st_size > (uintmax_t)max_bytes) {
        close(fd);
        return pith_errf(err, "%s: file is %jd bytes, more than the %zu allowed", path, (intmax_t)st.st_size,
                         max_bytes);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return pith_errf(err, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return pith_errf(err, "%s: read failed: %s", path, e ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = '\0';
    *out = buf;
    *len = size;
    return 0;
}
