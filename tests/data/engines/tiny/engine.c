/* tiny: this repository's own small engine for the tests of named builds (tests/test_builds.py). A real program:
   it reads one 4 KiB slice of FILE per token with pread (an "expert" of a model streamed from disk) and prints what
   it did: its variant (a patch changes it), the bytes it read and its rate in llama.cpp's eval-time line. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define VARIANT "base"
#define SLICE 4096

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE TOKENS\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    int tokens = atoi(argv[2]);
    static char buf[SLICE];
    long long total = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < tokens; i++) {
        off_t at = size > SLICE ? (off_t)(((long long)i * 7919 * SLICE) % (size - SLICE)) : 0;
        ssize_t got = pread(fd, buf, SLICE, at);
        if (got < 0) {
            perror("pread");
            return 1;
        }
        total += got;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (ms <= 0)
        ms = 0.001;
    printf("tiny %s: %lld bytes\n", VARIANT, total);
    fprintf(stderr, "tiny:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per second)\n",
            ms, tokens, ms / tokens, tokens * 1e3 / ms);
    close(fd);
    return 0;
}
