/*
 * gemmad — the server binary: reads the configuration (defaults, --config file, GEMMAD_*
 * environment, flags), sets the log level and runs the server until SIGINT/SIGTERM.
 * Exit status: 0 after a clean drain, 1 when start-up fails, 2 for a bad setting.
 */
#include <stdio.h>
#include <stdlib.h>

#include "config/config.h"
#include "base/log.h"
#include "server/server.h"

extern char **environ;

int main(int argc, char **argv) {
    static struct config cfg;
    char err[1024];
    int rc = config_load(&cfg, argc, argv, environ, err, sizeof err);
    if (rc == CONFIG_HELP) {
        static char help[16384];
        config_help(help, sizeof help);
        fputs(help, stdout);
        return 0;
    }
    if (rc == CONFIG_OK) rc = config_validate(&cfg, err, sizeof err);
    if (rc != CONFIG_OK) {
        fprintf(stderr, "gemmad: %s\n", err);
        return 2;
    }
    enum log_level lv = LOG_INFO;
    log_parse_level(cfg.log_level, &lv);
    log_set_level(lv);
    return server_run(&cfg);
}
