/* logfmt.c — stderr lines as JSON objects (see logfmt.h). */
#include "cli/logfmt.h"
#include "cli/util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int saved_fd = -1;
static pthread_t reader;
static FILE *out;

static void emit(const char *line, size_t n) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(out, "{\"ts\":\"%s.%03dZ\",\"pid\":%d,\"msg\":", ts, (int)(tv.tv_usec / 1000), (int)getpid());
    json_write_str(out, line, n);
    fputs("}\n", out);
    fflush(out);
}

static void *read_loop(void *arg) {
    FILE *in = fdopen((int)(intptr_t)arg, "r");
    if (!in) return NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] == '\n') n--;
        if (n > 0 && line[n - 1] == '\r') n--;
        emit(line, (size_t)n);
    }
    free(line);
    fclose(in);
    return NULL;
}

static void stop(void) {
    if (saved_fd < 0) return;
    fflush(stderr);
    dup2(saved_fd, 2); /* closes the pipe's last write end: the reader sees EOF */
    pthread_join(reader, NULL);
    saved_fd = -1;
}

int logfmt_json_start(void) {
    int p[2];
    if (saved_fd >= 0) return 0;
    if (pipe(p) != 0) return -1;
    int keep = dup(2);
    if (keep < 0) return close(p[0]), close(p[1]), -1;
    out = fdopen(keep, "w");
    if (!out) return close(keep), close(p[0]), close(p[1]), -1;
    fflush(stderr);
    if (dup2(p[1], 2) < 0) return fclose(out), close(p[0]), close(p[1]), -1;
    close(p[1]);
    setvbuf(stderr, NULL, _IOLBF, 0);
    if (pthread_create(&reader, NULL, read_loop, (void *)(intptr_t)p[0]) != 0) {
        dup2(keep, 2);
        fclose(out);
        close(p[0]);
        return -1;
    }
    saved_fd = keep;
    atexit(stop);
    return 0;
}
