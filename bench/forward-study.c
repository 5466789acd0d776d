/*
 * What a forwarding hop costs, copied or spliced: the question behind the bridge's tcp path, asked of the kernel
 * alone, without a JVM, NBD or rbridge's wire in the way. Run by forward-study.sh; see bench/README.md.
 *
 *   forward-study write|read copy|splice|chain REPLICAS COUNT
 *
 * Three roles, each a process:
 *   client  one connection to the forwarder; sends COUNT 1 MiB blocks from one hot buffer (write), or receives them
 *           into one (read). Pinned to CPU 1, like fio in fio-bridge.sh.
 *   forward accepts the client and connects to REPLICAS back ends (write) or to one (read). Per block:
 *           copy:   recv the whole block into a buffer, then send it to each back end (the bridge's path today);
 *           splice: splice(2) it from the socket into a pipe, tee(2) it into a second pipe for a second back end,
 *                   and splice each pipe into its back end's socket (no user copy, no kernel copy of the data).
 *           Pinned to CPU 0.
 *   back    a memserver's part: receives each block into a 1 GiB region (write), or sends blocks from one (read).
 *           Pinned to CPU 0, with the forwarder, like every server process in fio-bridge.sh.
 * chain is the peer's path, the two-hop nbdkit chain (nbd plugin -> nbdkit memory): the forwarder copies, and the back
 * end receives into a buffer and copies that into the region with memcpy (write), or copies from the region into a
 * buffer and sends that (read). It always has one back end.
 * Prints one line: MB/s from the client's first byte to the last acknowledgement, and CPU seconds per GB moved of
 * the forwarder and of the back ends (user + system, summed over back ends).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1 << 20)
#define REGION (1UL << 30)
#define MAX_BACK 2

struct shared { double forward_cpu, back_cpu[MAX_BACK]; int forward_port, back_port[MAX_BACK]; };

static void die(const char *what) { perror(what); exit(1); }

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) die("sched_setaffinity");
}

static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

/* A listening socket on a free loopback port, whose number is stored in *port. */
static int listen_any(int *port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (void *) &a, sizeof a) || listen(s, 4) || getsockname(s, (void *) &a, &len)) die("listen");
    *port = ntohs(a.sin_port);
    return s;
}

static int accept_one(int listener) {
    int s = accept(listener, 0, 0);
    if (s < 0) die("accept");
    close(listener);
    return s;
}

static int connect_to(volatile int *port) {
    while (*port == 0) usleep(1000);
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(*port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || connect(s, (void *) &a, sizeof a)) die("connect");
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return s;
}

static void send_all(int s, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(s, p, n, 0);
        if (w <= 0) die("send");
        p += w, n -= w;
    }
}

static void recv_all(int s, char *p, size_t n) {
    while (n > 0) {
        ssize_t r = recv(s, p, n, 0);
        if (r <= 0) die("recv");
        p += r, n -= r;
    }
}

static void splice_all(int in, int out, size_t n, unsigned flags) {
    while (n > 0) {
        ssize_t r = splice(in, 0, out, 0, n, flags);
        if (r <= 0) die("splice");
        n -= r;
    }
}

static char *region(void) {
    char *r = mmap(0, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (r == MAP_FAILED) die("mmap");
    memset(r, 0x5a, REGION);
    return r;
}

static void back(struct shared *sh, int index, int writing, int buffered, long count) {
    pin(0);
    char *r = region(), ack = 'k', *buffer = (char *) aligned_alloc(4096, BLOCK + 4096) + 2048;
    int s = accept_one(listen_any(&sh->back_port[index]));
    double start = cpu_seconds();
    for (long i = 0; i < count; i++) {
        char *at = r + (i * (size_t) BLOCK) % REGION;
        if (buffered && writing) {
            recv_all(s, buffer, BLOCK);
            memcpy(at, buffer, BLOCK);
        } else if (buffered) {
            memcpy(buffer, at, BLOCK);
            send_all(s, buffer, BLOCK);
        } else if (writing) {
            recv_all(s, at, BLOCK);
        } else {
            send_all(s, at, BLOCK);
        }
    }
    if (writing) send_all(s, &ack, 1);
    else recv_all(s, &ack, 1);
    sh->back_cpu[index] = cpu_seconds() - start;
    exit(0);
}

static void forward(struct shared *sh, int writing, int splicing, int backs, long count) {
    pin(0);
    int listener = listen_any(&sh->forward_port), out[MAX_BACK], pipes[MAX_BACK][2];
    int client = accept_one(listener);
    for (int b = 0; b < backs; b++) out[b] = connect_to(&sh->back_port[b]);
    /* Buffers start 2048 bytes into a page, as the bridge's do (bench/README.md, "4K aliasing"). */
    char *buffer = (char *) aligned_alloc(4096, BLOCK + 4096) + 2048, ack;
    for (int b = 0; splicing && b < backs; b++) {
        if (pipe2(pipes[b], 0)) die("pipe2");
        if (fcntl(pipes[b][1], F_SETPIPE_SZ, BLOCK) < BLOCK) die("F_SETPIPE_SZ");
    }
    double start = cpu_seconds();
    for (long i = 0; i < count; i++) {
        int from = writing ? client : out[0];
        if (!splicing) {
            recv_all(from, buffer, BLOCK);
            if (writing) for (int b = 0; b < backs; b++) send_all(out[b], buffer, BLOCK);
            else send_all(client, buffer, BLOCK);
            continue;
        }
        splice_all(from, pipes[0][1], BLOCK, SPLICE_F_MOVE);
        if (!writing) {
            splice_all(pipes[0][0], client, BLOCK, SPLICE_F_MOVE);
            continue;
        }
        for (int b = 1; b < backs; b++) {
            for (size_t left = BLOCK; left > 0;) {
                ssize_t t = tee(pipes[0][0], pipes[b][1], left, 0);
                if (t <= 0) die("tee");
                left -= t;
            }
        }
        for (int b = backs - 1; b >= 0; b--) splice_all(pipes[b][0], out[b], BLOCK, SPLICE_F_MOVE);
    }
    if (writing) {
        for (int b = 0; b < backs; b++) recv_all(out[b], &ack, 1);
        send_all(client, "k", 1);
    } else {
        recv_all(client, &ack, 1);
        send_all(out[0], "k", 1);
    }
    sh->forward_cpu = cpu_seconds() - start;
    exit(0);
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "write") && strcmp(argv[1], "read"))
            || (strcmp(argv[2], "copy") && strcmp(argv[2], "splice") && strcmp(argv[2], "chain"))) {
        fprintf(stderr, "usage: %s write|read copy|splice|chain REPLICAS COUNT\n", argv[0]);
        return 2;
    }
    int writing = !strcmp(argv[1], "write"), splicing = !strcmp(argv[2], "splice"), chain = !strcmp(argv[2], "chain");
    int backs = writing && !chain ? atoi(argv[3]) : 1;
    long count = atol(argv[4]);
    if (backs < 1 || backs > MAX_BACK || count < 1) {
        fprintf(stderr, "REPLICAS is 1 or 2 (read and chain: 1), COUNT at least 1\n");
        return 2;
    }
    struct shared *sh = mmap(0, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) die("mmap");
    memset(sh, 0, sizeof *sh);
    for (int b = 0; b < backs; b++) if (fork() == 0) back(sh, b, writing, chain, count);
    if (fork() == 0) forward(sh, writing, splicing, backs, count);

    pin(1);
    int s = connect_to(&sh->forward_port);
    char *buffer = malloc(BLOCK), ack = 'k';
    memset(buffer, 0xa5, BLOCK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < count; i++) {
        if (writing) send_all(s, buffer, BLOCK);
        else recv_all(s, buffer, BLOCK);
    }
    if (writing) recv_all(s, &ack, 1);
    else send_all(s, &ack, 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int status, failed = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);
    if (failed) {
        fprintf(stderr, "a role failed\n");
        return 1;
    }
    double secs = t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) / 1e9, gb = count * (double) BLOCK / 1e9;
    double back_cpu = 0;
    for (int b = 0; b < backs; b++) back_cpu += sh->back_cpu[b];
    printf("%s %s R=%d MB/s %.0f forward_s_per_GB %.3f back_s_per_GB %.3f\n", argv[1], argv[2], backs,
           gb * 1e3 / secs, sh->forward_cpu / gb, back_cpu / gb);
    return 0;
}
