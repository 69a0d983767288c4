/* json_records.h: a small reader for the bench's JSON output: a list of flat objects of strings, numbers, booleans and nulls. */
#ifndef FLASHCL_TESTS_JSON_RECORDS_H
#define FLASHCL_TESTS_JSON_RECORDS_H

#include <stddef.h>

typedef enum { JSON_NULL, JSON_NUMBER, JSON_STRING, JSON_BOOL } json_type;

typedef struct json_field {
    char name[64];
    json_type type;
    double number;   /* JSON_NUMBER, and JSON_BOOL as 0 / 1 */
    char text[256];  /* JSON_STRING (escapes resolved for \" and \\) */
} json_field;

#define JSON_MAX_FIELDS 32

typedef struct json_record {
    json_field fields[JSON_MAX_FIELDS];
    int field_count;
} json_record;

/* Parses the whole file; returns the record count and sets *records
 * (malloc'ed), or -1 with a reason in error if the text is not such a list. */
int json_read_records(const char *path, json_record **records, char *error, size_t error_size);

/* The field called name, or NULL. */
const json_field *json_find(const json_record *record, const char *name);

#endif
