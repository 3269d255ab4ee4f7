/* test_server — the whole server in-process (event loop thread + scheduler thread + compute
 * threads) driven by raw HTTP from a client thread; its point is the ThreadSanitizer build
 * (make test-tsan), which checks the hand-over of scheduler events to the loop thread, the
 * suspend/resume of streams, a client leaving mid-stream and the SIGTERM drain. Skips without
 * the bundled model. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "base/log.h"
#include "server/server.h"
#include "tests/unit/harness.h"

#define TS_MODEL "models/gemma-3-270m-q4_k_m.gguf"

static struct config ts_cfg;
static int ts_rc = -1;

static void *ts_server(void *arg) {
    (void)arg;
    ts_rc = server_run(&ts_cfg);
    return NULL;
}

static int ts_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &l)) {
        close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int ts_connect(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)ts_cfg.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {120, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Sends one request (Connection: close) and reads the answer into out; returns its length,
 * or -1 when the connection failed. With stop_after, closes as soon as it was seen. */
static int ts_request(const char *method, const char *path, const char *body, char *out,
                      size_t cap, const char *stop_after) {
    int fd = ts_connect();
    if (fd < 0) return -1;
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, body ? strlen(body) : 0, body ? body : "");
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, out + got, cap - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
        out[got] = 0;
        if (stop_after && strstr(out, stop_after)) break;
        if (got + 1 >= cap) break;
    }
    out[got] = 0;
    close(fd);
    return (int)got;
}

static void test_server_roundtrip(void) {
    if (access(TS_MODEL, R_OK)) T_SKIP("bundled model missing (make model)");
    config_defaults(&ts_cfg);
    snprintf(ts_cfg.model, sizeof ts_cfg.model, "%s", TS_MODEL);
    ts_cfg.port = ts_free_port();
    ts_cfg.threads = 2;
    ts_cfg.ctx_size = 512;
    ts_cfg.max_tokens = 64;
    ts_cfg.kv_tokens = 4096;
    ts_cfg.drain_timeout_s = 600; /* sanitizer builds decode slowly */
    int quick = getenv("GEMMAD_TEST_QUICK") != NULL;
    log_set_level(getenv("GEMMAD_TEST_VERBOSE") ? LOG_INFO : LOG_WARN);
    T_ASSERT(ts_cfg.port > 0);
    pthread_t th;
    T_ASSERT(pthread_create(&th, NULL, ts_server, NULL) == 0);
    static char buf[1 << 16];
    int ok = 0;
    for (int i = 0; i < 1200 && !ok; i++) {
        if (ts_request("GET", "/health", NULL, buf, sizeof buf, NULL) > 0 &&
            strstr(buf, "HTTP/1.1 200"))
            ok = 1;
        else
            usleep(100000);
    }
    T_ASSERTF(ok, "server never became healthy");

    /* Prompts of one token keep the sanitizer build (tens of times slower) within time. */
    if (!quick) {
        const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                           "\"max_tokens\":3,\"temperature\":0}";
        T_ASSERT(ts_request("POST", "/v1/chat/completions", chat, buf, sizeof buf, NULL) > 0);
        T_ASSERTF(strstr(buf, "HTTP/1.1 200") && strstr(buf, "\"chat.completion\""), "%.300s",
                  buf);
    }
    const char *plain = "{\"prompt\":[2],\"max_tokens\":1,\"temperature\":0}";
    T_ASSERT(ts_request("POST", "/v1/completions", plain, buf, sizeof buf, NULL) > 0);
    T_ASSERTF(strstr(buf, "HTTP/1.1 200") && strstr(buf, "\"text_completion\""), "%.300s", buf);

    const char *stream = quick ? "{\"prompt\":[2],\"max_tokens\":1,\"stream\":true}"
                               : "{\"prompt\":[2],\"max_tokens\":3,\"stream\":true,\"n\":2}";
    T_ASSERT(ts_request("POST", "/v1/completions", stream, buf, sizeof buf, NULL) > 0);
    T_ASSERTF(strstr(buf, "data: [DONE]"), "%.300s", buf);

    /* leave mid-stream, before and after the first token */
    const char *longer = "{\"prompt\":[2],\"max_tokens\":60,\"ignore_eos\":true,\"stream\":true}";
    for (int i = 0; i < 2; i++)
        T_ASSERT(ts_request("POST", "/v1/completions", longer, buf, sizeof buf,
                            i == 0 ? "\r\n\r\n" : "\"text\"") > 0);
    T_ASSERT(ts_request("POST", "/v1/chat/completions", "{\"messages\":[", buf, sizeof buf,
                        NULL) > 0);
    T_ASSERT(strstr(buf, "HTTP/1.1 400") != NULL);
    T_ASSERT(ts_request("GET", "/metrics", NULL, buf, sizeof buf, NULL) > 0);
    T_ASSERT(strstr(buf, "gemmad_request_success_total") != NULL);

    /* a stream still running when SIGTERM arrives finishes; then the process exits 0 */
    int fd = ts_connect();
    T_ASSERT(fd >= 0);
    char req[1024];
    const char *body = "{\"prompt\":[2],\"max_tokens\":2,\"ignore_eos\":true,\"stream\":true}";
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    T_ASSERT(write(fd, req, (size_t)n) == n);
    size_t got = 0;
    buf[0] = 0;
    while (!strstr(buf, "\r\n\r\n")) {
        ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
        T_ASSERT(r > 0);
        got += (size_t)r;
        buf[got] = 0;
    }
    kill(getpid(), SIGTERM);
    while (!strstr(buf, "[DONE]")) {
        ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
        buf[got] = 0;
    }
    close(fd);
    T_ASSERTF(strstr(buf, "data: [DONE]"), "stream cut by the drain: %.300s", buf);
    pthread_join(th, NULL);
    T_ASSERT(ts_rc == 0);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {T_CASE(test_server_roundtrip), {0}};
    return t_main(argc, argv, cases);
}
