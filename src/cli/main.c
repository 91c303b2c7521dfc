/* SPDX-License-Identifier: MIT */
/*
 * The sluice binary: `sluice COMMAND [ARGS]`.
 *
 * main() only dispatches. Each subcommand is one row of the command table below and one function
 * taking the arguments that follow the program name (argv[0] is the command's own name) and
 * returning the exit status. Exit statuses are the same for every command: 0 success, 1 the
 * command ran and failed, 2 bad usage (unknown command or option, malformed argument).
 */
#include <stdio.h>
#include <string.h>

#include "cli/check.h"
#include "cli/data.h"
#include "cli/serve.h"
#include "cli/sim/simulate.h"
#include "cli/top.h"

/* The version printed by --version; the build may pass the project's own. */
#ifndef SLUICE_VERSION_STRING
#define SLUICE_VERSION_STRING "0.1.0"
#endif

#define EXIT_USAGE 2

/* One subcommand. */
typedef struct cli_command {
    const char *name;                  /* as typed after `sluice` */
    int (*run)(int argc, char **argv); /* argv[0] is the name; returns the exit status */
    const char *summary;               /* one line for `sluice --help` */
} cli_command;

static const cli_command commands[] = {
    {"simulate", simulate_main, "run requests through a limit on a simulated clock"},
    {"check", check_main, "validate a configuration file and summarise its limits and types"},
    {"serve", serve_main, "run the server (RESP: redis-cli and Redis clients talk to it)"},
    {"top", top_main, "watch a running server's limits and tasks (its admin port)"},
    {"data", data_main, "check a server's data directory (sluice data check DIR)"},
    /* Next: bench (measure decisions per second). One row and one function each. */
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "Usage: sluice COMMAND [OPTIONS]\n"
               "       sluice --help | --version\n"
               "\n"
               "sluice is a rate-limiting and flow-control engine.\n"
               "\n"
               "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n"
               "Options:\n"
               "  -h, --help     show this help and exit\n"
               "  -V, --version  print the version and exit\n"
               "\n"
               "Run `sluice COMMAND --help` (or `sluice help COMMAND`) for a command's options.\n"
               "Exit status: 0 success, 1 the command failed, 2 bad usage.\n");
}

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const cli_command *cmd;
    const char *name;

    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0) {
        printf("sluice %s\n", SLUICE_VERSION_STRING);
        return 0;
    }
    if (strcmp(name, "help") == 0) {
        char help_flag[] = "--help";
        char *help_argv[3];

        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        cmd = find_command(argv[2]);
        if (!cmd) {
            fprintf(stderr, "sluice: unknown command \"%s\"; see sluice --help\n", argv[2]);
            return EXIT_USAGE;
        }
        help_argv[0] = argv[2];
        help_argv[1] = help_flag;
        help_argv[2] = NULL;
        return cmd->run(2, help_argv);
    }
    if (name[0] == '-') {
        fprintf(stderr, "sluice: unknown option %s; see sluice --help\n", name);
        return EXIT_USAGE;
    }
    cmd = find_command(name);
    if (!cmd) {
        fprintf(stderr, "sluice: unknown command \"%s\"; see sluice --help\n", name);
        return EXIT_USAGE;
    }
    return cmd->run(argc - 1, argv + 1);
}
