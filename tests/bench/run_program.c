/* run_program.c: fork/exec with redirected output; what the bench tests use to run the command under test. */
#include "run_program.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int run_program(char *const *command, char *const *args, const char *output_prefix, const char *path_override) {
    char *argv[128];
    int argc = 0;
    for (int i = 0; command[i] && argc < 100; ++i) argv[argc++] = command[i];
    for (int i = 0; args[i] && argc < 127; ++i) argv[argc++] = args[i];
    argv[argc] = NULL;

    char out_path[1024], err_path[1024];
    snprintf(out_path, sizeof out_path, "%s.out", output_prefix);
    snprintf(err_path, sizeof err_path, "%s.err", output_prefix);
    fflush(stdout);
    fflush(stderr);
    const pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        const int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) _exit(126);
        if (path_override) setenv("PATH", path_override, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (waitpid(child, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    size_t length = 0, capacity = 4096;
    char *text = malloc(capacity);
    if (!text) return NULL;
    if (f) {
        size_t got;
        while ((got = fread(text + length, 1, capacity - length - 1, f)) > 0) {
            length += got;
            if (length + 1 == capacity) {
                char *grown = realloc(text, capacity *= 2);
                if (!grown) break;
                text = grown;
            }
        }
        fclose(f);
    }
    text[length] = '\0';
    return text;
}
