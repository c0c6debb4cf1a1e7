/* A chat with a model through libhearth: one line of stdin is one user
 * turn; the answer streams to stdout. usage: chat MODEL [MAX_TOKENS]
 * Build: cc chat.c $(pkg-config --cflags --libs hearth) */
#include <hearth.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *msgs;   /* the conversation as a JSON array, "[" ... */
static size_t len;

static void add(const char *role, const char *text) { /* append {"role", "content"} */
    msgs = realloc(msgs, len + 6 * strlen(text) + 64);
    len += sprintf(msgs + len, "%s{\"role\":\"%s\",\"content\":\"", len > 1 ? "," : "", role);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        len += sprintf(msgs + len, *p < 0x20 || *p == '"' || *p == '\\' ? "\\u%04x" : "%c", *p);
    len += sprintf(msgs + len, "\"}");
}

static int on_event(const hr_gen_event *ev, void *user) {
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    char **reply = user;
    size_t n = strlen(*reply);
    *reply = realloc(*reply, n + ev->text_len + 1);
    memcpy(*reply + n, ev->text, ev->text_len);
    (*reply)[n + ev->text_len] = 0;
    return 0; /* non-zero would cancel */
}

int main(int argc, char **argv) {
    hr_llm *llm = NULL;
    hr_session *s = NULL;
    hr_error err;
    if (argc < 2 || hr_llm_load(&llm, argv[1], NULL, &err) ||
        hr_session_new(&s, llm, &(hr_session_opts){.max_batch = 1}, &err)) {
        fprintf(stderr, "chat: %s\n", argc < 2 ? "usage: chat MODEL [MAX_TOKENS]" : err.msg);
        return 1;
    }
    msgs = malloc(2);
    strcpy(msgs, "[");
    len = 1;
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        add("user", line);
        strcpy(msgs + len, "]"); /* closed for the request, reopened by the next add */
        hr_gen_params p;
        hr_gen_params_default(&p);
        p.messages_json = msgs;
        p.max_tokens = argc > 2 ? atoi(argv[2]) : 128;
        p.temperature = 0;
        hr_gen *g = NULL;
        char *reply = calloc(1, 1);
        int rc = hr_gen_submit(&g, s, &p, &err);
        if (!rc)
            rc = hr_gen_run(g, on_event, &reply, &err);
        hr_gen_free(g);
        if (rc) {
            fprintf(stderr, "chat: %s\n", err.msg);
            return 1;
        }
        printf("\n");
        add("assistant", reply);
        free(reply);
    }
    free(msgs);
    hr_session_free(s);
    hr_llm_free(llm);
    return 0;
}
