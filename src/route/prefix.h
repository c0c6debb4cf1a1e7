/* What a router knows of a request's prompt without its model's template
 * or tokenizer (docs/routing.md): the request's prefix-bearing fields in a
 * canonical text (the model, the tools, the system prompt or instructions,
 * then every message, each as compact JSON with sorted keys, in order; a
 * completion's prompt as it is), cut into fixed-size chunks whose chain
 * hashes (xxh3 of the chunk seeded with the previous chunk's hash) name
 * every whole-chunk prefix, like the backends' KV blocks do
 * (docs/prompt-cache.md). A request whose messages continue another's has
 * the other's chunks as its first chunks. */
#ifndef HR_ROUTE_PREFIX_H
#define HR_ROUTE_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_PREFIX_MAX_CHUNKS 4096 /* beyond: the prefix's later chunks are not looked at */

typedef struct hr_prefix {
    uint64_t chunk[HR_PREFIX_MAX_CHUNKS]; /* chain hashes of the whole chunks */
    int n_chunks;
    /* the conversation: the chunk that holds the end of the first user
     * message (a completion: the first chunk), and the hash of the text up
     * to there (the key on the hash ring of a prefix no replica is known
     * to hold) */
    int conv_chunk;
    uint64_t conv_key;
    char model[256];     /* "model", or "" */
    char prev_id[128];   /* /v1/responses' previous_response_id, or "" */
} hr_prefix;

/* The prefix of a generation request to url (its body: len bytes). false:
 * the body is not a JSON object (the replica's own 400 will say why). */
bool hr_prefix_of(const char *url, const char *body, size_t len, size_t chunk_bytes,
                  hr_prefix *out);

#endif
