/* svc_json.h — request bodies to jansson trees without a json_t per number
 * in the large flat arrays that carry tensors; every other value is built
 * by jansson exactly as json_loadb would build it. */
#ifndef SVC_JSON_H
#define SVC_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Flat arrays of at least this many numbers become compact arrays. Below
 * it (shapes have at most 8 dimensions) arrays stay plain jansson arrays. */
#define SVC_JSON_COMPACT_MIN 16

/* Strings of at least this many bytes with no backslash escape, no control
 * character and no byte past 0x7f (base64 tensors) are found by memchr and
 * copied once, never lexed by jansson. It must stay above 18: jansson quotes
 * a string token of 20 bytes or fewer in its errors, a placeholder never. */
#ifndef SVC_JSON_STRING_MIN
#define SVC_JSON_STRING_MIN 4096
#endif
#if SVC_JSON_STRING_MIN < 19
#error "SVC_JSON_STRING_MIN must be at least 19"
#endif

/* Parses text[0..len) like json_loadb(text, len, JSON_DECODE_ANY |
 * JSON_REJECT_DUPLICATES, err): same accepted documents, same error texts
 * and positions (line, column, byte), except that
 *   - every flat array of SVC_JSON_COMPACT_MIN or more JSON numbers is a
 *     compact array in the tree (see svc_json_numbers): its text is kept,
 *     one byte per byte, instead of about 40 bytes of json_t per element;
 *   - a long plain string (SVC_JSON_STRING_MIN) is the same jansson string,
 *     built from one copy of its bytes rather than by jansson's lexer;
 *   - a number literal with a non-zero digit that reads as 0 (1e-999) is
 *     refused, the error naming its path ("inputs.x.data[3]") and position.
 * Returns a new reference the caller owns, or NULL with err filled.
 * text need not be NUL-terminated and is not referenced afterwards. */
json_t *svc_json_parse(const char *text, size_t len, json_error_t *err);

/* What a request body may hold, checked by svc_json_parse_limits in its
 * one pass over the text, before jansson builds any value: memory for a
 * body of B bytes is then about 2·B plus at most max_values jansson values
 * (up to ~250 bytes each for an empty object), whatever its shape. */
#define SVC_JSON_MAX_DEPTH 32       /* default max_depth */
#define SVC_JSON_MAX_VALUES 100000  /* default max_values */
#define SVC_JSON_DEPTH_CAP 128      /* the most max_depth may be */

typedef struct svc_json_limits {
    unsigned max_depth;         /* arrays and objects inside one another (the
                                   top-level one is 1); 0: SVC_JSON_MAX_DEPTH,
                                   more than SVC_JSON_DEPTH_CAP: the cap */
    size_t max_values;          /* values of the document: every object, array,
                                   string, number, true, false and null, a
                                   compact array counting as one; 0:
                                   SVC_JSON_MAX_VALUES */
    const char *const *fields;  /* NULL-terminated: the only member names the
                                   top-level object may have (compared after
                                   unescaping); NULL: any */
} svc_json_limits;

/* Which limit svc_json_parse_limits refused the text for. */
typedef enum svc_json_over {
    SVC_JSON_WITHIN = 0,
    SVC_JSON_OVER_DEPTH,
    SVC_JSON_OVER_VALUES,
    SVC_JSON_OVER_FIELD,        /* a top-level member not in fields */
} svc_json_over;

/* svc_json_parse within lim (NULL: no limit, exactly svc_json_parse). The
 * scan stops at the first value past a limit and jansson never runs: then
 * NULL, *over says which (over may be NULL), err->text the message, its
 * position the byte where the scan stopped, and for SVC_JSON_OVER_FIELD
 * err->source the member's name (unescaped, cut at 60 bytes). A text that
 * is not JSON may be refused for a limit rather than for its syntax when
 * the limit comes first. Any other failure is svc_json_parse's, with *over
 * SVC_JSON_WITHIN. The scan's memory does not grow with the nesting. */
json_t *svc_json_parse_limits(const char *text, size_t len, const svc_json_limits *lim,
                              json_error_t *err, svc_json_over *over);

/* 1 if j is a compact array made by svc_json_parse, with *text and *len
 * set to its elements' text (commas and whitespace between them; borrowed
 * from j) and *count to the number of elements; 0 for anything else. A
 * client cannot forge one: its tag holds a NUL byte, which no string read
 * without JSON_ALLOW_NUL can. */
int svc_json_numbers(const json_t *j, const char **text, size_t *len, size_t *count);

/* One number of a compact array, read as jansson reads a number token. */
typedef struct svc_json_num {
    const char *text; /* the literal, borrowed */
    size_t len;
    int is_int;       /* no '.', 'e' or 'E': jansson's JSON_INTEGER */
    int64_t i;        /* when is_int */
    double d;         /* the value as json_number_value gives it */
} svc_json_num;

/* Reads the next element of a compact array's text, starting at *pos
 * (0 for the first), and advances *pos. Returns 1 with *out filled, 0 at
 * the end, -1 if the text is not a compact array's (never for a tree from
 * svc_json_parse). */
int svc_json_numbers_next(const char *text, size_t len, size_t *pos, svc_json_num *out);

/* The text json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) gives, byte for
 * byte, except that reals take their shortest form that reads back
 * exactly (0.006, where jansson writes 17 digits: 0.0060000000000000001);
 * and long strings with nothing to escape (base64 tensors) go in one copy
 * where jansson's dump steps through every byte (a fifth of a node's CPU
 * on small jobs). Returns a malloc'd NUL-terminated text (*len bytes
 * when len is not NULL), or NULL on ENOMEM or a tree deeper than 2048. */
char *svc_json_dump(const json_t *j, size_t *len);

/* obj's members in the order of names (a JSON array of strings): a new
 * object with each name of names, its value obj's (null where obj has
 * none), then obj's members that names lacks, in obj's order. NULL on
 * ENOMEM. What lets a reply the C side builds follow an order SQL
 * declares. */
json_t *svc_json_ordered(const json_t *obj, const json_t *names);

#endif
