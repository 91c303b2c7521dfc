/* SPDX-License-Identifier: MIT */
/*
 * The real `sluice serve` for hiredis-driven tests (see server_fixture.h).
 */
#include "server_fixture.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sys/wait.h>

#include "testutil.h"

static const char *const fixture_files[] = {"port", "log", "sluice.yaml"};

void server_fixture_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static int write_config(const char *path, const char *yaml)
{
    FILE *f = fopen(path, "w");

    if (!f)
        return -1;
    if (fputs(yaml, f) < 0) {
        fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

int server_fixture_start(server_fixture *f, const char *config_yaml)
{
    return server_fixture_start_args(f, config_yaml, NULL);
}

int server_fixture_start_args(server_fixture *f, const char *config_yaml, const char *const *extra)
{
    const char *bin = test_sluice_bin();
    char portfile[128], logfile[128], conffile[128];
    const char *argv[48];
    size_t n = 0;

    if (!bin)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/sluice-fixture-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(portfile, sizeof(portfile), "%s/port", f->dir);
    snprintf(logfile, sizeof(logfile), "%s/log", f->dir);
    snprintf(conffile, sizeof(conffile), "%s/sluice.yaml", f->dir);
    if (config_yaml && write_config(conffile, config_yaml) != 0)
        return -1;
    f->pid = fork();
    if (f->pid < 0)
        return -1;
    if (f->pid == 0) {
        FILE *log = freopen(logfile, "w", stderr);

        (void)log;
        {
            static const char *const fixed[] = {"serve",       "--port",       "0",    "--bind",
                                                "127.0.0.1",   "--durability", "none", "--no-admin",
                                                "--log-level", "warn"};

            argv[n++] = bin;
            for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
                argv[n++] = fixed[i];
            argv[n++] = "--port-file";
            argv[n++] = portfile;
            if (config_yaml) {
                argv[n++] = "--config";
                argv[n++] = conffile;
            }
            for (size_t i = 0; extra && extra[i] && n + 1 < sizeof argv / sizeof argv[0]; i++)
                argv[n++] = extra[i];
            argv[n] = NULL;
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        FILE *pf = fopen(portfile, "r");

        if (pf) {
            int ok = fscanf(pf, "%d", &f->port) == 1;

            fclose(pf);
            if (ok)
                return 0;
        }
        server_fixture_sleep_ms(10);
    }
    fprintf(stderr, "the server did not write its port file\n");
    kill(f->pid, SIGKILL);
    return -1;
}

int server_fixture_stop(server_fixture *f)
{
    char path[160];
    int status = 0;

    if (f->pid > 0) {
        kill(f->pid, SIGTERM);
        if (waitpid(f->pid, &status, 0) < 0)
            return -1;
        f->pid = 0;
    }
    for (size_t i = 0; i < sizeof(fixture_files) / sizeof(fixture_files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", f->dir, fixture_files[i]);
        unlink(path);
    }
    rmdir(f->dir);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the server exited with status %d\n", status);
        return -1;
    }
    return 0;
}

redisContext *server_fixture_connect(const server_fixture *f)
{
    redisContext *c = redisConnect("127.0.0.1", f->port);

    assert_non_null(c);
    if (c->err)
        fail_msg("connect: %s", c->errstr);
    return c;
}

redisReply *server_fixture_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r)
        fail_msg("command %s: %s", fmt, c->errstr);
    return r;
}
