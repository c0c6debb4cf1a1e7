/* --isolate (isolate.h). */
#include "server/isolate.h"
#include "core/error.h"

int hr__child_start(hr_server *s, char *const *argv, hr_error *err) {
    (void)s;
    (void)argv;
    return hr_err(err, HR_EUNSUPPORTED, "not supported yet: --isolate");
}
void hr__child_stop(hr_child *ch) { (void)ch; }
bool hr__child_submit(hr_child *ch, hr_outbox *b, const char *method, const char *url,
                      const char *body, size_t len) {
    (void)ch; (void)b; (void)method; (void)url; (void)body; (void)len;
    return false;
}
void hr__child_cancel(hr_child *ch, hr_outbox *b) { (void)ch; (void)b; }
const char *hr__child_down(hr_child *ch) { (void)ch; return "not started"; }
int hr_server_serve_parent(hr_server *s) { (void)s; return 1; }
