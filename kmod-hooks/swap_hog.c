// swap_hog: makes the machine swap, and checks every page it got back.
//
//   swap_hog --size MiB [--passes N] [--seed S]
//
// Maps SIZE MiB of anonymous memory (more than the machine's RAM, so most of it must go to swap), writes every 4 KiB
// page with a pattern derived from (seed, pass, page), then on each following pass verifies every page and rewrites
// half of them (alternating halves) with the next pass's pattern, and a final pass verifies all. A page that comes
// back from swap with any other content (stale, another page's, zeroes) fails the run with its number. Each pass
// prints its time and the machine's swap use, so a run that stalls shows where.
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096u
#define WORDS (PAGE / sizeof(uint64_t))

static uint64_t seed = 0x5eed;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

// The word sequence of one page in one generation: splitmix64 from a per-page start.
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t start_of(uint64_t page, uint64_t generation) {
    return seed * 0x100000001b3ull ^ (page << 20) ^ generation;
}

static void fill(uint64_t *p, uint64_t page, uint64_t generation) {
    uint64_t s = start_of(page, generation);
    for (size_t i = 0; i < WORDS; i++) p[i] = mix(&s);
}

static int check(const uint64_t *p, uint64_t page, uint64_t generation) {
    uint64_t s = start_of(page, generation);
    for (size_t i = 0; i < WORDS; i++) {
        uint64_t want = mix(&s);
        if (p[i] != want) {
            fprintf(stderr, "swap_hog: MISMATCH page %" PRIu64 " word %zu (generation %" PRIu64 "): got %016" PRIx64
                    " wanted %016" PRIx64 "\n", page, i, generation, p[i], want);
            return 0;
        }
    }
    return 1;
}

static long swap_used_mib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long total = -1, free_ = -1;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "SwapTotal: %ld kB", &total);
        sscanf(line, "SwapFree: %ld kB", &free_);
    }
    fclose(f);
    return total < 0 || free_ < 0 ? -1 : (total - free_) / 1024;
}

static void usage(void) {
    fprintf(stderr, "usage: swap_hog --size MiB [--passes N>=2] [--seed S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    long size_mib = 0, passes = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) size_mib = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--passes") && i + 1 < argc) passes = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else usage();
    }
    if (size_mib <= 0 || passes < 2) usage();
    uint64_t pages = (uint64_t) size_mib * (1024 * 1024 / PAGE);
    uint64_t *mem = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
    if (mem == MAP_FAILED) {
        fprintf(stderr, "swap_hog: mmap of %ld MiB failed: %s\n", size_mib, strerror(errno));
        return 1;
    }
    // generation[page] is implicit: pass 0 writes generation 0; pass k rewrites the pages whose parity is k % 2.
    double t0 = now();
    for (uint64_t p = 0; p < pages; p++) fill(mem + p * WORDS, p, 0);
    printf("swap_hog: pass 0 wrote %ld MiB in %.1f s, swap used %ld MiB\n", size_mib, now() - t0, swap_used_mib());
    fflush(stdout);
    for (long k = 1; k < passes; k++) {
        double t = now();
        int last = k == passes - 1;
        for (uint64_t p = 0; p < pages; p++) {
            // The generation a page holds before pass k: the last pass j < k with j == 0 or j % 2 == p % 2.
            uint64_t gen = 0;
            for (long j = k - 1; j >= 1; j--) {
                if ((uint64_t) (j % 2) == p % 2) { gen = (uint64_t) j; break; }
            }
            if (!check(mem + p * WORDS, p, gen)) return 1;
            if (!last && (uint64_t) (k % 2) == p % 2) fill(mem + p * WORDS, p, (uint64_t) k);
        }
        printf("swap_hog: pass %ld verified %ld MiB%s in %.1f s, swap used %ld MiB\n", k, size_mib,
               last ? "" : " and rewrote half", now() - t, swap_used_mib());
        fflush(stdout);
    }
    printf("swap_hog: OK: %ld MiB, %ld passes, every page verified, %.1f s\n", size_mib, passes, now() - t0);
    return 0;
}
