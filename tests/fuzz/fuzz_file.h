/* fuzz_file.h - for fuzz targets whose parser reads a path: the input is
 * put in an in-memory file (memfd: a regular file, no disk) and its
 * /proc/self/fd path handed over. One file per process, rewritten per input. */
#ifndef MOEC_FUZZ_FILE_H
#define MOEC_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-input", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz input");
        abort();
    }
    return path;
}

#endif
