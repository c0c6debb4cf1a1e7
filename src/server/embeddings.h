/* POST /v1/embeddings: the request's parser (fuzzed) and the route. */
#ifndef HR_SERVER_EMBEDDINGS_H
#define HR_SERVER_EMBEDDINGS_H

#include "server/internal.h"

#define HR_EMB_MAX_INPUTS 2048 /* OpenAI's bound on a request's inputs */

typedef struct hr_emb_req {
    const char *model;         /* points into the request */
    hr_embed_input *in;        /* [n]: text points into the request */
    int32_t **ids;             /* [n] token lists (owned), NULL for texts */
    int n;
    int dimensions;            /* 0: the model's */
    bool base64;               /* encoding_format "base64" */
    const char *prompt_name, *prompt; /* hearth's fields; NULL: absent */
} hr_emb_req;

/* Validate a request body (a JSON object that must outlive q) for a model
 * of embedding length dim and n_vocab ids: false with *err (a 400 naming
 * the field; 500 out of memory). hr__emb_req_free q either way. */
bool hr__embeddings_parse(const json_t *root, int dim, int n_vocab, hr_emb_req *q,
                          hr_reply *err);
void hr__emb_req_free(hr_emb_req *q);

hr_reply hr__route_embeddings(hr_server *s, const char *body, size_t len);

#endif
