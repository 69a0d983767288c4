/* json_records.c: a strict recursive-descent reader for a JSON list of flat objects (no nesting needed). */
#include "json_records.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    const char *p;
    char *error;
    size_t error_size;
} reader;

static int fail(reader *r, const char *what) {
    snprintf(r->error, r->error_size, "%s near \"%.20s\"", what, r->p);
    return -1;
}

static void skip_space(reader *r) {
    while (isspace((unsigned char)*r->p)) r->p++;
}

static int expect(reader *r, char c) {
    skip_space(r);
    if (*r->p != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return fail(r, what);
    }
    r->p++;
    return 0;
}

static int read_string(reader *r, char *out, size_t size) {
    if (expect(r, '"')) return -1;
    size_t n = 0;
    while (*r->p && *r->p != '"') {
        char c = *r->p++;
        if (c == '\\') {
            c = *r->p++;
            if (c == 'u') { /* the bench writes \u00XX for control characters only */
                if (strlen(r->p) < 4) return fail(r, "short \\u escape");
                r->p += 4;
                c = '?';
            } else if (c != '"' && c != '\\' && c != '/') {
                return fail(r, "unexpected escape");
            }
        }
        if (n + 1 >= size) return fail(r, "string too long");
        out[n++] = c;
    }
    out[n] = '\0';
    return expect(r, '"');
}

static int read_value(reader *r, json_field *field) {
    skip_space(r);
    if (*r->p == '"') {
        field->type = JSON_STRING;
        return read_string(r, field->text, sizeof field->text);
    }
    static const struct { const char *word; json_type type; double number; } words[] = {
        {"null", JSON_NULL, 0}, {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; ++i)
        if (strncmp(r->p, words[i].word, strlen(words[i].word)) == 0) {
            r->p += strlen(words[i].word);
            field->type = words[i].type;
            field->number = words[i].number;
            return 0;
        }
    char *end = NULL;
    field->number = strtod(r->p, &end);
    if (end == r->p) return fail(r, "expected a value");
    r->p = end;
    field->type = JSON_NUMBER;
    return 0;
}

static int read_object(reader *r, json_record *record) {
    memset(record, 0, sizeof *record);
    if (expect(r, '{')) return -1;
    skip_space(r);
    if (*r->p == '}') return r->p++, 0;
    for (;;) {
        if (record->field_count == JSON_MAX_FIELDS) return fail(r, "too many fields");
        json_field *field = &record->fields[record->field_count++];
        if (read_string(r, field->name, sizeof field->name) || expect(r, ':') || read_value(r, field)) return -1;
        skip_space(r);
        if (*r->p == '}') return r->p++, 0;
        if (expect(r, ',')) return -1;
    }
}

int json_read_records(const char *path, json_record **records, char *error, size_t error_size) {
    *records = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(error, error_size, "cannot open %s", path);
        return -1;
    }
    char *text = NULL;
    size_t length = 0, capacity = 0;
    for (;;) {
        if (length + 4096 + 1 > capacity) {
            capacity = 2 * capacity + 8192;
            char *grown = realloc(text, capacity);
            if (!grown) break;
            text = grown;
        }
        const size_t got = fread(text + length, 1, 4096, f);
        length += got;
        if (got == 0) break;
    }
    fclose(f);
    if (!text) {
        snprintf(error, error_size, "out of memory reading %s", path);
        return -1;
    }
    text[length] = '\0';

    reader r = {text, error, error_size};
    json_record *list = NULL;
    int count = 0, result = -1;
    if (expect(&r, '[')) goto done;
    skip_space(&r);
    if (*r.p == ']') {
        r.p++;
    } else {
        for (;;) {
            json_record *grown = realloc(list, (size_t)(count + 1) * sizeof *list);
            if (!grown) {
                fail(&r, "out of memory");
                goto done;
            }
            list = grown;
            if (read_object(&r, &list[count])) goto done;
            count++;
            skip_space(&r);
            if (*r.p == ']') {
                r.p++;
                break;
            }
            if (expect(&r, ',')) goto done;
        }
    }
    skip_space(&r);
    if (*r.p != '\0') {
        fail(&r, "text after the list");
        goto done;
    }
    result = count;
    *records = list;
    list = NULL;
done:
    free(list);
    free(text);
    return result;
}

const json_field *json_find(const json_record *record, const char *name) {
    for (int i = 0; i < record->field_count; ++i)
        if (strcmp(record->fields[i].name, name) == 0) return &record->fields[i];
    return NULL;
}
