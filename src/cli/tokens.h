/* "1,2,3" lists of token ids on the command line. */
#ifndef HR_CLI_TOKENS_H
#define HR_CLI_TOKENS_H

#include "hearth.h"

#include <stdint.h>

/* Parse a comma-separated list of non-negative ids into a malloc'd array. */
int hr_parse_token_list(const char *s, int32_t **out, int *n, hr_error *err);

#endif
