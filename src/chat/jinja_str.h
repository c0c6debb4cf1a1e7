/* Python string operations on Jinja string values (code-point aware).
 * Each returns a new value, or an OOM-marked value (hr__jv_oom). */
#ifndef HR_CHAT_JINJA_STR_H
#define HR_CHAT_JINJA_STR_H

#include "chat/jinja_value.h"

enum { HR_JCASE_LOWER, HR_JCASE_UPPER, HR_JCASE_CAPITALIZE, HR_JCASE_TITLE, HR_JCASE_FOLD };

/* str.lower/upper/capitalize/title/casefold (casefold: lower, and ß -> ss) */
hr_jv hr__jstr_case(hr_jv s, int mode);
/* str.strip/lstrip/rstrip; chars NONE/UNDEF = whitespace */
hr_jv hr__jstr_strip(hr_jv s, hr_jv chars, int left, int right);
/* str.replace(old, new, count); count < 0 = all */
hr_jv hr__jstr_replace(hr_jv s, hr_jv old, hr_jv rep, int64_t count, size_t max);
/* str.splitlines() as a list (keepends=False) */
hr_jv hr__jstr_splitlines(hr_jv s);
/* str.split / rsplit; sep NONE = runs of whitespace */
hr_jv hr__jstr_split(hr_jv s, hr_jv sep, int64_t maxsplit, int right);
/* Is every cased character lower (upper) and is there one? */
int hr__jstr_is_case(hr_jv s, int upper);
/* HTML-escape like markupsafe.escape */
void hr__jstr_escape(hr_jbuf *b, hr_jv s);

#endif
