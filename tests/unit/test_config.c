/* test_config — defaults, file/env/flag precedence, bad values, --help. */
#include "config/config.h"
#include "tests/unit/harness.h"

#include <stdio.h>
#include <string.h>

static void test_defaults_match_file(void) {
    /* config/gemmad.conf documents the defaults: loading it must change nothing. */
    FILE *f = fopen("config/gemmad.conf", "rb");
    if (!f) T_SKIP("config/gemmad.conf not found (run from the repository root)");
    fclose(f);
    struct config a, b;
    char err[512], da[8192], db[8192];
    config_defaults(&a);
    config_defaults(&b);
    T_ASSERTF(config_load_file(&b, "config/gemmad.conf", err, sizeof err) == 0, "%s", err);
    config_dump(&a, da, sizeof da);
    config_dump(&b, db, sizeof db);
    T_ASSERTF(strcmp(da, db) == 0, "gemmad.conf differs from the defaults:\n%s\n---\n%s", da, db);
}

static void test_precedence(void) {
    char tmp[] = "/tmp/gemmad_cfgXXXXXX";
    int fd = mkstemp(tmp);
    T_ASSERT(fd >= 0);
    const char *text = "port = 1111\nctx_size = 1024 # comment\nthreads=3\nlog_level=debug\n";
    T_ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    char cfgflag[64];
    snprintf(cfgflag, sizeof cfgflag, "--config=%s", tmp);
    char *argv[] = {"gemmad", cfgflag, "--port", "3333", "--model=m.gguf", NULL};
    char *envp[] = {"GEMMAD_PORT=2222", "GEMMAD_THREADS=5", "GEMMAD_UNRELATED=x", "PATH=/bin",
                    NULL};
    struct config c;
    char err[512];
    int rc = config_load(&c, 5, argv, envp, err, sizeof err);
    unlink(tmp);
    T_ASSERTF(rc == 0, "%s", err);
    T_ASSERT(c.port == 3333);        /* flag beats env beats file */
    T_ASSERT(c.threads == 5);        /* env beats file */
    T_ASSERT(c.ctx_size == 1024);    /* file beats default */
    T_ASSERT(!strcmp(c.log_level, "debug"));
    T_ASSERT(!strcmp(c.model, "m.gguf"));
    T_ASSERT(c.max_n == 8);          /* untouched default */
    T_ASSERT(config_validate(&c, err, sizeof err) == 0);
}

static void test_bad_values(void) {
    struct config c;
    char err[512];
    static const char *const bad[][2] = {
        {"port", "-1"},      {"port", "65536"},  {"port", "80x"},     {"port", ""},
        {"ctx_size", "1.5"}, {"threads", "-1"},  {"kv_dtype", "q4"},  {"device", "tpu"},
        {"log_level", "loud"}, {"prefix_cache", "maybe"}, {"sse_keepalive_s", "nan"},
        {"request_timeout_s", "inf"}, {"body_limit", "99999999999999999999"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        config_defaults(&c);
        err[0] = 0;
        int rc = config_set(&c, bad[i][0], bad[i][1], "test", err, sizeof err);
        T_ASSERTF(rc == CONFIG_EVALUE, "%s=%s accepted", bad[i][0], bad[i][1]);
        T_ASSERT(strstr(err, bad[i][0]) != NULL && strchr(err, '\n') == NULL);
    }
    config_defaults(&c);
    T_ASSERT(config_set(&c, "no_such", "1", "test", err, sizeof err) == CONFIG_EUNKNOWN);
    char *argv[] = {"gemmad", "--bogus", "1", NULL};
    T_ASSERT(config_load(&c, 3, argv, NULL, err, sizeof err) == CONFIG_EUNKNOWN);
    char *argv2[] = {"gemmad", "--port", NULL};
    T_ASSERT(config_load(&c, 2, argv2, NULL, err, sizeof err) == CONFIG_EVALUE);
    char *envp[] = {"GEMMAD_PORT=abc", NULL};
    char *argv3[] = {"gemmad", NULL};
    T_ASSERT(config_load(&c, 1, argv3, envp, err, sizeof err) == CONFIG_EVALUE);
    T_ASSERT(strstr(err, "GEMMAD_PORT") != NULL);
    T_ASSERT(config_load_text(&c, "port 80\n", "t", err, sizeof err) == CONFIG_EVALUE);
    config_defaults(&c);
    T_ASSERT(config_validate(&c, err, sizeof err) == CONFIG_EVALUE); /* no model */
    T_ASSERT(config_set(&c, "model", "x", "t", err, sizeof err) == 0);
    T_ASSERT(config_validate(&c, err, sizeof err) == 0);
}

static void test_flags_forms(void) {
    struct config c;
    char err[512];
    char *argv[] = {"gemmad", "--ctx-size", "2048", "--max_tokens=100", "--DEVICE", "CPU",
                    "--prefix-cache", "off", NULL};
    T_ASSERTF(config_load(&c, 8, argv, NULL, err, sizeof err) == 0, "%s", err);
    T_ASSERT(c.ctx_size == 2048 && c.max_tokens == 100 && !strcmp(c.device, "cpu"));
    T_ASSERT(c.prefix_cache == 0);
    /* a bare boolean flag means on; one followed by a boolean word takes that word */
    char *argv3[] = {"gemmad", "--deterministic", "--prefix-cache", "no", "--port", "9", NULL};
    T_ASSERTF(config_load(&c, 6, argv3, NULL, err, sizeof err) == 0, "%s", err);
    T_ASSERT(c.deterministic == 1 && c.prefix_cache == 0 && c.port == 9);
    char *argv4[] = {"gemmad", "--prefix-cache", NULL};
    T_ASSERTF(config_load(&c, 2, argv4, NULL, err, sizeof err) == 0, "%s", err);
    T_ASSERT(c.prefix_cache == 1);
    char *argv2[] = {"gemmad", "--port", "1", "--help", NULL};
    T_ASSERT(config_load(&c, 4, argv2, NULL, err, sizeof err) == CONFIG_HELP);
}

static void test_help_lists_all(void) {
    char help[16384], dump[8192];
    struct config c;
    config_defaults(&c);
    config_help(help, sizeof help);
    config_dump(&c, dump, sizeof dump);
    /* every setting in the dump appears as a flag in the help */
    char *save = NULL;
    int n = 0;
    for (char *line = strtok_r(dump, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char flag[80];
        char *sp = strchr(line, ' ');
        T_ASSERT(sp);
        snprintf(flag, sizeof flag, "--%.*s ", (int)(sp - line), line);
        for (char *p = flag; *p; p++)
            if (*p == '_') *p = '-';
        T_ASSERTF(strstr(help, flag) != NULL, "help lacks %s", flag);
        n++;
    }
    T_ASSERT(n >= 25);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_defaults_match_file), T_CASE(test_precedence), T_CASE(test_bad_values),
        T_CASE(test_flags_forms), T_CASE(test_help_lists_all), {0}};
    return t_main(argc, argv, cases);
}
