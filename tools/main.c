/* main.c: the flashcl program's entry point, which hands the command line to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "flashcl.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"devices", flashcl_cmd_devices, "list OpenCL platforms and devices, with the tile plans chosen for each"},
    {"run", flashcl_cmd_run, "run attention on .npy files (forward, optionally backward), optionally --check"},
    {"bench", flashcl_cmd_bench, "time forward/backward over a sweep of sequence lengths"},
    {"tune", flashcl_cmd_tune, "search the tile plans of a pass on this device; check and time each"},
};

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: flashcl <command> [options]\n"
            "       flashcl --version | --help\n\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; ++i)
        fprintf(out, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(out,
            "  help     this text (`flashcl <command> --help` for a command's options)\n\n"
            "Devices are chosen with --device SPEC or FLASHCL_DEVICE=SPEC: an index from\n"
            "`flashcl devices` or a case-insensitive substring of a platform or device name.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return FLASHCL_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("flashcl %s\n", flashcl_version_string());
        /* What this build can run (the header of the library it was built with). */
        printf("standard attention: %s\n", FLASHCL_HAS_STANDARD ? "yes (CLBlast)" : "unavailable (built without CLBlast)");
        return FLASHCL_EXIT_OK;
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        /* `flashcl help run` is `flashcl run --help`. */
        if (argc >= 3 && strcmp(name, "help") == 0) {
            for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; ++i)
                if (strcmp(argv[2], COMMANDS[i].name) == 0) {
                    char help_flag[] = "--help";
                    char *sub_argv[] = {argv[2], help_flag, NULL};
                    return COMMANDS[i].run(2, sub_argv);
                }
            fprintf(stderr, "flashcl: unknown command '%s'\n", argv[2]);
            return FLASHCL_EXIT_USAGE;
        }
        print_usage(stdout);
        return FLASHCL_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; ++i)
        if (strcmp(name, COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "flashcl: unknown command '%s'\n\n", name);
    print_usage(stderr);
    return FLASHCL_EXIT_USAGE;
}
