/* Jinja lexer: template source -> token array, with jinja2's whitespace
 * rules as transformers configures them (trim_blocks, lstrip_blocks,
 * `-`/`+` markers, one trailing newline dropped, newlines normalized). */
#ifndef HR_CHAT_JINJA_LEX_H
#define HR_CHAT_JINJA_LEX_H

#include "hearth.h"

#include <stddef.h>
#include <stdint.h>

typedef enum hr_jtok_type {
    HR_JT_EOF,
    HR_JT_DATA, /* template text: s/len point into the normalized source */
    HR_JT_VAR_BEGIN,
    HR_JT_VAR_END,
    HR_JT_BLOCK_BEGIN,
    HR_JT_BLOCK_END,
    HR_JT_NAME,
    HR_JT_STRING, /* s/len: the decoded value (owned by the token array) */
    HR_JT_INT,
    HR_JT_FLOAT,
    HR_JT_OP,
} hr_jtok_type;

/* Operators; the value is the token's `op`. */
enum {
    HR_JOP_ADD = 1, HR_JOP_SUB, HR_JOP_MUL, HR_JOP_DIV, HR_JOP_FLOORDIV,
    HR_JOP_MOD, HR_JOP_POW, HR_JOP_TILDE, HR_JOP_LBRACKET, HR_JOP_RBRACKET,
    HR_JOP_LPAREN, HR_JOP_RPAREN, HR_JOP_LBRACE, HR_JOP_RBRACE, HR_JOP_EQ,
    HR_JOP_NE, HR_JOP_GT, HR_JOP_GTEQ, HR_JOP_LT, HR_JOP_LTEQ, HR_JOP_ASSIGN,
    HR_JOP_DOT, HR_JOP_COLON, HR_JOP_PIPE, HR_JOP_COMMA, HR_JOP_SEMICOLON,
};

typedef struct hr_jtok {
    uint8_t type;
    uint8_t op;
    long pos; /* byte offset in the normalized source */
    const char *s;
    size_t len;
    int64_t i;
    double f;
} hr_jtok;

typedef struct hr_jlex {
    char *src; /* normalized source (owned) */
    size_t src_len;
    hr_jtok *tok;
    size_t n, cap;
    char **strings; /* decoded string literals (owned) */
    size_t n_strings, cap_strings;
} hr_jlex;

/* Tokenize src[0..len). On error returns a negative HR_E* code with err
 * (message and byte position) filled; lx is then already released. */
int hr__jlex_run(hr_jlex *lx, const char *src, size_t len, hr_error *err);
void hr__jlex_free(hr_jlex *lx);

/* "line L, column C" of a byte position, for messages. */
void hr__jlex_linecol(const char *src, size_t len, long pos, int *line, int *col);

#endif
