/*
 * write_data: writes a self-describing pattern to a block device or a file with O_DIRECT, reads it back and
 * verifies it; --verify-only checks a device or file written earlier (after a remount, a reconnect, a fault).
 *
 * Every 4 KiB block carries a header (magic, its own byte offset, seed, run, pass, a CRC-32C) and a body that is a
 * pseudo-random stream derived from (seed, run, pass, offset). A torn block fails the body compare and the CRC, a
 * misplaced block has a valid CRC but the wrong offset, a stale block has a valid CRC but an older run or pass,
 * a never-written block is zeroes. Exit status: 0 all good, 1 mismatch, 2 usage or I/O error.
 *
 * I/O: --threads worker threads, each keeping up to --qd requests in flight with Linux native AIO (io_submit /
 * io_getevents, raw syscalls, no libaio needed), so up to threads x qd requests are outstanding at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/aio_abi.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096u
#define MAGIC UINT64_C(0x3161746164577252) /* "RWdata1a" little endian */
#define HDR_CRC_OFF 48u                    /* where the CRC-32C lives; it is computed with this field zero */

struct hdr { /* little endian on disk; x86-64 and arm64 are */
    uint64_t magic;
    uint64_t offset;   /* byte offset of this block in the target */
    uint64_t seed;
    uint32_t run;      /* --run */
    uint32_t pass;     /* 1-based index of the write pass in --order */
    uint64_t stamp;    /* informational: position of the request in its pass */
    uint32_t bs;       /* always BLOCK */
    uint32_t pad;
    uint32_t crc;      /* CRC-32C over the whole block with this field zero */
    uint32_t pad2;
};
_Static_assert(sizeof(struct hdr) == 56, "header layout");
_Static_assert(__builtin_offsetof(struct hdr, crc) == HDR_CRC_OFF, "crc offset");

enum order { SEQ, RAND };

static struct {
    const char *path;
    uint64_t offset, size, io;
    uint64_t seed;
    uint32_t run;
    int threads, qd;
    int direct, verify_only, write_only, create, quiet;
    enum order orders[8];
    int norders;
    int signal_pct;
    const char *signal_file;
} opt = {.io = BLOCK, .seed = 0x5eed, .run = 1, .threads = 4, .qd = 8, .direct = 1, .create = 1,
         .signal_pct = -1};

static int fd;
static uint64_t nunits; /* I/O requests per pass (each opt.io bytes) */

/* ------------------------------------------------------------------------------------------ checksum, pattern */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[i] = c;
    }
}

static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        if (i >= HDR_CRC_OFF && i < HDR_CRC_OFF + 4) b = 0;
        c = (c >> 8) ^ crc_table[(c ^ b) & 0xff];
    }
    return ~c;
}

static uint64_t mix64(uint64_t z) { /* splitmix64 finaliser */
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Fills buf (one block) with what a block written at `off` by (seed, run, pass) must hold. */
static void make_block(uint8_t *buf, uint64_t off, uint32_t pass, uint64_t stamp) {
    struct hdr h = {.magic = MAGIC, .offset = off, .seed = opt.seed, .run = opt.run, .pass = pass,
                    .stamp = stamp, .bs = BLOCK};
    memcpy(buf, &h, sizeof h);
    uint64_t s = mix64(opt.seed ^ mix64(off + 0x9e3779b97f4a7c15u) ^ ((uint64_t)opt.run << 32 | pass));
    for (size_t i = sizeof h; i < BLOCK; i += 8) {
        s += UINT64_C(0x9e3779b97f4a7c15);
        uint64_t v = mix64(s);
        memcpy(buf + i, &v, 8);
    }
    uint32_t crc = crc32c(buf, BLOCK);
    memcpy(buf + HDR_CRC_OFF, &crc, 4);
}

/* ------------------------------------------------------------------------------------------ reporting */

static pthread_mutex_t bad_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t bad_count;
static uint64_t bad_off = UINT64_MAX;
static char bad_report[2048];

static const char *classify(const struct hdr *f, int crc_ok, uint64_t off, uint32_t pass, int zero) {
    if (zero) return "all zeroes (never written, or trimmed/zeroed)";
    if (f->magic != MAGIC) return crc_ok ? "foreign data" : "not a write_data block (or torn at its header)";
    if (!crc_ok) return "torn or corrupted (CRC-32C mismatch)";
    if (f->offset != off) return "misplaced (a valid block that belongs at another offset)";
    if (f->seed != opt.seed) return "from another seed";
    if (f->run != opt.run || f->pass != pass) return "stale (a valid block from another run or pass)";
    return "valid header and CRC but the body differs";
}

static void record_bad(const uint8_t *got, const uint8_t *want, uint64_t off, uint32_t pass) {
    pthread_mutex_lock(&bad_lock);
    bad_count++;
    if (off < bad_off) {
        bad_off = off;
        struct hdr f, e;
        memcpy(&f, got, sizeof f);
        memcpy(&e, want, sizeof e);
        uint32_t crc = crc32c(got, BLOCK);
        int crc_ok = crc == f.crc;
        int zero = 1;
        size_t first = BLOCK;
        for (size_t i = 0; i < BLOCK; i++) {
            if (got[i]) zero = 0;
            if (first == BLOCK && got[i] != want[i]) first = i;
        }
        snprintf(bad_report, sizeof bad_report,
                 "first bad block at offset %" PRIu64 " (0x%" PRIx64 "): %s\n"
                 "  first differing byte: %zu of the block\n"
                 "  field     expected            found\n"
                 "  magic     0x%016" PRIx64 "  0x%016" PRIx64 "\n"
                 "  offset    %-18" PRIu64 "  %" PRIu64 "\n"
                 "  seed      0x%-16" PRIx64 "  0x%" PRIx64 "\n"
                 "  run       %-18" PRIu32 "  %" PRIu32 "\n"
                 "  pass      %-18" PRIu32 "  %" PRIu32 "\n"
                 "  crc32c    0x%08" PRIx32 "          0x%08" PRIx32 " (computed over the found block: 0x%08" PRIx32 ")\n",
                 off, off, classify(&f, crc_ok, off, pass, zero), first, e.magic, f.magic, e.offset, f.offset,
                 e.seed, f.seed, e.run, f.run, e.pass, f.pass, e.crc, f.crc, crc);
    }
    pthread_mutex_unlock(&bad_lock);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "write_data: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* ------------------------------------------------------------------------------------------ passes */

struct pass {
    int write;        /* 1 write, 0 read and verify */
    enum order order;
    uint32_t pass;    /* pass number stamped (write) or expected (verify) */
    uint64_t *perm;   /* RAND: unit order */
};

static atomic_uint_fast64_t units_done; /* across write passes, for --signal-at */
static uint64_t signal_after = UINT64_MAX;
static atomic_int signalled;

struct worker {
    pthread_t th;
    int idx;
    const struct pass *p;
};

static long sys_io_setup(unsigned n, aio_context_t *ctx) { return syscall(SYS_io_setup, n, ctx); }
static long sys_io_destroy(aio_context_t ctx) { return syscall(SYS_io_destroy, ctx); }
static long sys_io_submit(aio_context_t ctx, long n, struct iocb **v) { return syscall(SYS_io_submit, ctx, n, v); }
static long sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event *ev) {
    return syscall(SYS_io_getevents, ctx, min, max, ev, NULL);
}

static void maybe_signal(void) {
    uint64_t d = atomic_fetch_add(&units_done, 1) + 1;
    if (d >= signal_after && !atomic_exchange(&signalled, 1)) {
        int s = open(opt.signal_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (s < 0) die("cannot create --signal-file %s: %s", opt.signal_file, strerror(errno));
        dprintf(s, "%" PRIu64 "\n", d);
        fsync(s);
        close(s);
    }
}

static void *work(void *arg) {
    struct worker *w = arg;
    const struct pass *p = w->p;
    int qd = opt.qd;
    aio_context_t ctx = 0;
    if (sys_io_setup(qd, &ctx) < 0) die("io_setup(%d): %s", qd, strerror(errno));
    uint8_t *bufs;
    if (posix_memalign((void **)&bufs, BLOCK, (size_t)qd * opt.io)) die("out of memory");
    uint8_t *want = malloc(BLOCK);
    struct iocb *cbs = calloc(qd, sizeof *cbs);
    struct iocb **free_cbs = calloc(qd, sizeof *free_cbs);
    struct io_event *ev = calloc(qd, sizeof *ev);
    uint64_t *unit_of = calloc(qd, sizeof *unit_of);
    int nfree = qd;
    for (int i = 0; i < qd; i++) free_cbs[i] = &cbs[i];

    /* this thread's share: request indices idx, idx + threads, ... in the pass's order */
    uint64_t next = w->idx, inflight = 0;
    uint64_t per_block = opt.io / BLOCK;
    while (next < nunits || inflight > 0) {
        struct iocb *sub[64];
        int ns = 0;
        while (next < nunits && nfree > 0 && ns < 64) {
            uint64_t u = p->order == RAND ? p->perm[next] : next;
            struct iocb *cb = free_cbs[--nfree];
            int slot = (int)(cb - cbs);
            uint8_t *buf = bufs + (size_t)slot * opt.io;
            uint64_t off = opt.offset + u * opt.io;
            if (p->write)
                for (uint64_t b = 0; b < per_block; b++) make_block(buf + b * BLOCK, off + b * BLOCK, p->pass, next);
            memset(cb, 0, sizeof *cb);
            cb->aio_fildes = fd;
            cb->aio_lio_opcode = p->write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
            cb->aio_buf = (uint64_t)(uintptr_t)buf;
            cb->aio_nbytes = opt.io;
            cb->aio_offset = (int64_t)off;
            cb->aio_data = (uint64_t)slot;
            unit_of[slot] = u;
            sub[ns++] = cb;
            next += opt.threads;
        }
        int done_sub = 0;
        while (done_sub < ns) {
            long r = sys_io_submit(ctx, ns - done_sub, sub + done_sub);
            if (r < 0) {
                if (errno == EAGAIN || errno == EINTR) continue;
                die("io_submit at offset %" PRIu64 ": %s", (uint64_t)sub[done_sub]->aio_offset, strerror(errno));
            }
            done_sub += (int)r;
        }
        inflight += ns;
        if (inflight == 0) break;
        long n = sys_io_getevents(ctx, 1, qd, ev);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("io_getevents: %s", strerror(errno));
        }
        for (long i = 0; i < n; i++) {
            int slot = (int)ev[i].data;
            uint64_t u = unit_of[slot];
            uint64_t off = opt.offset + u * opt.io;
            if (ev[i].res < 0)
                die("%s of %" PRIu64 " bytes at offset %" PRIu64 " failed: %s", p->write ? "write" : "read",
                    opt.io, off, strerror((int)-ev[i].res));
            if ((uint64_t)ev[i].res != opt.io)
                die("short %s at offset %" PRIu64 ": %lld of %" PRIu64 " bytes", p->write ? "write" : "read", off,
                    (long long)ev[i].res, opt.io);
            if (!p->write) {
                uint8_t *buf = bufs + (size_t)slot * opt.io;
                for (uint64_t b = 0; b < per_block; b++) {
                    uint8_t *got = buf + b * BLOCK;
                    struct hdr f;
                    memcpy(&f, got, sizeof f);
                    make_block(want, off + b * BLOCK, p->pass, f.stamp); /* stamp is informational */
                    if (memcmp(got, want, BLOCK) != 0) record_bad(got, want, off + b * BLOCK, p->pass);
                }
            } else if (opt.signal_file) {
                maybe_signal();
            }
            free_cbs[nfree++] = &cbs[slot];
            inflight--;
        }
    }
    sys_io_destroy(ctx);
    free(bufs);
    free(want);
    free(cbs);
    free(free_cbs);
    free(ev);
    free(unit_of);
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void run_pass(const struct pass *p) {
    struct worker *ws = calloc(opt.threads, sizeof *ws);
    double t0 = now();
    for (int i = 0; i < opt.threads; i++) {
        ws[i].idx = i;
        ws[i].p = p;
        if (pthread_create(&ws[i].th, NULL, work, &ws[i])) die("pthread_create failed");
    }
    for (int i = 0; i < opt.threads; i++) pthread_join(ws[i].th, NULL);
    if (p->write && fdatasync(fd) != 0 && errno != EINVAL) die("fdatasync: %s", strerror(errno));
    double dt = now() - t0;
    if (dt <= 0) dt = 1e-9;
    uint64_t bytes = nunits * opt.io;
    printf("write_data: %-6s %-4s pass %" PRIu32 ": %" PRIu64 " bytes in %.2f s: %.2f MB/s, %.0f IOPS (%" PRIu64
           "-byte requests, %d threads x qd %d)\n",
           p->write ? "write" : "verify", p->order == RAND ? "rand" : "seq", p->pass, bytes, dt, bytes / dt / 1e6,
           nunits / dt, opt.io, opt.threads, opt.qd);
    fflush(stdout);
    free(ws);
}

/* ------------------------------------------------------------------------------------------ options */

static uint64_t parse_size(const char *s, const char *what) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s) die("bad %s '%s'", what, s);
    uint64_t mul = 1;
    switch (*end) {
        case 0: break;
        case 'k': case 'K': mul = 1ull << 10; end++; break;
        case 'm': case 'M': mul = 1ull << 20; end++; break;
        case 'g': case 'G': mul = 1ull << 30; end++; break;
        case 't': case 'T': mul = 1ull << 40; end++; break;
        default: die("bad %s '%s' (use a number with an optional K, M, G or T suffix)", what, s);
    }
    if (*end == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    if (*end) die("bad %s '%s'", what, s);
    return v * mul;
}

static void usage(FILE *f) {
    fprintf(f,
"usage: write_data [OPTIONS] TARGET\n"
"\n"
"Writes a verifiable pattern to TARGET (a block device such as /dev/nbd0, or a file, which is created and sized\n"
"when needed) with O_DIRECT, then reads everything back and verifies it. Each 4 KiB block holds a header (magic,\n"
"the block's own byte offset, the seed, the run number, the pass number, the request's position in its pass, a\n"
"CRC-32C of the block) and a body derived from (seed, run, pass, offset), so a torn, misplaced, stale (older run\n"
"or pass), zeroed or corrupted block is detected and told apart.\n"
"\n"
"Options:\n"
"  --size SIZE        bytes to cover (K/M/G/T suffixes, binary). Default: the device's size, or the existing\n"
"                     file's size, minus --offset. Required for a new file. Rounded down to --bs.\n"
"  --offset OFF       start at this byte offset of TARGET (multiple of 4096; default 0), e.g. to use a region\n"
"                     of a raw device that a filesystem does not occupy\n"
"  --bs SIZE          request size, a multiple of 4096 (default 4K); every 4 KiB inside a request is stamped\n"
"  --threads N        worker threads (default 4)\n"
"  --qd N             requests each thread keeps in flight with Linux native AIO (default 8); up to\n"
"                     threads x qd requests are outstanding on TARGET at once\n"
"  --order LIST       write passes, comma-separated: seq (ascending offsets) and/or rand (a seeded random\n"
"                     permutation of the requests). Default seq,rand: pass 1 writes everything in order, pass 2\n"
"                     overwrites everything in random order, and the verify expects pass 2's blocks everywhere\n"
"  --seed N           pattern seed (default 0x5eed)\n"
"  --run N            run number stamped in every block (default 1); use a new one for every write run so that\n"
"                     a block left over from an earlier run is reported as stale\n"
"  --verify-only      do not write: read and verify what an earlier write_data left (give the same --seed,\n"
"                     --run, --order, --offset, --size and --bs)\n"
"  --write-only       write and sync, but do not read back\n"
"  --no-direct        do not use O_DIRECT (for filesystems without it, e.g. tmpfs); reads may then come from the\n"
"                     page cache\n"
"  --no-create        fail rather than create or extend a file\n"
"  --signal-at PCT:FILE  create FILE (containing the request count) once PCT percent of all write requests have\n"
"                     completed, e.g. to let a test inject a fault while I/O is in flight\n"
"  -h, --help         this text\n"
"\n"
"Output: one line per pass with bytes, seconds, MB/s (10^6 bytes per second) and IOPS (requests per second),\n"
"then 'write_data: OK ...' or, on a mismatch, the number of bad blocks and the lowest bad block's offset with\n"
"the expected and found header fields and what the damage looks like.\n"
"\n"
"Exit status: 0 everything verified, 1 at least one bad block, 2 usage or I/O error (the failing offset and\n"
"errno are printed).\n"
"\n"
"Examples:\n"
"  write_data --size 256M /mnt/test/data          # a file on a mounted filesystem\n"
"  write_data --offset 1G --size 128M /dev/nbd0   # a region of a raw device\n"
"  write_data --verify-only --size 256M /mnt/test/data   # after umount/mount or a reconnect\n");
}

static void parse(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) die("%s needs a value (see --help)", a); i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else if (!strcmp(a, "--size")) { NEED(); opt.size = parse_size(v, "--size"); }
        else if (!strcmp(a, "--offset")) { NEED(); opt.offset = parse_size(v, "--offset"); }
        else if (!strcmp(a, "--bs")) { NEED(); opt.io = parse_size(v, "--bs"); }
        else if (!strcmp(a, "--threads")) { NEED(); opt.threads = atoi(v); }
        else if (!strcmp(a, "--qd")) { NEED(); opt.qd = atoi(v); }
        else if (!strcmp(a, "--seed")) { NEED(); opt.seed = parse_size(v, "--seed"); }
        else if (!strcmp(a, "--run")) { NEED(); opt.run = (uint32_t)parse_size(v, "--run"); }
        else if (!strcmp(a, "--verify-only")) opt.verify_only = 1;
        else if (!strcmp(a, "--write-only")) opt.write_only = 1;
        else if (!strcmp(a, "--no-direct")) opt.direct = 0;
        else if (!strcmp(a, "--no-create")) opt.create = 0;
        else if (!strcmp(a, "--order")) {
            NEED();
            char *copy = strdup(v), *save = NULL;
            opt.norders = 0;
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (opt.norders == 8) die("--order: at most 8 passes");
                if (!strcmp(t, "seq")) opt.orders[opt.norders++] = SEQ;
                else if (!strcmp(t, "rand")) opt.orders[opt.norders++] = RAND;
                else die("--order: '%s' is neither seq nor rand", t);
            }
            free(copy);
        } else if (!strcmp(a, "--signal-at")) {
            NEED();
            char *colon = strchr(v, ':');
            if (!colon || colon == v || !colon[1]) die("--signal-at wants PCT:FILE, got '%s'", v);
            opt.signal_pct = atoi(v);
            opt.signal_file = colon + 1;
            if (opt.signal_pct < 0 || opt.signal_pct > 100) die("--signal-at: PCT must be 0..100");
        } else if (a[0] == '-' && a[1]) die("unknown option %s (see --help)", a);
        else if (opt.path) die("more than one TARGET: %s and %s", opt.path, a);
        else opt.path = a;
#undef NEED
    }
    if (!opt.path) { usage(stderr); exit(2); }
    if (opt.norders == 0) { opt.orders[0] = SEQ; opt.orders[1] = RAND; opt.norders = 2; }
    if (opt.io == 0 || opt.io % BLOCK) die("--bs must be a positive multiple of 4096");
    if (opt.offset % BLOCK) die("--offset must be a multiple of 4096");
    if (opt.threads < 1 || opt.threads > 1024) die("--threads must be 1..1024");
    if (opt.qd < 1 || opt.qd > 4096) die("--qd must be 1..4096");
    if (opt.verify_only && opt.write_only) die("--verify-only and --write-only exclude each other");
}

int main(int argc, char **argv) {
    crc_init();
    parse(argc, argv);

    struct stat st;
    int exists = stat(opt.path, &st) == 0;
    int is_file = !exists || S_ISREG(st.st_mode);
    int flags = (opt.verify_only ? O_RDONLY : O_RDWR) | (opt.direct ? O_DIRECT : 0);
    if (!exists) {
        if (opt.verify_only) die("%s does not exist", opt.path);
        if (!opt.create) die("%s does not exist and --no-create was given", opt.path);
        if (!opt.size) die("%s does not exist: give --size to create it", opt.path);
        flags |= O_CREAT;
    }
    fd = open(opt.path, flags, 0644);
    if (fd < 0 && errno == EINVAL && opt.direct)
        die("cannot open %s with O_DIRECT (%s): the filesystem may not support it; try --no-direct", opt.path,
            strerror(errno));
    if (fd < 0) die("cannot open %s: %s", opt.path, strerror(errno));

    uint64_t have;
    if (is_file) {
        if (fstat(fd, &st)) die("fstat %s: %s", opt.path, strerror(errno));
        have = (uint64_t)st.st_size;
    } else if (S_ISBLK(st.st_mode)) {
        if (ioctl(fd, BLKGETSIZE64, &have)) die("BLKGETSIZE64 on %s: %s", opt.path, strerror(errno));
    } else {
        have = UINT64_MAX; /* a character device or the like: trust --size */
        if (!opt.size) die("%s is neither a file nor a block device: give --size", opt.path);
    }
    if (!opt.size) {
        if (have <= opt.offset) die("%s has %" PRIu64 " bytes, nothing after --offset %" PRIu64, opt.path, have,
                                    opt.offset);
        opt.size = have - opt.offset;
    }
    opt.size -= opt.size % opt.io;
    if (!opt.size) die("--size is smaller than one request (--bs %" PRIu64 ")", opt.io);
    uint64_t end = opt.offset + opt.size;
    if (end > have) {
        if (!is_file || opt.verify_only)
            die("%s has %" PRIu64 " bytes; --offset + --size needs %" PRIu64, opt.path, have, end);
        if (!opt.create) die("%s is shorter than --offset + --size and --no-create was given", opt.path);
        int e = posix_fallocate(fd, 0, (off_t)end);
        if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(fd, (off_t)end) ? errno : 0;
        if (e) die("cannot size %s to %" PRIu64 " bytes: %s", opt.path, end, strerror(e));
    }
    nunits = opt.size / opt.io;

    printf("write_data: %s %s: offset %" PRIu64 ", %" PRIu64 " bytes, %" PRIu64 "-byte requests, seed 0x%" PRIx64
           ", run %" PRIu32 ", %d passes, %d threads x qd %d%s\n",
           opt.verify_only ? "verifying" : "writing", opt.path, opt.offset, opt.size, opt.io, opt.seed, opt.run,
           opt.norders, opt.threads, opt.qd, opt.direct ? ", O_DIRECT" : ", buffered");
    fflush(stdout);

    uint64_t *perm = NULL;
    for (int i = 0; i < opt.norders; i++) {
        if (opt.orders[i] == RAND && !perm) {
            perm = malloc(nunits * sizeof *perm);
            if (!perm) die("out of memory for a permutation of %" PRIu64 " requests", nunits);
        }
    }
    if (opt.signal_file && !opt.verify_only) {
        uint64_t total = nunits * (uint64_t)opt.norders;
        signal_after = total * (uint64_t)opt.signal_pct / 100;
        if (signal_after == 0) signal_after = 1;
    }
    if (!opt.verify_only) {
        for (int i = 0; i < opt.norders; i++) {
            struct pass p = {.write = 1, .order = opt.orders[i], .pass = (uint32_t)i + 1, .perm = perm};
            if (p.order == RAND) { /* Fisher-Yates with a seeded generator: the same seed, the same order */
                for (uint64_t k = 0; k < nunits; k++) perm[k] = k;
                uint64_t s = mix64(opt.seed ^ ((uint64_t)opt.run << 20) ^ (uint64_t)(i + 1));
                for (uint64_t k = nunits - 1; k > 0; k--) {
                    s += UINT64_C(0x9e3779b97f4a7c15);
                    uint64_t j = mix64(s) % (k + 1);
                    uint64_t t = perm[k]; perm[k] = perm[j]; perm[j] = t;
                }
            }
            run_pass(&p);
        }
    }
    if (opt.write_only) {
        printf("write_data: written (not verified)\n");
        return 0;
    }
    struct pass v = {.write = 0, .order = SEQ, .pass = (uint32_t)opt.norders};
    run_pass(&v);
    close(fd);
    free(perm);
    if (bad_count) {
        printf("write_data: MISMATCH: %" PRIu64 " of %" PRIu64 " blocks bad in %s\n%s", bad_count,
               opt.size / BLOCK, opt.path, bad_report);
        fprintf(stderr, "write_data: MISMATCH at offset %" PRIu64 " (%" PRIu64 " bad blocks)\n", bad_off, bad_count);
        return 1;
    }
    printf("write_data: OK: %" PRIu64 " blocks verified in %s\n", opt.size / BLOCK, opt.path);
    return 0;
}
